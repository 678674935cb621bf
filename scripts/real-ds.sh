#!/usr/bin/env bash
# The real-DS tier (issue 19): DolphinScheduler's own master, workers and API server (from Maven
# Central, into /var/tmp/ds-reaper-services/ds; nothing of DS's in the repository) with ds-reaper and
# its agents beside them, scenario by scenario; prints one table: scenario x version/db -> result,
# seconds, figures (DS's own failover time, ds-reaper's write time, ...).
#   scripts/real-ds.sh [--version V]... [--db mysql|postgres]... [SCENARIO...]
# Defaults: every version whose jars are in the cache or resolvable (3.1.1 from Maven Central; a
# version built with tests/real-ds/launch.sh build-from-source, e.g. 3.2.2, once built), mysql, and
# the scenarios fidelity worker-kill zombie zombie-fail reap sigstop ghost zombie-subprocess leader-handover.
# tests/real-ds/scenarios.py --help says what each checks; FINDINGS.md §8 and §9 have the table of results.
# A missing Maven artifact or JVM fails the run (never a skip).
set -euo pipefail
cd "$(dirname "$0")/.."
versions=() dbs=() scen=()
while [[ $# -gt 0 ]]; do
  case $1 in
  --version) versions+=("$2"); shift 2 ;;
  --db) dbs+=("$2"); shift 2 ;;
  -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
  *) scen+=("$1"); shift ;;
  esac
done
cache=${DS_CACHE:-/var/tmp/ds-reaper-services/ds}
if [[ ${#versions[@]} -eq 0 ]]; then
  versions=(3.1.1)
  for d in "$cache"/*/lib/master; do
    v=$(basename "$(dirname "$(dirname "$d")")")
    [[ -d $d && $v != 3.1.1 ]] && versions+=("$v")
  done
fi
[[ ${#dbs[@]} -gt 0 ]] || dbs=(mysql)
[[ ${#scen[@]} -gt 0 ]] || scen=(fidelity worker-kill zombie zombie-fail reap sigstop ghost zombie-subprocess leader-handover)

command -v java >/dev/null || { echo "real-ds: no java on PATH (DS needs a JDK 17)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "real-ds: no mvn on PATH (DS's jars are resolved with Maven)" >&2; exit 1; }
bash deploy/dev/services.sh start
cargo build -p reaper --bin ds-reaper --locked

table=$(mktemp)
rc=0
for v in "${versions[@]}"; do
  for db in "${dbs[@]}"; do
    python3 tests/real-ds/scenarios.py --version "$v" --db "$db" --table "$table" "${scen[@]}" || rc=1
  done
done
echo
echo "== real-DS table"
printf '| scenario | version | db | result | seconds | figures |\n|---|---|---|---|---|---|\n'
awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }' "$table"
rm -f "$table"
exit "$rc"
