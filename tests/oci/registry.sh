#!/usr/bin/env bash
# A real OCI registry on loopback for the tests: Debian's docker-registry (distribution 2.8,
# the software of the `registry:2` image), installed when missing and started in the
# foreground with its storage in DIR (the package's own service does not start in a container).
#
# Usage: registry.sh install          install the package (apt) when it is missing
#        registry.sh serve DIR PORT   serve http://127.0.0.1:PORT, storage in DIR/storage
set -euo pipefail
case "${1:-}" in
  install)
    if ! command -v docker-registry >/dev/null; then
      if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
      echo "registry.sh: installing docker-registry (Debian package)" >&2
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q docker-registry >&2 \
        || { echo "registry.sh: apt-get install docker-registry failed; install it by hand (Debian: apt install docker-registry)" >&2; exit 1; }
    fi
    ;;
  serve)
    dir="$2" port="$3"
    mkdir -p "$dir/storage"
    cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
    exec docker-registry serve "$dir/config.yml"
    ;;
  *)
    sed -n '2,8p' "$0" >&2
    exit 2
    ;;
esac
