#!/usr/bin/env python3
"""The Python half of scripts/check-deploy.sh, which runs it (SPEC §9, §11).

Checks, from the repository root:
  - deploy/grafana/ds-reaper.json: valid JSON, importable shape (panels,
    datasource variable, unique ids), and writes its queries as a recording
    rule file (OUTDIR/dashboard-rules.yml) for `promtool check rules`;
  - every ds_reaper_* name queried by the dashboard, deploy/prometheus/
    alerts.yml or alerts.test.yml is a metric the binary exposes: the known
    names are those of the expositions given with --exposition (the built
    binary's /metrics under `run` and under `agent`, which check-deploy.sh
    saves); histogram and summary families are learnt from their `# TYPE`
    lines, so their _bucket/_sum/_count series fold onto the family;
  - every deploy/**/*.y*ml parses; the Kubernetes manifests (probes, ports,
    resources, references, the agent sidecar's capabilities), the ConfigMap's
    http.listen, and that the scrape configs yield job="ds-reaper".

Config keys are not checked here: check-deploy.sh runs `ds-reaper config
check` on what this script writes to OUTDIR:
  k8s-config.toml        config.toml of deploy/kubernetes/configmap.yaml
  k8s-agent-config.toml  config.toml of deploy/kubernetes/agent-configmap.yaml
  k8s-env-names.txt      the DS_REAPER__* variables set in the manifests'
                         containers, one a line
  sidecar-statefulset.yaml  sidecar.yaml applied to a minimal DS master
                         StatefulSet, for kubernetes-validate

Usage: check-deploy.py OUTDIR --exposition FILE [--exposition FILE ...]
Environment: DEPLOY_CHECK_METRICS (optional), a /metrics URL or a file with
an exposition's text: every queried name must be in it as well.
Prints ok:/FAIL: lines; exits 1 if any check failed.
"""
import argparse
import glob
import json
import os
import re
import sys
import tomllib
import urllib.request

errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def ok(msg):
    print("ok:   " + msg)


# Families whose series carry suffixes, learnt from `# TYPE` lines.
SUFFIXED = {}  # family -> suffixes
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def metric_names(text):
    """The ds_reaper_* names in text, series suffixes folded onto their family."""
    names = set()
    for m in re.findall(r"\bds_reaper_[a-z0-9_]+", text):
        for suffix in ("_bucket", "_sum", "_count"):
            if m.endswith(suffix) and suffix in SUFFIXED.get(m[: -len(suffix)], ()):
                m = m[: -len(suffix)]
        names.add(m)
    return names


def parse_exposition(text):
    """(families by `# TYPE`, {family: type}, names of the sample lines)."""
    types = {}
    samples = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
        if m:
            samples.add(m.group(1))
    return types, samples


def exposition_names(text):
    """The ds_reaper_* families of an exposition (after its types are learnt)."""
    types, samples = parse_exposition(text)
    return {n for n in types if n.startswith("ds_reaper_")} | metric_names(" ".join(samples))


def learn_types(text):
    for name, typ in parse_exposition(text)[0].items():
        if typ in SUFFIXES:
            SUFFIXED[name] = SUFFIXES[typ]


def check_grafana(path, outdir):
    try:
        with open(path) as f:
            dash = json.load(f)
    except Exception as e:  # noqa: BLE001 - any parse error is the finding
        fail(f"{path}: not valid JSON: {e}")
        return None
    exprs = []
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
    # What the dashboard must show (whether the binary exposes them is
    # checked with every other queried name).
    want = {"ds_reaper_zombies", "ds_reaper_actions_total", "ds_reaper_live_workers", "ds_reaper_live_masters",
            "ds_reaper_sweep_duration_seconds", "ds_reaper_brake_engaged", "ds_reaper_leader",
            "ds_reaper_registry_view_valid", "ds_reaper_candidates", "ds_reaper_workflow_zombies",
            "ds_reaper_workflow_actions_total", "ds_reaper_agents"}
    shown = metric_names(" ".join(e for _, e in exprs))
    shown |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in shown}  # also with no exposition
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
    with open(os.path.join(outdir, "dashboard-rules.yml"), "w") as f:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    return dash


