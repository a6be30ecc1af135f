#!/usr/bin/env python3
"""The CrewAI-equivalent DOCX pipeline, for the side-by-side benchmark (tests/benches/docx.rs
runs it and prints the ratios).

  crewai_docx.py DOCX MODEL_DIR QUERIES_JSONL THREADS

What CrewAI's DOCXSearchTool does, with the same local model as Quarry:
- python-docx, non-empty paragraphs joined by newlines (tables dropped);
- a recursive character splitter, 2500 characters with 250 of overlap, separators from blank
  lines down to sentences and words;
- the model under onnxruntime, truncating at the model's 256-token window, batches of 32
  padded to their longest text (as chromadb's ONNX embedder does, minus its pad-to-256);
- chromadb when it is installed (an in-memory collection, cosine space), otherwise a numpy
  brute-force index.

Prints one JSON object: phase times, chunk count, tokens embedded, peak RSS and warm query
latency over 100 queries.
"""

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from docx import Document
from tokenizers import Tokenizer

SIZE, OVERLAP = 2500, 250
SEPARATORS = ["\n\n", "\n", ". ", "! ", "? ", "; ", ", ", " ", ""]
WINDOW = 256
BATCH = 32


def split(text, seps=SEPARATORS):
    """Recursive character splitting with overlap, as LangChain-style splitters do."""
    if len(text) <= SIZE:
        return [text] if text.strip() else []
    sep = next((s for s in seps if s == "" or s in text), "")
    pieces = list(text) if sep == "" else text.split(sep)
    rest = seps[seps.index(sep) + 1:] if sep in seps else [""]
    chunks, current = [], ""
    for p in pieces:
        if len(p) > SIZE:
            if current.strip():
                chunks.append(current)
            current = ""
            chunks.extend(split(p, rest))
            continue
        candidate = p if not current else current + sep + p
        if len(candidate) <= SIZE:
            current = candidate
        else:
            if current.strip():
                chunks.append(current)
            tail = current[-OVERLAP:] if OVERLAP else ""
            current = (tail + sep + p) if len(tail + sep + p) <= SIZE else p
    if current.strip():
        chunks.append(current)
    return chunks


class Embedder:
    def __init__(self, model_dir, threads):
        self.tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self.tok.enable_truncation(WINDOW)
        self.tok.enable_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self.tokens = 0

    def __call__(self, texts):
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        self.tokens += int(mask.sum())
        out = self.sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float32)
        v = (out * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def main():
    docx, model_dir, queries_path, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    queries = [json.loads(l)["question"] for l in open(queries_path) if l.strip()]
    queries = (queries * (100 // max(len(queries), 1) + 1))[:100]
    embed = Embedder(model_dir, threads)
    out = {"pipeline": "python-docx + 2500/250 + onnxruntime"}

    cpu = time.process_time()  # every thread of the process: onnxruntime's too
    t = time.perf_counter()
    text = "\n".join(p.text for p in Document(docx).paragraphs if p.text.strip())
    out["parse_ms"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    chunks = split(text)
    out["chunk_ms"] = (time.perf_counter() - t) * 1000
    out["chunks"] = len(chunks)
    t = time.perf_counter()
    vectors = np.concatenate([embed(chunks[i:i + BATCH]) for i in range(0, len(chunks), BATCH)])
    out["embed_ms"] = (time.perf_counter() - t) * 1000
    out["tokens"] = embed.tokens
    t = time.perf_counter()
    try:
        import chromadb

        client = chromadb.EphemeralClient()
        coll = client.create_collection("bench", metadata={"hnsw:space": "cosine"})
        for i in range(0, len(chunks), 1000):
            coll.add(ids=[str(j) for j in range(i, min(i + 1000, len(chunks)))],
                     documents=chunks[i:i + 1000], embeddings=vectors[i:i + 1000].tolist())
        out["index"] = "chromadb " + chromadb.__version__

        def search(q):
            return coll.query(query_embeddings=embed([q]).tolist(), n_results=5)
    except ImportError:
        out["index"] = "numpy brute force"

        def search(q):
            s = vectors @ embed([q])[0]
            return np.argsort(-s)[:5]
    out["index_ms"] = (time.perf_counter() - t) * 1000
    out["ingest_cpu_s"] = time.process_time() - cpu
    for q in queries[:5]:
        search(q)
    lat = []
    for q in queries:
        t = time.perf_counter()
        search(q)
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    out["query_p50_ms"] = lat[len(lat) // 2]
    out["query_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["tables_dropped"] = len(Document(docx).tables)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
