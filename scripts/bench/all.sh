#!/usr/bin/env bash
# Every benchmark, one table (figure vs target):
#   - core planner (cargo bench -p reaper-core, plan over 100k candidates x 2k workers)
#   - SQL sweep and writes vs raw SQL (scripts/bench/sweep.sh)
#   - the workflow part of a sweep vs raw SQL, and flat from the smallest size
#     to the largest (scripts/bench/workflow_sweep.sh)
#   - a sweep with SPEC §16's anomalies vs without (scripts/bench/anomalies.sh)
#   - reaping latency and idle footprint (scripts/bench/latency.sh, idle.sh, when present)
#   - reap throughput: 2,000 zombies reaped by the daemon vs one raw batched UPDATE
#   - steady RSS/CPU with 2,000 workers and 100,000 live rows
#   - etcd registry: node removal -> view update (reaper-etcd's ignored bench_latency test)
#   - the agent: scan cost and RSS (reaper-agent's scan_bench), process exit -> FAILURE
#   - ghost detection: a sweep with 2,000 agents x 20 listed tasks vs none (<= 1.3x)
#   - DS's JDBC registry: row removal -> view update, one poll with 2,000 workers
# Needs the local services (deploy/dev/services.sh). Not part of CI.
# Usage: scripts/bench/all.sh          full run (the sweep bench fills 1M and 5M rows: slow)
#        QUICK=1 scripts/bench/all.sh  short windows, sweep at 200k rows on MariaDB only
# Logs of each part: $BENCH_LOG_DIR (default: a temp dir, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh

QUICK=${QUICK:-0}
LOG_DIR=${BENCH_LOG_DIR:-$(mktemp -d /tmp/ds-reaper-bench.XXXXXX)}
mkdir -p "$LOG_DIR"
target="${CARGO_TARGET_DIR:-target}/release"
rows=()   # "figure|value|target|verdict"

say() { echo "== $*" >&2; }
row() { rows+=("$1|$2|$3|$4"); }
# verdict VALUE OP LIMIT -> OK / MISS (numeric; "-" when the value is missing)
verdict() {
  if [[ -z "$1" || "$1" == "-" ]]; then echo "n/a"; return; fi
  awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
    ok = (op == "<") ? (v < l) : (v <= l); print (ok ? "OK" : "MISS") }'
}
# run NAME CMD...: runs a part, its output to $LOG_DIR/NAME.log; false on failure
run() {
  local name=$1; shift
  say "$name: $*  (log: $LOG_DIR/$name.log)"
  if "$@" >"$LOG_DIR/$name.log" 2>&1; then return 0; fi
  echo "   $name FAILED, last lines:" >&2
  tail -n 15 "$LOG_DIR/$name.log" >&2
  return 1
}
result() { awk -v k="$2" '$1 == "RESULT" && $2 == k { print $3 }' "$LOG_DIR/$1.log" | tail -n1; }
# idle_pct SECONDS: the CPUs' idle share over the next SECONDS, in percent
idle_pct() {
  local a b
  read -r -a a < /proc/stat; sleep "$1"; read -r -a b < /proc/stat
  awk -v u1="${a[1]}" -v n1="${a[2]}" -v s1="${a[3]}" -v i1="${a[4]}" -v w1="${a[5]}" -v q1="${a[6]}" -v x1="${a[7]}" -v t1="${a[8]}" \
      -v u2="${b[1]}" -v n2="${b[2]}" -v s2="${b[3]}" -v i2="${b[4]}" -v w2="${b[5]}" -v q2="${b[6]}" -v x2="${b[7]}" -v t2="${b[8]}" \
      'BEGIN { tot = (u2+n2+s2+i2+w2+q2+x2+t2) - (u1+n1+s1+i1+w1+q1+x1+t1);
               printf "%.0f", ((tot > 0) ? 100 * ((i2+w2) - (i1+w1)) / tot : 100) }'
}
# quiet: before a part whose figure is a time on these two cores, waits (2 min
# at most) for a 5 s window in which they are >= 90 % idle, so that what the
# part before left running (a database flushing millions of rows, a JVM's
# collector) is not measured with it
quiet() {
  local t0=$SECONDS idle
  for _ in $(seq 24); do
    idle=$(idle_pct 5)
    if (( idle >= 90 )); then say "quiet after $((SECONDS - t0)) s ($idle % idle)"; return 0; fi
  done
  say "still busy after $((SECONDS - t0)) s ($idle % idle): measuring anyway"
}