def read_expositions(expositions):
    """The binary's expositions and DEPLOY_CHECK_METRICS's (None when unset
    or unreadable), with the suffixed families learnt from them."""
    texts = {}
    for f in expositions:
        with open(f) as fh:
            texts[f] = fh.read()
    live_text = None
    src = os.environ.get("DEPLOY_CHECK_METRICS", "")
    if src:
        try:
            if re.match(r"https?://", src):
                live_text = urllib.request.urlopen(src, timeout=10).read().decode()
            else:
                with open(src) as fh:
                    live_text = fh.read()
        except Exception as e:  # noqa: BLE001
            fail(f"cannot read DEPLOY_CHECK_METRICS={src}: {e}")
    for text in list(texts.values()) + ([live_text] if live_text is not None else []):
        learn_types(text)
    return texts, src, live_text


def check_metric_names(dash_path, dash, texts, src, live_text):
    """Every ds_reaper_* name queried is exposed by the binary (and is in the
    live exposition of DEPLOY_CHECK_METRICS when that is set)."""
    known = set()
    for f, text in texts.items():
        names = exposition_names(text)
        if not names:
            fail(f"{f}: the binary's exposition names no ds_reaper_* metric")
        known |= names
    if not texts:
        fail("no exposition of the binary given: the queried metric names are not checked")
    else:
        ok(f"the binary exposes {len(known)} ds_reaper_* metric families "
           f"({len(SUFFIXED)} of them histograms or summaries)")
    live = None
    if live_text is not None:
        live = exposition_names(live_text)
        ok(f"live exposition {src}: {len(live)} ds_reaper_* metrics")

    sources = {}
    if dash is not None:
        with open(dash_path) as fh:
            sources[dash_path] = fh.read()
    for f in ("deploy/prometheus/alerts.yml", "deploy/prometheus/alerts.test.yml"):
        with open(f) as fh:
            sources[f] = fh.read()
    used_all = set()
    clean = True
    for f, text in sources.items():
        used = metric_names(text)
        used_all |= used
        if texts and used - known:
            clean = False
            fail(f"{f}: metric names the binary does not expose: {sorted(used - known)}")
        if live is not None and used - live:
            clean = False
            fail(f"{f}: metric names missing from the live exposition: {sorted(used - live)}")
    if texts and clean:
        ok(f"{len(used_all)} distinct ds_reaper_* metric names queried, all exposed by the binary"
           + (" and in the live exposition" if live is not None else ""))
    if texts:
        unused = known - used_all
        if unused:
            print(f"      (exposed but not queried anywhere: {sorted(unused)})")


