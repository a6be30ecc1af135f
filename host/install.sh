#!/usr/bin/env bash
# `make install PREFIX=...`: the source build laid out as the wheel lays it out, so that the
# installed `quarry` finds its `builtin:` components and models wherever it is run from:
#   PREFIX/bin/quarry
#   PREFIX/share/quarry/components/NAME.wasm   the components the wheel carries
#   PREFIX/share/quarry/models/NAME            every model `make models` converted and checked
#
# Usage: install.sh [--dev] PREFIX
#   (default)  the release host (`make host`) and release components (`make components`)
#   --dev      the debug host `make test` builds (what tests/install/run.sh installs)
# A file already there is replaced whole (written beside, then renamed), so a running quarry
# keeps the one it started with.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
profile=release
if [ "${1:-}" = "--dev" ]; then profile=debug; shift; fi
[ $# -eq 1 ] || { echo "usage: install.sh [--dev] PREFIX   (make install PREFIX=~/.local)" >&2; exit 2; }
prefix="$(realpath -m "$1")"
target="${CARGO_TARGET_DIR:-$root/target}"
guests="$target/guest/wasm32-wasip2/release"
models="${QUARRY_MODELS:-$HOME/.cache/quarry/models}"
# shellcheck source=wheel/components.sh
source "$here/wheel/components.sh"

bin="$target/$profile/quarry"
[ -x "$bin" ] || { echo "install.sh: $bin is missing: run make host (or make install, which builds it)" >&2; exit 2; }
for c in "${COMPONENTS[@]}"; do
  [ -f "$guests/${c//-/_}.wasm" ] || { echo "install.sh: $guests/${c//-/_}.wasm is missing: run make components" >&2; exit 2; }
done
found=("$models"/*/quarry-model.json)
[ -e "${found[0]}" ] || { echo "install.sh: no model in $models: run make models" >&2; exit 2; }

# put FROM TO: a file or a directory, replaced whole.
put() {
  rm -rf "$2.new"
  cp -RL "$1" "$2.new"
  rm -rf "$2"
  mv "$2.new" "$2"
}
mkdir -p "$prefix/bin" "$prefix/share/quarry/components" "$prefix/share/quarry/models"
put "$bin" "$prefix/bin/quarry"
for c in "${COMPONENTS[@]}"; do
  put "$guests/${c//-/_}.wasm" "$prefix/share/quarry/components/$c.wasm"
done
names=()
for f in "${found[@]}"; do
  m="$(basename "$(dirname "$f")")"
  put "$(dirname "$f")" "$prefix/share/quarry/models/$m"
  names+=("$m")
done
echo "installed quarry ($profile) in $prefix/bin, components ${COMPONENTS[*]} and models ${names[*]} in $prefix/share/quarry"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "add $prefix/bin to your PATH to run it as quarry" ;;
esac
