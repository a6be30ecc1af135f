#!/usr/bin/env python3
"""onnxruntime side of the embedder benchmark (tests/benches/embedder.rs runs it).

  bench_ort.py texts MODEL_DIR OUT_JSON        write 32 texts of exactly 128 and 256 tokens
  bench_ort.py run MODEL_DIR TEXTS_JSON THREADS  print sentences/s as JSON

Same model file, same tokenizer, same thread count as the wasm side; mean
pooling and normalisation included, so both sides do the same work.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

WORDS = (
    "the retrieval tool ranks documents by cosine similarity between query and passage embeddings "
    "rclone syncs files and directories to and from many cloud storage providers with checksums "
    "a component is sandboxed and only reaches what its configuration grants it at run time "
    "long manuals are split into chapters so that questions are routed to the right sections first"
).split()


def tokenizer(model_dir, window=None):
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def make_text(tok, length, offset):
    words, text = [], ""
    i = offset
    while True:
        words.append(WORDS[i % len(WORDS)])
        i += 1
        cand = " ".join(words)
        n = len(tok.encode(cand).ids)
        if n == length:
            return cand
        if n > length:
            words.pop()  # a word of several pieces overshot: try the next word instead
            i += 1
            if len(words) > 4 * length:
                raise SystemExit(f"cannot hit {length} tokens")


def texts(model_dir, out):
    tok = tokenizer(model_dir)
    data = {str(n): [make_text(tok, n, k * 7) for k in range(32)] for n in (128, 256)}
    Path(out).write_text(json.dumps(data))


def run(model_dir, texts_json, threads):
    tok = tokenizer(model_dir)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads)
    opts.inter_op_num_threads = 1
    t = time.perf_counter()
    sess = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - t
    data = json.loads(Path(texts_json).read_text())

    def embed(batch):
        enc = [tok.encode(x).ids for x in batch]
        n = max(len(e) for e in enc)
        ids = np.array([e + [0] * (n - len(e)) for e in enc], dtype=np.int64)
        mask = np.array([[1] * len(e) + [0] * (n - len(e)) for e in enc], dtype=np.int64)
        h = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    results = []
    for length, batch in [(128, 1), (128, 32), (256, 1), (256, 32)]:
        xs = data[str(length)]
        embed(xs[:batch])  # warm up
        t = time.perf_counter()
        done = 0
        while done < 64 or time.perf_counter() - t < 2.0:
            for i in range(0, len(xs), batch):
                embed(xs[i : i + batch])
                done += len(xs[i : i + batch])
        results.append({"tokens": length, "batch": batch, "per_s": done / (time.perf_counter() - t)})
    print(json.dumps({"load_s": load, "threads": int(threads), "results": results}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "texts":
        texts(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(__doc__)