def check_kubernetes(outdir):
    try:
        import yaml
    except ImportError:
        fail("python3 yaml module not installed (Debian python3-yaml, pip install pyyaml): "
             "YAML and Kubernetes checks not run")
        return
    files = sorted(glob.glob("deploy/**/*.y*ml", recursive=True))
    docs = {}
    for f in files:
        try:
            with open(f) as fh:
                docs[f] = [d for d in yaml.safe_load_all(fh) if d is not None]
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

    k = "deploy/kubernetes/"
    if k + "sidecar.yaml" in docs and docs[k + "sidecar.yaml"]:
        tmpl = docs[k + "sidecar.yaml"][0].get("spec", {}).get("template", {})
        check_container(k + "sidecar.yaml", tmpl.get("spec", {}))
        if (tmpl.get("metadata", {}).get("annotations") or {}).get("prometheus.io/scrape") != "true":
            fail(k + "sidecar.yaml: no prometheus.io/scrape annotation")
        # The patch applied to a minimal DS master StatefulSet, for the
        # schema validation in check-deploy.sh.
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
        with open(os.path.join(outdir, "sidecar-statefulset.yaml"), "w") as out:
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
        text = acm[0].get("data", {}).get("config.toml", "")
        try:
            tomllib.loads(text)
            # Its keys: `ds-reaper config check` in check-deploy.sh.
            with open(os.path.join(outdir, "k8s-agent-config.toml"), "w") as out:
                out.write(text)
        except tomllib.TOMLDecodeError as e:
            fail(k + f"agent-configmap.yaml: config.toml does not parse: {e}")
    ok("Kubernetes agent sidecar: shareProcessNamespace, probes, exactly SYS_PTRACE and DAC_READ_SEARCH")
    # Its variant for agent.allow_kill = true (SPEC §11, §15): the same patch
    # plus the KILL capability and DS_REAPER__AGENT__ALLOW_KILL=true, nothing else.
    kv = k + "agent-sidecar-kill.yaml"
    if not docs.get(kv):
        fail(kv + " missing or empty")
    else:
        import copy
        kdoc = copy.deepcopy(docs[kv][0])
        kc = containers(((kdoc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("ds-reaper-agent")
        if kc is None:
            fail(kv + ": no container named ds-reaper-agent")
        else:
            kcaps = (kc.get("securityContext") or {}).get("capabilities") or {}
            if kcaps.get("drop") != ["ALL"] or sorted(kcaps.get("add") or []) != ["DAC_READ_SEARCH", "KILL", "SYS_PTRACE"]:
                fail(kv + f": capabilities must drop ALL and add exactly SYS_PTRACE, DAC_READ_SEARCH, KILL: {kcaps}")
            kenv = kc.get("env") or []
            allow = [e for e in kenv if e.get("name") == "DS_REAPER__AGENT__ALLOW_KILL"]
            if [e.get("value") for e in allow] != ["true"]:
                fail(kv + ": DS_REAPER__AGENT__ALLOW_KILL is not set to \"true\"")
            # with those two differences undone it must be agent-sidecar.yaml
            kcaps["add"] = [c for c in kcaps.get("add") or [] if c != "KILL"]
            kc["env"] = [e for e in kenv if e.get("name") != "DS_REAPER__AGENT__ALLOW_KILL"]
            if kdoc != docs[a][0]:
                fail(kv + ": differs from agent-sidecar.yaml in more than KILL and DS_REAPER__AGENT__ALLOW_KILL")
            else:
                ok("Kubernetes agent sidecar for kills: agent-sidecar.yaml plus KILL and allow_kill only")

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
        text = cms[0].get("data", {}).get("config.toml", "")
        try:
            cfg = tomllib.loads(text)
            if cfg.get("http", {}).get("listen") != "0.0.0.0:9477":
                fail(k + "configmap.yaml: http.listen must be 0.0.0.0:9477 in a pod")
            # Its keys: `ds-reaper config check` in check-deploy.sh.
            with open(os.path.join(outdir, "k8s-config.toml"), "w") as out:
                out.write(text)
            ok(k + "configmap.yaml: config.toml parses, http.listen 0.0.0.0:9477")
        except tomllib.TOMLDecodeError as e:
            fail(k + f"configmap.yaml: config.toml does not parse: {e}")
    secrets = [d for d in docs.get(k + "configmap.yaml", []) if d.get("kind") == "Secret"]
    if not secrets or secrets[0].get("metadata", {}).get("name") != "ds-reaper-secrets":
        fail(k + "configmap.yaml has no Secret ds-reaper-secrets")
    ok("Kubernetes manifests: probes, ports, resources, references")

    # The DS_REAPER__* variables of every container in the manifests, for
    # `ds-reaper config check` (which names an unknown one).
    env_names = set()

    def pod_specs(node):
        if isinstance(node, dict):
            if "containers" in node:
                yield node
            for v in node.values():
                yield from pod_specs(v)
        elif isinstance(node, list):
            for v in node:
                yield from pod_specs(v)

    for f in sorted(docs):
        if not f.startswith(k):
            continue
        for pod_spec in pod_specs(docs[f]):
            for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
                for e in c.get("env") or []:
                    name = e.get("name", "")
                    if not name.startswith("DS_REAPER__"):
                        continue
                    if re.fullmatch(r"DS_REAPER__[A-Za-z0-9_]+", name):
                        env_names.add(name)
                    else:
                        fail(f"{f}: container {c.get('name')}: env {name!r} is not a variable name")
    with open(os.path.join(outdir, "k8s-env-names.txt"), "w") as out:
        out.writelines(n + "\n" for n in sorted(env_names))
    ok(f"{len(env_names)} DS_REAPER__* variable(s) set in the Kubernetes containers"
       + (f": {sorted(env_names)}" if env_names else ""))

    # The scrape configs must keep job="ds-reaper" (DsReaperDown).
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


def main():
    ap = argparse.ArgumentParser(description="Checks of check-deploy.sh: Grafana, metric names, Kubernetes.")
    ap.add_argument("outdir", help="where the files for promtool, kubernetes-validate and config check go")
    ap.add_argument("--exposition", action="append", default=[], metavar="FILE",
                    help="a /metrics text of the built binary (repeatable)")
    args = ap.parse_args()
    outdir = os.path.abspath(args.outdir)
    expositions = [os.path.abspath(f) for f in args.exposition]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    texts, src, live_text = read_expositions(expositions)  # first: histogram suffixes fold
    dash_path = "deploy/grafana/ds-reaper.json"
    dash = check_grafana(dash_path, outdir)
    check_metric_names(dash_path, dash, texts, src, live_text)
    check_kubernetes(outdir)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
