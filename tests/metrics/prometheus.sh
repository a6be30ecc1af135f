#!/usr/bin/env bash
# A real Prometheus server on loopback for the tests: Debian's `prometheus` package, installed
# when missing and started in the foreground with its data in DIR (the package's own service
# does not start in a container), scraping one target every second.
#
# Usage: prometheus.sh install                              install the package when missing
#        prometheus.sh serve DIR PORT TARGET [TOKEN_FILE]   serve http://127.0.0.1:PORT, scraping
#                                                           http://TARGET/metrics (with the bearer
#                                                           token in TOKEN_FILE, if given); with
#                                                           $RULES, a rules file, evaluated each
#                                                           second
set -euo pipefail
case "${1:-}" in
  install)
    if ! command -v prometheus >/dev/null; then
      if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
      echo "prometheus.sh: installing prometheus (Debian package)" >&2
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends prometheus >&2 \
        || { echo "prometheus.sh: apt-get install prometheus failed; install it by hand (Debian: apt install prometheus)" >&2; exit 1; }
    fi
    ;;
  serve)
    dir="$2" port="$3" target="$4" token="${5:-}"
    mkdir -p "$dir/data"
    auth=""
    if [ -n "$token" ]; then
      auth="    authorization:
      type: Bearer
      credentials_file: $token"
    fi
    rules=""
    if [ -n "${RULES:-}" ]; then
      rules="rule_files:
  - $RULES"
    fi
    cat >"$dir/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
$rules
scrape_configs:
  - job_name: quarry
    metrics_path: /metrics
$auth
    static_configs:
      - targets: ['$target']
YAML
    exec prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
      --web.listen-address="127.0.0.1:$port" --log.level=warn
    ;;
  *)
    sed -n '2,10p' "$0" >&2
    exit 2
    ;;
esac
