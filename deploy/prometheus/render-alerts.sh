#!/usr/bin/env bash
# Prints alerts.yml with every `for:` duration replaced, for end-to-end tests
# against a real Prometheus that cannot wait the production durations.
#   deploy/prometheus/render-alerts.sh 5s > /tmp/alerts-fast.yml
# alerts.yml itself stays production-ready; never ship the rendered copy.
set -euo pipefail
dur="${1:?usage: render-alerts.sh DURATION (e.g. 5s, 0s)}"
if ! [[ "$dur" =~ ^[0-9]+(ms|s|m|h)$ ]]; then
  echo "render-alerts.sh: bad duration '$dur' (want e.g. 0s, 5s, 1m)" >&2
  exit 2
fi
sed -E "s/^([[:space:]]+for:)[[:space:]]+[0-9]+(ms|s|m|h)[[:space:]]*$/\1 ${dur}/" \
  "$(dirname "$0")/alerts.yml"
