#!/usr/bin/env bash
# Builds Quarry's two wheels into OUT (default: $CARGO_TARGET_DIR/wheels, else target/wheels):
#   quarry_wasm-VERSION-py3-none-PLATFORM.whl   `quarry` (on the environment's PATH) and the
#                                               components, in <prefix>/share/quarry/components
#   quarry_wasm_minilm-0.1.0-py3-none-any.whl   all-MiniLM-L6-v2, in <prefix>/share/quarry/models
#
# Usage: build.sh [--dev] [OUT]
#   (default)  the release wheel `make wheel` makes: manylinux2014 (glibc 2.17), linked through
#              zig (ziglang from PyPI), in its own target dir ($QUARRY_WHEEL_TARGET, default
#              ~/.cache/quarry/wheel-target): zig's linker would rebuild the tests' artifacts.
#   --dev      the host from the debug profile the tests already build (`make test`), tagged for
#              this machine's glibc: what the install test uses, to stay within CI's time.
# The components are release wasm either way (they are platform-independent), and the model is
# the one `make models` converted and checked.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dev=0
if [ "${1:-}" = "--dev" ]; then dev=1; shift; fi
target="${CARGO_TARGET_DIR:-$root/target}"
out="$(realpath -m "${1:-$target/wheels}")"
venv="${QUARRY_WHEEL_VENV:-$HOME/.cache/quarry/venvs/wheel}"
models="${QUARRY_MODELS:-$HOME/.cache/quarry/models}"
CARGO="${CARGO:-cargo}"
# shellcheck source=components.sh
source "$here/components.sh"

if ! "$venv/bin/maturin" --version 2>/dev/null | grep -q '^maturin 1.16.0$'; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0 ziglang==0.17.1
fi

# The components, staged where pyproject.toml's `data` takes them from.
args=()
for c in "${COMPONENTS[@]}"; do args+=(-p "$c"); done
"$CARGO" build --release --target wasm32-wasip2 --target-dir "$target/guest" "${args[@]}"
staged="$here/staged/data/share/quarry/components"
rm -rf "$here/staged"
mkdir -p "$staged"
for c in "${COMPONENTS[@]}"; do
  cp "$target/guest/wasm32-wasip2/release/${c//-/_}.wasm" "$staged/$c.wasm"
done

mkdir -p "$out"
rm -f "$out"/quarry_wasm-*.whl "$out"/quarry_wasm_minilm-*.whl
export PATH="$venv/bin:$PATH"
if [ "$dev" = 1 ]; then
  maturin build --quiet -m "$root/host/Cargo.toml" --profile dev --out "$out"
else
  CARGO_TARGET_DIR="${QUARRY_WHEEL_TARGET:-$HOME/.cache/quarry/wheel-target}" \
    maturin build --quiet -m "$root/host/Cargo.toml" --release --zig --compatibility manylinux2014 --out "$out"
fi

# The model: only as fetch.sh converted and checked it.
[ -f "$models/all-minilm-l6-v2/quarry-model.json" ] || bash "$root/components/embedder-onnx/models/fetch.sh" all-minilm-l6-v2
python3 "$here/model_wheel.py" "$models/all-minilm-l6-v2" all-minilm-l6-v2 quarry-wasm-minilm 0.1.0 "$here/MODEL-LICENSE" "$out" >/dev/null
ls -l "$out"/*.whl
