#!/usr/bin/env bash
# Runs the fuzz targets (all, or those named) for FUZZ_SECONDS each (default 60), starting from
# the committed seed corpus in corpus/TARGET; inputs libFuzzer finds go to a scratch corpus, a
# crash or a slow input to artifacts/TARGET/ and fails the run. cargo-fuzz on stable Rust,
# without sanitizers (--sanitizer none): libFuzzer's coverage guidance, Rust's own checks
# (panics; overflow checks are off in this release build).
#   bash tests/fuzz/run.sh                       # every target, a minute each (CI)
#   FUZZ_SECONDS=3600 bash tests/fuzz/run.sh docx  # one target, an hour
set -euo pipefail
cd "$(dirname "$0")"
CARGO_FUZZ_VERSION=0.13.1
if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
# Its own target dir: every crate is built instrumented, unlike the workspace's.
export CARGO_TARGET_DIR="${QUARRY_FUZZ_TARGET:-$HOME/.cache/quarry/fuzz-target}"
seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list --fuzz-dir .)
fi
flags=(--fuzz-dir . --sanitizer none --release)
cargo fuzz build "${flags[@]}"
for t in "${targets[@]}"; do
    scratch=$(mktemp -d)
    echo "== fuzz $t for ${seconds}s"
    # -timeout: an input that takes 30 s is a finding (documents are meant to be linear);
    # -rss_limit_mb: so is one that makes the process hold 4 GiB.
    cargo fuzz run "${flags[@]}" "$t" "$scratch" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
    rm -rf "$scratch"
done
