#!/usr/bin/env bash
# An onnxruntime older than the host needs (1.20.1; the host needs 1.22 or later), for the test
# that a library of the wrong version is refused at load with its path and the version needed.
# From its pinned PyPI wheel, checked by sha256, into ~/.cache/quarry/old-onnxruntime/.
set -euo pipefail
WHEEL=onnxruntime-1.20.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
SHA256=5eec64c0269dcdb8d9a9a53dc4d64f87b9e0c19801d9321246a53b7eb5a7d1bc
OUT="$HOME/.cache/quarry/old-onnxruntime"
[ -f "$OUT/libonnxruntime.so" ] && exit 0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --disable-pip-version-check onnxruntime==1.20.1 --no-deps --only-binary=:all: \
  --python-version 3.11 --platform manylinux_2_27_x86_64 -d "$work"
echo "$SHA256  $work/$WHEEL" | sha256sum -c --quiet - \
  || { echo "old-onnxruntime.sh: $WHEEL does not match its pinned sha256" >&2; exit 1; }
python3 - "$work/$WHEEL" "$work" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("onnxruntime/capi/libonnxruntime.so."):
        z.extract(n, sys.argv[2])
PY
mkdir -p "$OUT"
mv "$work"/onnxruntime/capi/libonnxruntime.so.* "$OUT/libonnxruntime.so"
echo "old-onnxruntime.sh: onnxruntime 1.20.1 in $OUT"
