#!/usr/bin/env bash
# `make eval-docx`: the docx-search tool on the same development benchmark as the chapter RAG:
# each manual as DOCX (pandoc's, with real heading styles), the same labelled questions, scored
# by heading path through the host (`quarry eval --compare`: global vector, global hybrid, and
# docx-search as configured). Indexes are cached in ~/.cache/quarry/eval-docx/NAME.
#
#   bash tests/eval/docx.sh [quarry eval options]   (needs the release host and components:
#   make host components, or the demo's host built with --features nn)
set -euo pipefail
cd "$(dirname "$0")/../.."

SHARED="$(cd "${QUARRY_SHARED_DATA:-../shared/data}" && pwd)"
MODELS="${QUARRY_MODELS:-$HOME/.cache/quarry/models}"
MANUALS="${QUARRY_MANUALS:-$HOME/.cache/quarry/manuals}"
TARGET="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
BIN="$TARGET/release/quarry"
GUESTS="$TARGET/guest/wasm32-wasip2/release"
CACHE="$HOME/.cache/quarry/eval-docx"
for f in "$BIN" "$GUESTS/docx_search.wasm" "$GUESTS/embedder_onnx.wasm"; do
  [ -e "$f" ] || { echo "docx.sh: $f is missing: make host components" >&2; exit 2; }
done
bash tests/eval/manuals/build.sh >&2
cores="$(nproc)"

# name docx questions sections model
manuals=(
  "rclone $SHARED/docx/generated/rclone_manual.pandoc.docx $SHARED/manuals/rclone/questions.jsonl $SHARED/manuals/rclone/sections.jsonl all-minilm-l6-v2"
  "trpl-zh-cn $SHARED/docx/generated/trpl_zh_cn.pandoc.docx $SHARED/manuals/trpl-zh-cn/questions.jsonl $SHARED/manuals/trpl-zh-cn/sections.jsonl multilingual-e5-small"
)
while read -r name model; do
  manuals+=("$name $MANUALS/$name/manual.docx $PWD/tests/eval/manuals/$name/questions.jsonl $MANUALS/$name/sections.jsonl $model")
done < <(python3 -c '
import json
for m in json.load(open("tests/eval/manuals/manuals.json"))["manuals"]:
    print(m["name"], m["embedding_model"])')

for line in "${manuals[@]}"; do
  read -r name docx questions sections model <<< "$line"
  dir="$CACHE/$name"
  mkdir -p "$dir/docs" "$dir/index"
  cp -u "$docx" "$dir/docs/manual.docx"
  cat > "$dir/quarry.toml" <<TOML
[models.m]
dir = "$MODELS/$model"
[embedders.m]
component = "$GUESTS/embedder_onnx.wasm"
config = { model = "m" }
pool = $cores
[embedders.m.grants]
models = ["m"]
memory = "1GiB"
deadline = "600s"
[tools.docs]
component = "$GUESTS/docx_search.wasm"
embedder = "m"
config = { docx = "/docs/manual.docx", index_dir = "/index" }
[tools.docs.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index", guest = "/index", mode = "rw" }]
memory = "2GiB"
deadline = "3600s"
TOML
  echo "== $name ($model)"
  "$BIN" --config "$dir/quarry.toml" eval docs.search_docx "$questions" --sections "$sections" --compare "$@"
done
