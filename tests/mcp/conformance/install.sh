#!/usr/bin/env bash
# Installs the official MCP conformance suite (@modelcontextprotocol/conformance, the version
# package.json pins, every package's hash pinned by package-lock.json) and the MCP Inspector
# (@modelcontextprotocol/inspector, whose CLI launches quarry in tests/integration/mcp.rs) from
# npm into ~/.cache/quarry/conformance, once per lock file. `make test` runs it; the suite then
# runs in tests/integration/conformance.rs against `quarry serve --http`.
#
# The suite's build imports `globSync` from `fs`, which Node 22 has and Debian's Node 20 does
# not: on an older Node that one import is taken from the `glob` package (pinned beside it), and
# the script checks that the patch applied.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${QUARRY_CONFORMANCE_DIR:-$HOME/.cache/quarry/conformance}"
stamp="$dest/.installed"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
command -v node >/dev/null && command -v npm >/dev/null || {
    echo "error: the MCP conformance suite needs node and npm (Debian: apt install nodejs npm)" >&2
    exit 1
}
mkdir -p "$dest"
cp "$here/package.json" "$here/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
index="$dest/node_modules/@modelcontextprotocol/conformance/dist/index.js"
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 22 ]; then
    # Take `globSync as X` out of the `fs` import and import it from `glob` instead.
    python3 - "$index" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
def fix(m):
    names = [n for n in m.group(1).split(",") if not n.startswith("globSync as ")]
    alias = next(n for n in m.group(1).split(",") if n.startswith("globSync as ")).split(" as ")[1]
    return 'import{%s}from"fs";import{globSync as %s}from"glob";' % (",".join(names), alias)
text = re.sub(r'import\{([^}]*globSync as [A-Za-z_$]+[^}]*)\}from"fs";', fix, text, count=1)
open(path, "w").write(text)
EOF
    grep -qE 'import\{globSync as [A-Za-z_$]+\}from"glob"' "$index" || {
        echo "error: could not alias fs.globSync to glob in $index (Node $major)" >&2
        exit 1
    }
fi
node "$index" list >/dev/null
echo "$want" > "$stamp"
echo "MCP conformance suite installed in $dest"