say "building release binaries, and ds-reaper as shipped (the dist profile of the packages and the image)"
cargo build --release -q -p reaper -p ds-sim
cargo build --profile dist -q -p reaper --bin ds-reaper
# and everything a part runs, so that no part times a compile's tail
cargo build --release -q -p reaper-agent --example scan_bench
cargo test --release -q --no-run -p reaper-e2e 2>/dev/null
cargo test --release -q --no-run -p reaper-etcd --test bench_latency 2>/dev/null
cargo test --release -q --no-run -p reaper-jdbc --test bench 2>/dev/null

# 1. core planner -------------------------------------------------------------
crit=()
if [[ "$QUICK" == 1 ]]; then crit=(--warm-up-time 1 --measurement-time 3 --sample-size 10); fi
if run plan cargo bench -q -p reaper-core --bench plan -- "${crit[@]}"; then
  # criterion: "time:   [low unit  estimate unit  high unit]"
  est=$(grep -m1 'time:' "$LOG_DIR/plan.log" | sed -E 's/.*\[([^ ]+) ([^ ]+) ([^ ]+) ([^ ]+) .*/\3 \4/')
  val=${est% *}; unit=${est#* }
  ms=$(awk -v v="$val" -v u="$unit" 'BEGIN { f = (u == "s") ? 1000 : (u == "ms") ? 1 : (u == "µs" || u == "us") ? 0.001 : 0.000001; printf "%.2f", v * f }')
  row "plan: 100k candidates x 2k workers" "$ms ms" "< 20 ms" "$(verdict "$ms" "<" 20)"
else
  row "plan: 100k candidates x 2k workers" "-" "< 20 ms" "FAILED"
fi

# 2. sweep bench ----------------------------------------------------------------
if [[ -x scripts/bench/sweep.sh || -f scripts/bench/sweep.sh ]]; then
  if [[ "$QUICK" == 1 ]]; then
    sweep=(env BENCH_DB=mariadb bash scripts/bench/sweep.sh 200000)
  else
    sweep=(bash scripts/bench/sweep.sh)
  fi
  if run sweep "${sweep[@]}"; then
    # rows: "<db> <rows> | incr raw ratio | full raw ratio | fail raw ratio"
    while IFS='|' read -r head inc full write; do
      read -r db n <<<"$head"
      read -r i1 i2 ir <<<"$inc"
      read -r f1 f2 fr <<<"$full"
      read -r w1 w2 wr <<<"$write"
      row "sweep $db $n rows: incremental vs raw range" "$i1 ms / $i2 ms = ${ir}x" "<= 1.3x" "$(verdict "$ir" "<=" 1.3)"
      row "sweep $db $n rows: full scan vs raw" "$f1 ms / $f2 ms = ${fr}x" "<= 1.3x" "$(verdict "$fr" "<=" 1.3)"
      row "sweep $db $n rows: fail 2000 vs raw UPDATE" "$w1 ms / $w2 ms = ${wr}x" "<= 3x" "$(verdict "$wr" "<=" 3)"
    done < <(grep -E '^(mariadb|mysql|postgres[a-z]*) +[0-9]+ +\|' "$LOG_DIR/sweep.log")
  else
    row "sweep (scripts/bench/sweep.sh)" "-" "" "FAILED"
  fi
fi

# 2b. workflow sweep bench (SPEC §13) ----------------------------------------------
if [[ -f scripts/bench/workflow_sweep.sh ]]; then
  if [[ "$QUICK" == 1 ]]; then
    wsweep=(env BENCH_DB=mariadb bash scripts/bench/workflow_sweep.sh 100000 200000)
  else
    wsweep=(bash scripts/bench/workflow_sweep.sh)
  fi
  if run workflow_sweep "${wsweep[@]}"; then
    # rows: "workflows <db> <workflows> <tasks> | full raw ratio | incr raw ratio"
    while IFS='|' read -r head full inc; do
      read -r _ db n t <<<"$head"
      read -r f1 f2 fr <<<"$full"
      read -r i1 i2 ir <<<"$inc"
      row "workflow sweep $db $n wf / $t tasks: full vs raw" "$f1 ms / $f2 ms = ${fr}x" "<= 1.3x" "$(verdict "$fr" "<=" 1.3)"
      row "workflow sweep $db $n wf / $t tasks: incremental vs raw" "$i1 ms / $i2 ms = ${ir}x" "<= 1.3x" "$(verdict "$ir" "<=" 1.3)"
    done < <(grep -E '^workflows +[a-z]+ +[0-9]+ +[0-9]+ +\|' "$LOG_DIR/workflow_sweep.log")
    # "workflows-flat <db> <a> -> <b> workflows: incremental <x> -> <y> ms (<r>x)"
    while read -r _ db a _ b _ _ x _ y _ r; do
      r=${r#(}; r=${r%x)}
      row "workflow sweep $db: incremental from $a to $b workflows (flat)" "$x -> $y ms = ${r}x" "<= 1.3x" "$(verdict "$r" "<=" 1.3)"
    done < <(grep -E '^workflows-flat ' "$LOG_DIR/workflow_sweep.log")
  else
    row "workflow sweep (scripts/bench/workflow_sweep.sh)" "-" "" "FAILED"
  fi
fi

# 2c. what SPEC §16's anomalies add to a sweep (issue 23) ---------------------------
if [[ -f scripts/bench/anomalies.sh ]]; then
  if [[ "$QUICK" == 1 ]]; then
    asweep=(env BENCH_DB=mariadb bash scripts/bench/anomalies.sh 200000)
  else
    asweep=(bash scripts/bench/anomalies.sh)
  fi
  if run anomalies "${asweep[@]}"; then
    # rows: "anomalies <db> <n> | incr with ratio | full with ratio | found"
    while IFS='|' read -r head inc full _; do
      read -r _ db n <<<"$head"
      read -r i1 i2 ir <<<"$inc"
      read -r f1 f2 fr <<<"$full"
      row "sweep with anomalies $db $n tasks + $n wf: incremental" "$i2 ms / $i1 ms = ${ir}x" "<= 1.3x" "$(verdict "$ir" "<=" 1.3)"
      row "sweep with anomalies $db $n tasks + $n wf: full" "$f2 ms / $f1 ms = ${fr}x" "<= 1.3x" "$(verdict "$fr" "<=" 1.3)"
    done < <(grep -E '^anomalies +[a-z]+ +[0-9]+ +\|' "$LOG_DIR/anomalies.log")
  else
    row "sweep with anomalies (scripts/bench/anomalies.sh)" "-" "<= 1.3x" "FAILED"
  fi
fi

# 3. latency and idle (another helper's scripts; used when present) ------------
if [[ -f scripts/bench/latency.sh ]]; then
  trials=20; [[ "$QUICK" == 1 ]] && trials=5
  if run latency bash scripts/bench/latency.sh "$trials"; then
    line=$(grep -m1 'median' "$LOG_DIR/latency.log" || true)
    med=$(sed -E 's/.*median ([0-9.]+) s.*/\1/' <<<"$line")
    max=$(sed -E 's/.*max ([0-9.]+) s.*/\1/' <<<"$line")
    row "latency: worker loss -> row FAILURE (grace 5 s, $trials trials)" "median $med s, max $max s" "<= 6 s" "$(verdict "$max" "<=" 6)"
  else
    row "latency (scripts/bench/latency.sh)" "-" "<= 6 s" "FAILED"
  fi
fi
if [[ -f scripts/bench/idle.sh ]]; then
  secs=60; [[ "$QUICK" == 1 ]] && secs=20
  if run idle bash scripts/bench/idle.sh "$secs"; then
    line=$(grep -m1 'idle daemon' "$LOG_DIR/idle.log" || true)
    rss=$(sed -E 's/.*\(max ([0-9.]+) MB\).*/\1/' <<<"$line")
    cpu=$(sed -E 's/.*CPU ([0-9.]+) %.*/\1/' <<<"$line")
    row "idle daemon RSS (small cluster, ${secs} s)" "$rss MB" "< 30 MB" "$(verdict "$rss" "<" 30)"
    row "idle daemon CPU (small cluster, ${secs} s)" "$cpu %" "< 1 %" "$(verdict "$cpu" "<" 1)"
  else
    row "idle (scripts/bench/idle.sh)" "-" "" "FAILED"
  fi
fi

# 4. reap throughput -------------------------------------------------------------
quiet
if run reap "$target/ds-sim" bench-reap --reaper "$target/ds-reaper" --zombies 2000; then
  raw=$(result reap reap_raw_update_ms)
  dsec=$(result reap reap_daemon_s)
  rate=$(result reap reap_daemon_per_s)
  ratio=$(result reap reap_ratio)
  row "reap 2000 zombies: daemon vs one raw UPDATE (id list)" \
    "$(awk -v d="$dsec" 'BEGIN{printf "%.0f", d*1000}') ms / ${raw%.*} ms = $(printf '%.1f' "$ratio")x" "<= 3x" "$(verdict "$ratio" "<=" 3)"
  row "reap 2000 zombies: daemon throughput" "$(printf '%.0f' "$rate") tasks/s" "(figure)" "-"
else
  row "reap 2000 zombies" "-" "<= 3x" "FAILED"
fi

# 5. steady footprint at scale -----------------------------------------------------
# sweep_interval 30s (the default); the window holds full scans (full_scan_interval
# shortened from its 10m default so that it does). RSS max is VmHWM: the peak since
# the daemon started, start-up full scan included; CPU is utime+stime over the window.
secs=300; full=2m; [[ "$QUICK" == 1 ]] && { secs=100; full=1m; }
# The daemon measured is the shipped binary (dist profile: fat LTO, one codegen unit).
dist=$(dirname "$target")/dist
quiet
if run steady "$target/ds-sim" bench-steady --reaper "$dist/ds-reaper" --workers 2000 --rows 100000 \
  --seconds "$secs" --sweep-interval 30s --full-scan-interval "$full"; then
  hwm=$(result steady steady_rss_hwm_mib); cpu=$(result steady steady_cpu_percent)
  ok=$(verdict "$hwm" "<=" 40); [[ "$ok" == OK ]] && ok=$(verdict "$cpu" "<=" 3)
  row "steady (dist build), 2000 workers + 100k live rows, sweep 30s: RSS max / CPU" \
    "$(printf '%.1f MiB / %.2f %%' "$hwm" "$cpu")" "<= 40 MiB / <= 3 %" "$ok"
  row "  (window ${secs} s, full scan every $full: $(printf '%.0f' "$(result steady steady_full_scans_in_window)") in it): mean sweep" \
    "$(printf '%.0f' "$(result steady steady_sweep_mean_ms)") ms" "(figure)" "-"
else
  row "steady, 2000 workers + 100k live rows, sweep 30s: RSS max / CPU" "-" "<= 40 MiB / <= 3 %" "FAILED"
fi

# 6. etcd registry: node removal -> view update ----------------------------------
quiet
if run etcd_latency cargo test --release -q -p reaper-etcd --test bench_latency -- --ignored --nocapture --test-threads=1; then
  row "etcd: node removal -> view update (median of 20)" "$(result etcd_latency etcd_removal_to_view_median_ms) ms" "(figure)" "-"
else
  row "etcd: node removal -> view update" "-" "" "FAILED"
fi

# 7. the worker-host agent: scan cost, footprint, detection latency ------------------
quiet
if run agent_scan cargo run --release -q -p reaper-agent --example scan_bench; then
  row "agent: one scan of ~2,000 processes (real /proc): median / CPU" \
    "$(result agent_scan agent_scan_median_ms) ms / $(result agent_scan agent_scan_cpu_ms) ms" "<= 50 ms" \
    "$(verdict "$(result agent_scan agent_scan_median_ms)" "<=" 50)"
  row "agent: RSS" "$(result agent_scan agent_rss_mib) MiB" "<= 15 MiB" \
    "$(verdict "$(result agent_scan agent_rss_mib)" "<=" 15)"
else
  row "agent: scan cost and RSS" "-" "" "FAILED"
fi
quiet
if run agent_latency cargo test --release -q -p reaper-e2e bench_process_exit_to_failure -- --ignored --nocapture; then
  row "agent: process exit -> row FAILURE (process_gone_after 5s, scan 1s, sweep 1s; median / max of 5)" \
    "$(result agent_latency agent_detect_median_s) s / $(result agent_latency agent_detect_max_s) s" "<= 7 s" \
    "$(verdict "$(result agent_latency agent_detect_max_s)" "<=" 7)"
else
  row "agent: process exit -> row FAILURE" "-" "" "FAILED"
fi

# 7b. ghost detection (SPEC §15): a sweep with 2,000 agents x 20 listed tasks vs none ---
# the daemon measured is the release binary built above (the e2e helpers default to the debug one),
# by an absolute path: cargo runs the test from its own crate directory
quiet
if run ghost_sweep env DS_REAPER_BIN="$(realpath "$target/ds-reaper")" cargo test --release -q -p reaper-e2e bench_ghost_sweep -- --ignored --nocapture; then
  row "ghosts: sweep, 2,000 agents x 20 listed tasks vs no agents (40,000 rows; median with / without)" \
    "$(result ghost_sweep ghost_sweep_ratio)x ($(result ghost_sweep ghost_sweep_with_ms) / $(result ghost_sweep ghost_sweep_without_ms) ms)" \
    "<= 1.3x" "$(verdict "$(result ghost_sweep ghost_sweep_ratio)" "<=" 1.3)"
  # the same while the 2,000 simulated agents rewrite their reports every 5 s on
  # the daemon's own cores (with ZooKeeper): shown, no target of its own
  row "ghosts: means of the same windows; while agents rewrite reports (sweep time / daemon CPU per sweep)" \
    "$(result ghost_sweep ghost_sweep_mean_ratio)x; $(result ghost_sweep ghost_sweep_busy_ratio)x / $(result ghost_sweep ghost_sweep_cpu_ratio)x" "(figure)" "-"
else
  row "ghosts: sweep with 2,000 agents x 20 listed tasks" "-" "" "FAILED"
fi

# 8. DS's JDBC registry: removal -> view, one poll with 2,000 workers ----------------
quiet
if run jdbc_bench cargo test --release -q -p reaper-jdbc --test bench -- --ignored --nocapture --test-threads=1; then
  # cargo -q prints a test's progress dot in front of the next line: strip it
  while read -r line; do
    line=${line#"${line%%[!.]*}"}
    case_=${line%%: row deleted*}; med=$(sed -E 's/.*: median ([^ ]+ [^ ]+) .*/\1/' <<<"$line")
    ms=$(awk -v v="${med% *}" -v u="${med#* }" 'BEGIN { printf "%.1f", (u == "s") ? v * 1000 : v }')
    row "jdbc $case_: row deleted -> view update (poll 1 s, median of 20)" "$med" "<= 1 s" "$(verdict "$ms" "<=" 1000)"
  done < <(grep 'row deleted -> view update' "$LOG_DIR/jdbc_bench.log")
  while read -r line; do
    name=${line#"${line%%[!.]*}"}
    row "jdbc ${name%%, 2000 workers*}: one poll with 2,000 workers (statement + decoding)" \
      "$(grep -A1 -F "$line" "$LOG_DIR/jdbc_bench.log" | tail -n1 | sed -E 's/.*median ([^ ]+ [^ ]+) .*/\1/')" "(figure)" "-"
  done < <(grep ', 2000 workers' "$LOG_DIR/jdbc_bench.log")
else
  row "jdbc registry benchmarks" "-" "" "FAILED"
fi

# The table: one row per figure, added with `row FIGURE MEASURED TARGET VERDICT`
# (no "|" inside a field); columns widen to their longest entry.
echo
table=("figure|measured|target|verdict" "${rows[@]}")
w1=0; w2=0; w3=0
for r in "${table[@]}"; do
  IFS='|' read -r f v t k <<<"$r"
  if (( ${#f} > w1 )); then w1=${#f}; fi
  if (( ${#v} > w2 )); then w2=${#v}; fi
  if (( ${#t} > w3 )); then w3=${#t}; fi
done
for i in "${!table[@]}"; do
  IFS='|' read -r f v t k <<<"${table[$i]}"
  printf "%-${w1}s | %-${w2}s | %-${w3}s | %s\n" "$f" "$v" "$t" "$k"
  if (( i == 0 )); then printf '%s\n' "$(printf -- '-%.0s' $(seq 1 $((w1 + w2 + w3 + 16))))"; fi
done
echo
echo "logs: $LOG_DIR (QUICK=$QUICK)"
