#!/usr/bin/env python3
"""The REAL CrewAI DOCXSearchTool, fully offline, for the side-by-side DOCX benchmark.

  crewai_real_docx.py DOCX MODEL_DIR QUESTIONS_JSONL THREADS

Run it with the CrewAI venv's python (~/.cache/quarry/venvs/crewai/bin/python). Unlike
crewai_docx.py (a re-implementation of what the tool does), this drives crewai-tools itself:

- `crewai_tools.DOCXSearchTool(docx=..., config=...)`: RagTool -> CrewAIRagAdapter ->
  crewai.rag ChromaDBClient. The tool loads the DOCX with python-docx (non-empty paragraphs,
  tables dropped), splits it with its DocxChunker (2500/250) and upserts the chunks, in
  batches of 100, into a chromadb PersistentClient collection (cosine space); chromadb calls
  the embedding function.
- embedder: CrewAI's "onnx" embedding provider, which is chromadb's ONNXMiniLM_L6_V2 (the
  tokenizer truncates at 256 and pads every text to 256; batches of 32; mean pooling + L2).
  That class only looks for its files in `Path.home()/.cache/chroma/onnx_models/
  all-MiniLM-L6-v2/onnx/` and downloads a tarball from S3 when any of six files is missing.
  Offline trick: HOME (and the XDG dirs and TMPDIR) point at a private temp dir before
  crewai/chromadb are imported, and that dir is populated from MODEL_DIR: model.onnx and
  tokenizer.json are symlinked; vocab.txt, special_tokens_map.json, tokenizer_config.json
  and config.json (which the class only checks for existence) are derived from
  tokenizer.json / quarry-model.json. Nothing is written into the user's real caches.
  execution providers are pinned to CPUExecutionProvider through the provider's own config
  (the venv's onnxruntime also lists AzureExecutionProvider).
- the vector store: chromadb PersistentClient in the temp dir (the tool's default is a
  persistent client under the user's app-data dir), telemetry off.
- each query is one `tool.run(search_query=...)` call, as an agent makes it (tool defaults:
  limit 5, similarity threshold 0.6).

ONNXMiniLM_L6_V2 builds its own SessionOptions and exposes no thread setting, so THREADS is
NOT applied: onnxruntime uses its default intra-op pool (one thread per physical core). The
JSON says so.

Guards: every outgoing non-Unix socket connection is refused and counted
("network_attempts" in the JSON); the embedder's cache path is checked to be private before
use; the temp dir is removed at exit. The embeddings are checked against onnxruntime run
directly on MODEL_DIR/model.onnx (mean pooling + L2, truncation 256): cosine >= 0.999, printed
to stderr (exit status 2 if it fails).

Prints one JSON object on stdout.
"""

import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

WINDOW = 256
PARITY_MIN = 0.999

# ---------------------------------------------------------------- isolation, before imports

_network_attempts = []
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guard(sock, address):
    if sock.family != getattr(socket, "AF_UNIX", None):
        _network_attempts.append(repr(address))
        raise OSError(f"network disabled by crewai_real_docx.py (attempted {address!r})")


def _connect(self, address):
    _guard(self, address)
    return _real_connect(self, address)


def _connect_ex(self, address):
    _guard(self, address)
    return _real_connect_ex(self, address)


socket.socket.connect = _connect
socket.socket.connect_ex = _connect_ex

WORK = Path(tempfile.mkdtemp(prefix="crewai-real-docx-")).resolve()
HOME = WORK / "home"
for sub in ("", ".cache", ".config", ".local/share", "tmp"):
    (HOME / sub).mkdir(parents=True, exist_ok=True)
os.environ.update({
    "HOME": str(HOME),
    "XDG_CACHE_HOME": str(HOME / ".cache"),
    "XDG_CONFIG_HOME": str(HOME / ".config"),
    "XDG_DATA_HOME": str(HOME / ".local/share"),
    "TMPDIR": str(HOME / "tmp"),  # crewai_core's file locks live in the temp dir
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "CHROMA_TELEMETRY": "False",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
})
os.environ.pop("REDIS_URL", None)
os.environ.pop("CREWAI_TOOLS_ALLOW_UNSAFE_PATHS", None)
tempfile.tempdir = str(HOME / "tmp")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the private chroma cache

