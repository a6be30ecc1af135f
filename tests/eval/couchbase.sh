#!/usr/bin/env bash
# `make eval-couchbase`: `make eval` with every manual's corpus kept twice, locally and in
# Couchbase, side by side; it fails unless each column of each manual is within one question.
# The cluster is the project's fake (fake-couchbase, answering as Couchbase 8.0), unless
# QUARRY_EVAL_COUCHBASE already names one: the JSON line
#   {"connection_string": "couchbase://...", "username": "...", "password": "...", "bucket": "...", "scope": "..."}
# with, in that bucket and scope, an empty collection per manual (rclone, trpl-zh-cn, and the
# names in tests/eval/manuals/manuals.json).
#
#   bash tests/eval/couchbase.sh [--details]   (needs chapter-eval built with --features couchbase
#                                               and fake-couchbase, both release)
set -euo pipefail
cd "$(dirname "$0")/../.."

FAKE="${CARGO_TARGET_DIR:-target}/release/fake-couchbase"
if [ -z "${QUARRY_EVAL_COUCHBASE:-}" ]; then
  [ -x "$FAKE" ] || { echo "couchbase.sh: $FAKE is missing: cargo build --release -p quarry-tests --bin fake-couchbase" >&2; exit 2; }
  mapfile -t collections < <(python3 -c '
import json
print("rclone"); print("trpl-zh-cn")
for m in json.load(open("tests/eval/manuals/manuals.json"))["manuals"]: print(m["name"])')
  # The fake serves until its standard input closes: a pipe this script holds open.
  exec 3> >("$FAKE" "${collections[@]}" > "${TMPDIR:-/tmp}/fake-couchbase.$$")
  trap 'exec 3>&-; rm -f "${TMPDIR:-/tmp}/fake-couchbase.$$"' EXIT
  for _ in $(seq 100); do
    [ -s "${TMPDIR:-/tmp}/fake-couchbase.$$" ] && break
    sleep 0.1
  done
  QUARRY_EVAL_COUCHBASE="$(head -1 "${TMPDIR:-/tmp}/fake-couchbase.$$")"
  [ -n "$QUARRY_EVAL_COUCHBASE" ] || { echo "couchbase.sh: fake-couchbase did not start" >&2; exit 1; }
  export QUARRY_EVAL_COUCHBASE
fi
bash tests/eval/run.sh --couchbase "$@"
