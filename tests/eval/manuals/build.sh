#!/usr/bin/env bash
# Build the pinned Debian documentation packages of manuals.json into benchmark manuals:
#   ${QUARRY_MANUALS:-$HOME/.cache/quarry/manuals}/NAME/{manual.md,sections.jsonl,manual.docx,LICENSE,SOURCE.txt}
#
#   bash tests/eval/manuals/build.sh [NAME...] [--force] [--update-pins] [--stats FILE]
#
# Needs Debian bookworm's archive (apt-get download, dpkg-deb), Debian's pandoc (installed here
# with apt-get when missing and running as root) and a venv with the pinned markdown-it-py
# (made here when missing, from requirements.txt with hashes). A manual whose built files
# already match the pinned sha256 is skipped.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${QUARRY_VENVS:-$HOME/.cache/quarry/venvs}/manuals"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"

die() { echo "build.sh: $*" >&2; exit 1; }

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
  || die "apt-get/dpkg-deb missing: build on Debian bookworm (the packages are pinned there)"

if ! command -v pandoc >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "build.sh: pandoc missing: apt-get install -y pandoc" >&2
    apt-get install -y -q pandoc >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q pandoc >/dev/null; } \
      || die "pandoc missing and apt-get install -y pandoc failed: run apt-get update && apt-get install -y pandoc"
  else
    die "pandoc missing: run sudo apt-get install -y pandoc"
  fi
fi

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  echo "build.sh: making the venv $VENV (markdown-it-py, pinned in requirements.txt)" >&2
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" \
    || die "python3 -m venv failed: run apt-get install -y python3-venv (or set QUARRY_VENVS to a writable folder)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes -r "$REQ" \
    || die "pip install -r $REQ failed (it needs PyPI): see the message above"
  echo "$want" > "$STAMP"
fi

exec "$VENV/bin/python" "$HERE/build.py" "$@"
