#!/usr/bin/env bash
# `make eval`: the chapter RAG's retrieval quality on every development manual, one table per
# manual and the macro-average over manuals. The two given manuals come from the shared test
# data; the others are built from their pinned Debian packages (tests/eval/manuals/build.sh)
# and labelled in tests/eval/manuals/NAME/questions.jsonl.
#
#   bash tests/eval/run.sh [--details] [--sweep]   (needs `cargo build --release -p chapter-eval`)
set -euo pipefail
cd "$(dirname "$0")/../.."

SHARED="${QUARRY_SHARED_DATA:-../shared/data}"
MODELS="${QUARRY_MODELS:-$HOME/.cache/quarry/models}"
MANUALS="${QUARRY_MANUALS:-$HOME/.cache/quarry/manuals}"
BIN="${CARGO_TARGET_DIR:-target}/release/chapter-eval"

[ -d "$SHARED/manuals" ] || { echo "run.sh: $SHARED/manuals is missing: set QUARRY_SHARED_DATA to the shared test data" >&2; exit 2; }
[ -x "$BIN" ] || { echo "run.sh: $BIN is missing: cargo build --release -p chapter-eval" >&2; exit 2; }
bash tests/eval/manuals/build.sh

# QUARRY_EVAL_MINILM=all-minilm-l6-v2-int8 scores the English manuals with the int8 MiniLM
# (QUARRY_EVAL_BACKEND=onnxruntime runs the models with onnxruntime).
MINILM="${QUARRY_EVAL_MINILM:-all-minilm-l6-v2}"
specs=(
  "rclone=$SHARED/manuals/rclone/MANUAL.md,$SHARED/manuals/rclone/questions.jsonl,$MODELS/$MINILM"
  "trpl-zh-cn=$SHARED/manuals/trpl-zh-cn/manual.md,$SHARED/manuals/trpl-zh-cn/questions.jsonl,$MODELS/multilingual-e5-small"
)
# The built manuals, each with the model manuals.json names for its language; their questions
# checked against the built sections first.
while read -r name model; do
  python3 tests/eval/manuals/check_questions.py --manual "$name" "tests/eval/manuals/$name/questions.jsonl" >&2
  [ "$model" = all-minilm-l6-v2 ] && model="$MINILM"
  specs+=("$name=$MANUALS/$name/manual.md,tests/eval/manuals/$name/questions.jsonl,$MODELS/$model,$MANUALS/$name/sections.jsonl")
done < <(python3 -c '
import json, sys
for m in json.load(open("tests/eval/manuals/manuals.json"))["manuals"]:
    print(m["name"], m["embedding_model"])')

exec "$BIN" "$@" "${specs[@]}"
