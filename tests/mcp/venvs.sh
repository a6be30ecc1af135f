#!/usr/bin/env bash
# Creates the Python venvs the MCP tests run real clients in, one per file in requirements/
# (every package pinned): mcp1 (the `mcp` 1.x SDK, the handshake era CrewAI speaks), mcp2 (`mcp`
# 2.x, the stateless 2026-07-28 revision), and crewai (CrewAI and crewai-tools' MCPServerAdapter)
# from components/chapter-rag/crew/requirements.txt, the directory-RAG crew's own pins.
# They live outside the repo, in ${QUARRY_VENVS:-~/.cache/quarry/venvs}/<name>, and are rebuilt
# only when their requirements file changes. Only PyPI is needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${QUARRY_VENVS:-$HOME/.cache/quarry/venvs}
python=${PYTHON:-python3}
mkdir -p "$root"
crew="$here/../../components/chapter-rag/crew/requirements.txt"
for req in "$here"/requirements/*.txt "$crew"; do
    name=$(basename "$req" .txt)
    [ "$req" = "$crew" ] && name=crewai
    stamp=".quarry-$(sha256sum "$req" | cut -c1-16)"
    dir="$root/$name"
    if [ -f "$dir/$stamp" ]; then
        continue
    fi
    echo "venvs.sh: creating $dir from requirements/$name.txt" >&2
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req"
    touch "$dir/$stamp"
done
