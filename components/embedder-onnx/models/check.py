#!/usr/bin/env python3
"""Check a converted model against reference embeddings with onnxruntime.

Tokenizes each reference sentence with the model's tokenizer.json (truncated at
the model's window, no padding), runs the ONNX model, mean-pools over tokens
and L2-normalises, and prints the cosine to the reference vector. Exits 1 if
any cosine is below the threshold.

Usage: check.py MODEL_DIR SENTENCES_TXT REFERENCE_JSON MAX_TOKENS MIN_COSINE
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    model_dir, sentences, reference, max_tokens, min_cos = sys.argv[1:]
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(int(max_tokens))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    refs = json.loads(Path(reference).read_text())
    lines = [l for l in Path(sentences).read_text().splitlines() if l.strip()]
    worst = 1.0
    for text, ref in zip(lines, refs):
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        hidden = sess.run(["last_hidden_state"], feeds)[0][0]
        v = hidden.mean(axis=0)
        v /= np.linalg.norm(v)
        r = np.asarray(ref, dtype=np.float64)
        cos = float(v @ r / np.linalg.norm(r))
        worst = min(worst, cos)
        print(f"{cos:.7f}  {len(enc.ids):4d} tokens  {text[:60]!r}")
    print(f"worst cosine {worst:.7f} (threshold {min_cos})")
    sys.exit(0 if worst >= float(min_cos) else 1)


if __name__ == "__main__":
    main()
