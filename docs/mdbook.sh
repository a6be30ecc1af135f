#!/usr/bin/env bash
# Runs mdBook (pinned), installing it first into ${QUARRY_TOOLS:-~/.cache/quarry/tools} when it is
# missing: `cargo install` from crates.io, without its `serve`/`watch` features (a few minutes on
# 2 cores, once per machine). Arguments go to mdbook: `bash docs/mdbook.sh build docs`.
set -euo pipefail
VERSION=0.4.52
TOOLS="${QUARRY_TOOLS:-$HOME/.cache/quarry/tools}"
MDBOOK="$TOOLS/bin/mdbook"
if ! [[ -x "$MDBOOK" ]] || [[ "$("$MDBOOK" --version)" != "mdbook v$VERSION" ]]; then
    echo "installing mdbook $VERSION into $TOOLS" >&2
    # Its own target dir: the workspace's is not for tools, and a shared one would rebuild.
    CARGO_TARGET_DIR="$TOOLS/target" cargo install mdbook --version "=$VERSION" --locked \
        --no-default-features --features search --root "$TOOLS"
    rm -rf "$TOOLS/target"
fi
exec "$MDBOOK" "$@"
