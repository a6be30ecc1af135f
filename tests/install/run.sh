#!/usr/bin/env bash
# The install, as a user does it (`make test` runs it): the wheels built (the host from the
# debug profile the tests already built, `host/wheel/build.sh --dev`), installed into a fresh
# venv, then used from a shell with that venv and the system on its PATH and no Rust
# toolchain: `quarry --version`, `quarry init --manual` on a small manual, a search call, and
# CrewAI's MCPServerAdapter starting the installed `quarry` over stdio; then `make install`'s
# layout (host/install.sh) used the same way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venvs="${QUARRY_VENVS:-$HOME/.cache/quarry/venvs}"
wheels="$target/wheels-dev"
fail() { echo "install test: FAILED: $*" >&2; exit 1; }

bash "$root/host/wheel/build.sh" --dev "$wheels" >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps \
  "$wheels"/quarry_wasm-*.whl "$wheels"/quarry_wasm_minilm-*.whl
mkdir -p "$work/home/docs"
# A user's shell: the venv and the system, a home of its own, nothing of the build.
user() { (cd "$work/home" && env -i PATH="$work/venv/bin:/usr/bin:/bin" HOME="$work/home" \
  CREWAI_DISABLE_TELEMETRY=true OTEL_SDK_DISABLED=true ANONYMIZED_TELEMETRY=False "$@"); }
if user sh -c 'command -v cargo || command -v rustc' >/dev/null; then fail "a Rust toolchain is on the user's PATH"; fi
[ "$(user sh -c 'command -v quarry')" = "$work/venv/bin/quarry" ] || fail "quarry is not the venv's"

version="$(user quarry --version)"
echo "$version" | grep -Eq '^quarry [0-9]+\.[0-9]+\.[0-9]+ \(WIT quarry:retrieval@[0-9]+\.[0-9]+\.[0-9]+, commit ([0-9a-f]{12}|unknown)\)$' \
  || fail "quarry --version printed: $version"

# A small manual: rclone's introduction and its chapter on the global flags (--bwlimit among them).
manual="$root/host/demo/rclone/MANUAL.md"
{ sed -n 1,300p "$manual"; sed -n 8163,9088p "$manual"; } >"$work/home/docs/manual.md"
user quarry init --manual docs/manual.md >"$work/init.out" || fail "quarry init: $(cat "$work/init.out")"
grep -q 'tool instance "manual"' "$work/init.out" || fail "quarry init said: $(cat "$work/init.out")"
grep -q 'component = "builtin:chapter-rag"' "$work/home/quarry.toml" || fail "quarry.toml names no built-in component"
# Nothing is overwritten without --force.
if user quarry init --manual docs/manual.md 2>"$work/again.err"; then fail "a second init replaced quarry.toml"; fi
grep -q -- '--force' "$work/again.err" || fail "a second init said: $(cat "$work/again.err")"

start=$SECONDS
answer="$(user quarry -c quarry.toml call manual.search '{"question": "How do I limit the bandwidth of a transfer?"}')" \
  || fail "the search call failed: $answer"
took=$((SECONDS - start))
echo "$answer" | grep -q -- '--bwlimit' || fail "the answer has no --bwlimit: $answer"
# The index is the instance's own corpus, kept by the host in the user's cache.
ls "$work"/home/.cache/quarry/instances/manual-*/corpus/*/corpus.sqlite >/dev/null 2>&1 \
  || fail "no index in the instance's own corpus: $(find "$work/home/.cache" -maxdepth 4 | head -20)"

# CrewAI's adapter starts the installed quarry itself (README's example).
crew="$(user "$venvs/crewai/bin/python" "$root/tests/mcp/crewai_example.py" "$work/venv/bin/quarry" quarry.toml 2>"$work/crew.err")" \
  || fail "CrewAI's MCPServerAdapter: $(tail -5 "$work/crew.err")"
echo "$crew" | grep -q "manual.search" || fail "CrewAI saw no manual.search: $crew"
echo "$crew" | grep -q -- '--bwlimit' || fail "CrewAI's search has no --bwlimit: $crew"

# `make install`'s layout from the same build (host/install.sh --dev), run from a shell with
# only PREFIX/bin on the PATH: its `builtin:` component and model names resolve beside it. The
# models folder holds the one model the config names, to keep the copy small.
mkdir -p "$work/models" "$work/home2/docs"
ln -s "${QUARRY_MODELS:-$HOME/.cache/quarry/models}/all-minilm-l6-v2" "$work/models/all-minilm-l6-v2"
QUARRY_MODELS="$work/models" bash "$root/host/install.sh" --dev "$work/prefix" >"$work/install.out" \
  || fail "host/install.sh: $(cat "$work/install.out")"
cp "$work/home/docs/manual.md" "$work/home2/docs/"
installed() { (cd "$work/home2" && env -i PATH="$work/prefix/bin:/usr/bin:/bin" HOME="$work/home2" "$@"); }
[ "$(installed sh -c 'command -v quarry')" = "$work/prefix/bin/quarry" ] || fail "quarry is not the installed one"
installed quarry init --manual docs/manual.md >"$work/init2.out" || fail "installed quarry init: $(cat "$work/init2.out")"
listed="$(installed quarry -c quarry.toml list 2>&1)" || fail "installed quarry list: $listed"
echo "$listed" | grep -q 'manual.search' || fail "installed quarry list: $listed"

size="$(du -m "$wheels"/quarry_wasm-*.whl | cut -f1) MB + model $(du -m "$wheels"/quarry_wasm_minilm-*.whl | cut -f1) MB"
echo "install test: ok ($version; wheels $size; first search with the index build ${took} s)"
