#!/usr/bin/env bash
# Smoke test of a real DolphinScheduler (CI-able): resolve, schema, 1 master + 2 workers + API,
# a workflow with two `sleep` SHELL tasks through the REST API, kill -9 of a worker running one,
# then check DS's own worker failover: the old row becomes NEED_FAULT_TOLERANCE (8) with flag 0
# and a new row of the same task runs on the other worker. Stops everything it started.
#   tests/real-ds/smoke.sh [VERSION] [mysql|postgres]      (default 3.1.1 mysql)
# Env: SMOKE_TIMEOUT (s to wait for the failover, default 120), OFFLINE=1 (mvn -o).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
V=${1:-3.1.1} DB=${2:-mysql}
RUN=smoke-${V//./}-$DB DBNAME=dsreal_smoke_${V//./}_$DB
L=$HERE/launch.sh
API="$HERE/api.py --ds-version $V"
say() { echo "[smoke] $(date -u +%T) $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
trap '"$L" stop-all "$RUN" >/dev/null 2>&1 || true' EXIT

"$L" resolve "$V" ${OFFLINE:+--offline}
"$L" schema "$V" "$DB" "$DBNAME"
"$L" start "$V" --db "$DB" --dbname "$DBNAME" --name "$RUN" --masters 1 --workers 2 >/dev/null
"$L" wait-registered "$RUN" --timeout 400

inst=$($API run --name smoke --script 'sleep 300' --script 'cd /tmp && sleep 300')
$API wait "$inst" --timeout 120
q() { "$L" sql "$RUN" "$1" | tail -n +2 | sed '/^([0-9]* rows\?)$/d; /^-*+/d; /^$/d'; }
# the worker running the first task (its ZK node name is the row's host)
host=$(q "select host from t_ds_task_instance where flag=1 and state=1 order by id limit 1" | tr -d ' ')
[[ $host =~ ^127\.0\.0\.1:([0-9]+)$ ]] || fail "no running task with a host (got '$host')"
port=${BASH_REMATCH[1]}
victim=worker-$(( (port - 25000 - 100) / 10 ))
say "killing $victim ($host)"
"$L" tasks "$RUN" >&2
"$L" stop "$RUN" "$victim" --signal KILL
t0=$SECONDS
while :; do
  old=$(q "select count(*) from t_ds_task_instance where host='$host' and state=8 and flag=0" | tr -d ' ')
  new=$(q "select count(*) from t_ds_task_instance where flag=1 and state=1 and host<>'$host'" | tr -d ' ')
  [[ $old -ge 1 && $new -ge 2 ]] && break
  (( SECONDS - t0 > ${SMOKE_TIMEOUT:-120} )) && fail "no failover after ${SMOKE_TIMEOUT:-120}s (old=$old new=$new)"
  sleep 2
done
say "DS failed over in $(( SECONDS - t0 )) s (±2): rows now"
q "select id,name,state,host,flag,submit_time from t_ds_task_instance order by id" >&2
say "task processes after failover (the killed worker's keep running):"
"$L" tasks "$RUN" >&2
say "PASS"