def populate_chroma_cache(model_dir: Path) -> Path:
    """Lay out HOME/.cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx/ from MODEL_DIR."""
    onnx_dir = HOME / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    for name in ("model.onnx", "tokenizer.json"):
        src = (model_dir / name).resolve()
        if not src.is_file():
            sys.exit(f"missing {src}")
        (onnx_dir / name).symlink_to(src)

    tok = json.loads((model_dir / "tokenizer.json").read_text())
    meta = {}
    if (model_dir / "quarry-model.json").is_file():
        meta = json.loads((model_dir / "quarry-model.json").read_text())
    model = tok["model"]
    if model.get("type") != "WordPiece":
        sys.exit(f"tokenizer.json is {model.get('type')}, not WordPiece: cannot derive vocab.txt")
    vocab = model["vocab"]  # token -> id
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        sys.exit("tokenizer.json vocab ids are not contiguous: cannot derive vocab.txt")
    (onnx_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")

    specials = {t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
    stm = {k: v for k, v in (("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
                             ("cls_token", "[CLS]"), ("mask_token", "[MASK]")) if v in specials}
    (onnx_dir / "special_tokens_map.json").write_text(json.dumps(stm, indent=2))
    norm = tok.get("normalizer") or {}
    (onnx_dir / "tokenizer_config.json").write_text(json.dumps({
        "do_lower_case": bool(norm.get("lowercase", True)),
        "strip_accents": norm.get("strip_accents"),
        "tokenize_chinese_chars": bool(norm.get("handle_chinese_chars", True)),
        "model_max_length": int(meta.get("max_tokens", WINDOW)),
        "tokenizer_class": "BertTokenizer",
        **stm,
    }, indent=2))
    # Only checked for existence by chromadb; a BERT config consistent with the model files.
    dim = int(meta.get("dimension", 384))
    (onnx_dir / "config.json").write_text(json.dumps({
        "_note": "derived by crewai_real_docx.py; chromadb never reads this file",
        "_name_or_path": meta.get("id", "sentence-transformers/all-MiniLM-L6-v2"),
        "architectures": ["BertModel"], "model_type": "bert",
        "hidden_size": dim, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 4 * dim, "hidden_act": "gelu", "max_position_embeddings": 512,
        "type_vocab_size": 2, "vocab_size": len(vocab), "pad_token_id": vocab.get("[PAD]", 0),
        "layer_norm_eps": 1e-12,
    }, indent=2))
    return onnx_dir


# ---------------------------------------------------------------- reference embedder

class Reference:
    """onnxruntime directly on model.onnx: truncation 256, no padding, mean pooling, L2."""

    def __init__(self, model_dir: Path, threads: int):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(WINDOW)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.sess = ort.InferenceSession(str(model_dir / "model.onnx"), opts,
                                         providers=["CPUExecutionProvider"])

    def __call__(self, text):
        import numpy as np

        e = self.tok.encode(text)
        ids = np.array([e.ids], dtype=np.int64)
        mask = np.array([e.attention_mask], dtype=np.int64)
        out = self.sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                   "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float32)
        v = (out * m).sum(1)[0] / max(float(m.sum()), 1e-9)
        return v / np.linalg.norm(v)


# ---------------------------------------------------------------- main

def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.split("\n\n")[1])
    docx = Path(sys.argv[1]).resolve()
    model_dir = Path(sys.argv[2]).resolve()
    queries_path = Path(sys.argv[3]).resolve()
    threads = int(sys.argv[4])
    queries = [json.loads(l)["question"] for l in open(queries_path) if l.strip()]
    queries = (queries * (100 // max(len(queries), 1) + 1))[:100]

    onnx_dir = populate_chroma_cache(model_dir)
    # RagTool.add only accepts files under the working directory (its path sandbox):
    # work from the document's directory rather than switching the sandbox off.
    os.chdir(docx.parent)

    out = {}
    t = time.perf_counter()
    import crewai
    from crewai_tools import DOCXSearchTool
    out["import_s"] = time.perf_counter() - t

    import chromadb
    from chromadb.config import Settings
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    if Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH).resolve() != onnx_dir.parent.resolve():
        sys.exit(f"chromadb would look for the model in {ONNXMiniLM_L6_V2.DOWNLOAD_PATH}, "
                 f"not in the private cache {onnx_dir.parent}: refusing to run")
    try:
        from importlib.metadata import version
        tools_version = version("crewai-tools")
    except Exception:
        tools_version = "?"

    config = {
        "embedding_model": {"provider": "onnx",
                            "config": {"preferred_providers": ["CPUExecutionProvider"]}},
        "vectordb": {"provider": "chromadb", "config": {"settings": Settings(
            persist_directory=str(WORK / "chroma"), is_persistent=True, allow_reset=True,
            anonymized_telemetry=False)}},
    }

    t, cpu = time.perf_counter(), time.process_time()  # every thread of the process
    tool = DOCXSearchTool(docx=str(docx), config=config)
    out["ingest_s"] = time.perf_counter() - t
    out["ingest_cpu_s"] = time.process_time() - cpu

    client = tool.adapter._client
    ef = client.embedding_function
    colls = client.client.list_collections()  # the tool's one collection, name sanitized
    if len(colls) != 1:
        sys.exit(f"expected one chromadb collection, found {[c.name for c in colls]}")
    coll = client.client.get_collection(colls[0].name)

    out["pipeline"] = f"crewai {crewai.__version__} (crewai-tools {tools_version}) DOCXSearchTool"
    out["index"] = f"chromadb {chromadb.__version__} PersistentClient (hnsw, cosine)"
    out["embedder"] = f"crewai 'onnx' provider = chromadb {type(ef).__name__} on {model_dir / 'model.onnx'}"

    answered = 0
    for q in queries[:5]:
        tool.run(search_query=q)
    lat = []
    for q in queries:
        t = time.perf_counter()
        r = tool.run(search_query=q)
        lat.append((time.perf_counter() - t) * 1000)
        answered += "No relevant content found." not in r
    lat.sort()
    out["query_p50_ms"] = lat[len(lat) // 2]
    out["query_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    out["queries_with_results"] = answered
    out["query_limit"] = tool.limit
    out["query_similarity_threshold"] = tool.similarity_threshold
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # ---- after the peak-RSS reading: counting and the parity check (a second session)
    got = coll.get(include=["documents", "metadatas"])
    docs = got["documents"]
    out["chunks"] = len(docs)
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tk.no_padding()
    tk.enable_truncation(WINDOW)
    enc = tk.encode_batch(docs) if docs else []
    out["tokens"] = sum(len(e.ids) for e in enc)
    out["tokens_padded"] = len(docs) * WINDOW  # ONNXMiniLM_L6_V2 pads every text to 256
    out["chunks_truncated"] = sum(len(e.ids) >= WINDOW for e in enc)
    metas = got.get("metadatas") or []
    out["tables_dropped"] = int(metas[0].get("tables", 0)) if metas else 0
    sess = ef.model
    so = sess.get_session_options()
    out["onnx_threads"] = {
        "requested": threads,
        "applied": False,
        "intra_op_num_threads": so.intra_op_num_threads,
        "note": "ONNXMiniLM_L6_V2 sets no thread count: onnxruntime default "
                f"(one per physical core; os.cpu_count()={os.cpu_count()})",
    }
    out["onnx_providers"] = sess.get_providers()

    ref = Reference(model_dir, threads)
    samples = ["How do I check out an old version of a project without creating a branch?"]
    if docs:
        samples.append(max(docs, key=len))  # a long chunk: exercises truncation at 256
    import numpy as np

    coss = []
    for s in samples:
        a = np.asarray(ef([s])[0], dtype=np.float64)
        b = np.asarray(ref(s), dtype=np.float64)
        coss.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    ok = min(coss) >= PARITY_MIN
    log(f"embedding parity (CrewAI onnx embedder vs onnxruntime on model.onnx, mean+L2, "
        f"trunc {WINDOW}): cosines {[round(c, 6) for c in coss]} -> {'OK' if ok else 'FAIL'} "
        f"(threshold {PARITY_MIN})")
    out["embedding_parity_min_cos"] = min(coss)
    out["network_attempts"] = len(_network_attempts)
    if _network_attempts:
        log("blocked network attempts:", _network_attempts[:10])
    print(json.dumps(out))
    sys.stdout.flush()
    if not ok:
        sys.exit(2)


if __name__ == "__main__":
    try:
        main()
    finally:
        os.chdir("/")
        shutil.rmtree(WORK, ignore_errors=True)
