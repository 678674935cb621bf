#!/usr/bin/env python3
"""ds-reaper beside a real DolphinScheduler (issue 19): scenarios, each a check of what the real DS
and ds-reaper do together, printed as one table (scenario x version -> result, figures).

  scenarios.py [--version 3.1.1] [--db mysql|postgres] [--bin target/debug/ds-reaper]
               [--offline] [--keep] [SCENARIO ...]          (default: fidelity zombie)

Scenarios (one DS cluster per run: 1 master, 2 workers, the API server; launch.sh):
  fidelity     tasks running (one of them cd's away): `ds-reaper check` finds nothing, /api/v1/workers
               shows exactly DS's servers, version = "auto" detects the line, each worker's agent lists
               exactly the task instances DS runs on that worker
  worker-kill  a worker JVM killed with kill -9 while its task runs, master alive: DS's own failover is
               timed; ds-reaper at the recommended policy (fault-tolerance + recover) writes nothing
  zombie       the worker host running the task and the master owning the workflow die together;
               ds-reaper (fault-tolerance + recover) hands the workflow back; the master, started
               again, consumes the command and runs the workflow to SUCCESS
  zombie-fail  the same with `fail` + `recover`
  reap         the same zombie, written by `ds-reaper reap --task-id N --workflow recover --yes`
  sigstop      a worker frozen (SIGSTOP) past its registry session, thawed within ds-reaper's grace:
               DS's reaction; ds-reaper writes nothing
  ghost        kill -9 of a busy worker's JVM: DS fails the task over and its process lives on; with the
               worker back, the agent's listing makes it a ghost, killed on the daemon's order (policy
               kill, agent.allow_kill); the new attempt runs on; no DS row written
  zombie-subprocess
               a parent workflow whose SUB_PROCESS child runs a long SHELL task; the master owning both and
               the child's worker host die together: ds-reaper hands the child back but holds the parent
               (its SUB_PROCESS row live, no recover: child_workflow_running, in API and audit) while the
               child runs; with the master back the parent ends no earlier than its child (SPEC §13)
  leader-handover
               two ds-reaper replicas; the zombie of `zombie`; the leader, held by the test-only fault point
               DS_REAPER_TEST_PAUSE_AFTER=task_write after its task write, is killed with kill -9 before its
               workflow step; the standby leads and recovers the workflow after grace_period (15 s), not
               workflow_grace_period (15 m); DS completes it; the killed replica, restarted, closes its
               dangling intent as done (SPEC §10, §13)

Exit status 1 when any scenario fails. Python 3 stdlib only; nothing of DS's is written by hand:
workflows go through DS's REST API (api.py), DS's rows are only read.
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAUNCH = str(HERE / "launch.sh")
DS_RUNS = pathlib.Path(os.environ.get("DS_RUNS", "/var/tmp/ds-reaper-services/ds-run"))
ZK = os.environ.get("ZK", "127.0.0.1:2181")
# DS's registry namespace for these runs: the shared ZooKeeper also serves the other tests, none of
# which may see (or be seen by) this cluster
NAMESPACE = "ds-reaper-realds"
# launch.sh's default port base; another base makes a run of its own (name, database, namespace, ports)
# that can run beside one on the default base (the test command's)
PORT_BASE = 25000
TERMINAL = {"SUCCESS": 7, "FAILURE": 6, "KILL": 9}


def say(msg):
    print(f"[scenario] {time.strftime('%H:%M:%S', time.gmtime())} {msg}", file=sys.stderr, flush=True)


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def wait_for(what, fn, timeout, every=2.0):
    """Polls fn until it returns a truthy value; that value, or Failed after timeout seconds."""
    t0 = time.monotonic()
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() - t0 > timeout:
            raise Failed(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def sh(*args, check_rc=True, capture=True, timeout=900):
    r = subprocess.run(args, capture_output=capture, text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise Failed(f"{' '.join(args[:3])}... exited {r.returncode}: {(r.stderr or '')[-800:]}")
    return r


class Cluster:
    """A real DS run made by launch.sh: 1 master, 2 workers, the API server."""

    def __init__(self, version, db, offline, port_base=PORT_BASE):
        self.v, self.db, self.offline, self.pb = version, db, offline, port_base
        own = "" if port_base == PORT_BASE else f"-p{port_base}"
        self.name = f"scen-{version.replace('.', '')}-{db}{own}"
        self.dbname = f"dsreal_scen_{version.replace('.', '')}_{db}{own.replace('-', '_')}"
        self.ns = NAMESPACE + own
        self.reaper_port, self.agent_port = port_base + 300, port_base + 310
        self.dir = DS_RUNS / self.name
        self.registered_s = None

    def up(self):
        sh("bash", LAUNCH, "stop-all", self.name, check_rc=False)
        sh("bash", LAUNCH, "resolve", self.v, *(["--offline"] if self.offline else []))
        sh("bash", LAUNCH, "schema", self.v, self.db, self.dbname)
        sh("bash", LAUNCH, "start", self.v, "--db", self.db, "--dbname", self.dbname, "--name", self.name,
           "--masters", "1", "--workers", "2", "--namespace", self.ns, "--port-base", str(self.pb))
        t0 = time.monotonic()
        sh("bash", LAUNCH, "wait-registered", self.name, "--timeout", "600")
        self.registered_s = round(time.monotonic() - t0)
        say(f"cluster {self.name} registered ({self.registered_s}s after start)")

    def down(self):
        sh("bash", LAUNCH, "stop-all", self.name, check_rc=False)

    def worker_node(self, i):
        return f"127.0.0.1:{self.pb + 100 + 10 * i}"

    def master_node(self, i):
        return f"127.0.0.1:{self.pb + 10 * i}"

    def worker_index(self, host):
        return (int(host.rsplit(":", 1)[1]) - self.pb - 100) // 10

    def pid(self, server):
        try:
            return int((self.dir / server / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def db_url(self):
        if self.db == "mysql":
            return f"mysql://ds:ds@127.0.0.1:3306/{self.dbname}"
        return f"postgres://postgres:postgres@127.0.0.1:5432/{self.dbname}"

    def sql(self, q):
        """Rows of a query as lists of strings (NULL as None)."""
        if self.db == "mysql":
            r = sh("mysql", "-h127.0.0.1", "-uds", "-pds", "-N", "-B", self.dbname, "-e", q)
            return [[None if c == "NULL" else c for c in line.split("\t")] for line in r.stdout.splitlines()]
        env = dict(os.environ, PGPASSWORD="postgres")
        r = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", self.dbname, "-tA", "-F", "\t",
                            "-c", q], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise Failed(f"psql: {r.stderr[-500:]}")
        return [[c if c != "" else None for c in line.split("\t")] for line in r.stdout.splitlines() if line]

    def tasks(self):
        rows = self.sql("select id, name, state, host, flag, process_instance_id from t_ds_task_instance order by id")
        return [dict(id=int(r[0]), name=r[1], state=int(r[2]), host=r[3], flag=int(r[4]), wf=int(r[5]))
                for r in rows]

    def workflow_state(self, wf):
        rows = self.sql(f"select state from t_ds_process_instance where id = {wf}")
        return int(rows[0][0]) if rows else None

    def workflow(self, wf):
        """A workflow row: state, host, end_time (a string, the database's own precision) or None."""
        rows = self.sql(f"select state, host, end_time from t_ds_process_instance where id = {wf}")
        return dict(state=int(rows[0][0]), host=rows[0][1], end=rows[0][2]) if rows else None

    def master_log_since(self, since, *needles):
        """master-1's log lines stamped at or after `since` (UTC 'YYYY-MM-DD HH:MM:SS') holding every needle;
        each starts with its timestamp."""
        out = []
        for f in sorted((self.dir / "master-1" / "logs").glob("dolphinscheduler-master*.log")):
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)
                if len(parts) < 4 or f"{parts[1]} {parts[2]}" < since:
                    continue
                if all(n in line for n in needles):
                    out.append(f"{parts[1]} {parts[2]} {parts[3]}")
        return out

    def children(self, parent):
        """The child workflow instances of `parent` (DS's parent-child relation): (parent task, child) ids."""
        rows = self.sql("select parent_task_instance_id, process_instance_id from t_ds_relation_process_instance "
                        f"where parent_process_instance_id = {parent} order by id")
        return [(int(r[0]), int(r[1])) for r in rows if r[1] and int(r[1]) > 0]

    def commands(self):
        return self.sql("select id, command_type, process_instance_id from t_ds_command order by id")

    def snapshot(self):
        """DS's rows that ds-reaper may write, to compare before/after."""
        return (self.sql("select id, state, flag, host from t_ds_task_instance order by id"),
                self.sql("select id, state, host from t_ds_process_instance order by id"),
                self.commands())

    def api(self, *args):
        r = sh("python3", str(HERE / "api.py"), "--ds-version", self.v,
               "--url", f"http://127.0.0.1:{self.pb + 200}/dolphinscheduler", *args)
        return r.stdout.strip()

    def run_workflow(self, name, scripts):
        inst = int(self.api("run", "--name", name, *sum((["--script", s] for s in scripts), [])))
        self.api("wait", str(inst), "--timeout", "300")
        return inst

    def stop(self, server, sig):
        sh("bash", LAUNCH, "stop", self.name, server, "--signal", sig, check_rc=False)

    def kill_host(self, server):
        """A worker host's death: the JVM and every task process in its session (launch.sh starts
        each JVM with setsid, and DS's task processes keep its session)."""
        pid = self.pid(server)
        check(pid, f"no pid for {server}")
        subprocess.run(["pkill", "-KILL", "-s", str(pid)], check=False)
        wait_for(f"{server}'s session to end",
                 lambda: subprocess.run(["pgrep", "-s", str(pid)], capture_output=True).returncode != 0, 30, 0.5)

    def alive(self, server):
        pid = self.pid(server)
        return bool(pid) and pathlib.Path(f"/proc/{pid}").exists() and \
            "java" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")

    def heal(self):
        """After a scenario, whatever it left dead or frozen runs again, registered."""
        servers = ["master-1", "worker-1", "worker-2", "api"]
        for sv in servers:
            if self.pid(sv):
                subprocess.run(["kill", "-CONT", str(self.pid(sv))], check=False, stderr=subprocess.DEVNULL)
        dead = [sv for sv in servers if not self.alive(sv)]
        for sv in dead:
            say(f"restarting {sv} after the scenario")
            self.restart(sv)
        self.wait_registered()

    def restart(self, server):
        sh("bash", LAUNCH, "restart", self.name, server)

    def wait_registered(self):
        sh("bash", LAUNCH, "wait-registered", self.name, "--timeout", "600")

    def zk_children(self, path):
        r = sh("bash", LAUNCH, "zk", self.name, "ls", path, check_rc=False)
        for line in r.stdout.splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                inner = line[1:-1].strip()
                return sorted(x.strip() for x in inner.split(",") if x.strip())
        return []


class Reaper:
    """ds-reaper (daemon) and its agents on the DS run's workers."""

    def __init__(self, binary, cluster, policy, tag, grace="15s", allow_kill=False,
                 workflow_grace="20s", port=None, env=None):
        self.bin, self.c, self.policy, self.grace = binary, cluster, policy, grace
        self.allow_kill, self.workflow_grace = allow_kill, workflow_grace
        self.port = port or cluster.reaper_port
        # the daemon's extra environment (a test-only fault point, leader-handover)
        self.env = env or {}
        self.dir = cluster.dir / f"reaper-{tag}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.daemon = None
        self.agents = {}
        self.cfg = self.dir / "reaper.toml"
        self.cfg.write_text(self.config())

    def config(self):
        pol = "\n".join(f'{k} = "{v}"' for k, v in self.policy.items())
        return f"""[dolphinscheduler]
version = "auto"
time_zone = "UTC"
[registry]
type = "zookeeper"
[zookeeper]
connect = "{ZK}"
root = "/{self.c.ns}"
session_timeout = "30s"
[database]
url = "{self.c.db_url()}"
[reconcile]
sweep_interval = "2s"
full_scan_interval = "30s"
grace_period = "{self.grace}"
startup_settle = "5s"
process_gone_after = "20s"
agent_stale_after = "20s"
workflow_grace_period = "{self.workflow_grace}"
ghost_after = "10s"
[policy]
{pol}
[http]
listen = "127.0.0.1:{self.port}"
[audit]
path = "{self.dir / 'audit.jsonl'}"
[log]
format = "pretty"
level = "info"
"""

    def agent_config(self, i):
        kill = 'allow_kill = true\nkill_grace = "5s"\n' if self.allow_kill else ""
        return f"""[registry]
type = "zookeeper"
[zookeeper]
connect = "{ZK}"
root = "/{self.c.ns}"
[agent]
worker = "{self.c.worker_node(i)}"
exec_base = "{self.c.dir / f'worker-{i}' / 'data'}"
scan_interval = "2s"
listen = "127.0.0.1:{self.c.agent_port + i}"
{kill}[log]
format = "pretty"
level = "info"
"""

    def spawn(self, cfg, cmd, log, env=None):
        out = open(log, "ab")
        return subprocess.Popen([self.bin, "--config", str(cfg), cmd], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))

    def start(self, agents=(1, 2), env=None):
        for i in agents:
            self.start_agent(i)
        self.daemon = self.spawn(self.cfg, "run", self.dir / "daemon.log", self.env if env is None else env)
        wait_for("ds-reaper /readyz", lambda: self.status_code("/readyz") == 200, 120, 1)

    def log(self):
        p = self.dir / "daemon.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def leader(self):
        """Whether this replica says it leads (None while it does not answer)."""
        try:
            return bool(self.get("/api/v1/status").get("leader"))
        except (OSError, ValueError):
            return None

    def start_agent(self, i):
        cfg = self.dir / f"agent-{i}.toml"
        cfg.write_text(self.agent_config(i))
        self.agents[i] = self.spawn(cfg, "agent", self.dir / f"agent-{i}.log")

    def stop_agent(self, i, sig=signal.SIGTERM):
        p = self.agents.pop(i, None)
        if p and p.poll() is None:
            p.send_signal(sig)
            p.wait(30)

    def stop(self):
        for i in list(self.agents):
            self.stop_agent(i)
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(30)
            except subprocess.TimeoutExpired:
                self.daemon.kill()

    def status_code(self, path, port=None):
        port = port or self.port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def get(self, path, port=None):
        port = port or self.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.loads(r.read().decode())

    def agent_tasks(self, i):
        """Task ids the agent of worker i listed in its latest report (None before its first)."""
        try:
            st = self.get("/", self.c.agent_port + i)
        except OSError:
            return None
        rep = st.get("report")
        if not rep or rep.get("blind") or rep.get("unreadable"):
            return None
        return sorted(t["task_id"] for t in rep.get("tasks", []))

    def audit(self):
        p = self.dir / "audit.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def check(self, observe="10s"):
        r = subprocess.run([self.bin, "--config", str(self.cfg), "check", "--format", "json", "--observe", observe],
                           capture_output=True, text=True, timeout=300)
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            doc = None
        return r.returncode, doc, r.stderr

    def writes(self):
        return [a for a in self.audit() if a.get("event") in ("intent", "done")]


RECOMMENDED = {"worker_lost": "fault-tolerance", "master_lost": "fault-tolerance", "workflow": "recover",
               "workflow_master_lost": "recover"}
REPORT_ONLY = {"worker_lost": "report"}


# ------------------------------------------------------------------ scenarios
def s_fidelity(c, binary):
    wf = c.run_workflow("fidelity", ["sleep 240", "cd /tmp && sleep 240"])
    r = Reaper(binary, c, REPORT_ONLY, "fidelity")
    try:
        r.start()
        rc, doc, err = r.check("8s")
        check(rc == 0, f"check exited {rc} with tasks running: {json.dumps(doc)[:800] if doc else err[-800:]}")
        check(doc is not None and not doc.get("zombies") and not doc.get("workflows"), f"check found {doc}")
        st = wait_for("a sweep", lambda: (lambda s: s if s.get("last_sweep") else None)(r.get("/api/v1/status")), 60)
        check(st.get("ds_line") == c.v.rsplit(".", 1)[0] or str(st.get("ds_line", "")).startswith(c.v[:3]),
              f"detected line {st.get('ds_line')} for DS {c.v}")
        w = r.get("/api/v1/workers")
        got_w = sorted(x["host"] for x in w["workers"])
        got_m = sorted(x["host"] for x in w["masters"])
        want_w = c.zk_children("/nodes/worker")
        want_m = c.zk_children("/nodes/master")
        check(got_w == want_w and got_m == want_m, f"workers {got_w} / masters {got_m}, DS registered {want_w} / {want_m}")
        rows = [t for t in c.tasks() if t["wf"] == wf]
        for i in (1, 2):
            want = sorted(t["id"] for t in rows if t["state"] == 1 and t["host"] == c.worker_node(i))
            got = wait_for(f"agent {i}'s listing {want}", lambda: (lambda g: g if g == want else None)(r.agent_tasks(i))
                           if want else (r.agent_tasks(i) == [] and [True]), 60)
            say(f"agent of worker-{i} lists {got} = DS's running tasks there")
        zs = r.get("/api/v1/zombies")
        check(not zs.get("zombies"), f"zombies while every task runs: {zs}")
        check(not r.writes(), f"ds-reaper wrote: {r.writes()}")
        return f"line {st.get('ds_line')}; {len(got_w)} workers + {len(got_m)} master as DS; agents list DS's tasks"
    finally:
        r.stop()
        cancel_running(c)


def cancel_running(c):
    """Ends the scenario's task processes (DS's worker then reports them failed): each scenario
    starts its own workflow. Only processes running a command file under a worker's exec folder,
    and their children; never a worker JVM (its command line names the data folder too)."""
    jvms = {c.pid(f"worker-{i}") for i in (1, 2)}
    for p in pathlib.Path("/proc").glob("[0-9]*"):
        if int(p.name) in jvms:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "java" in cmd.split("\0", 1)[0]:
            continue
        if any(str(c.dir / f"worker-{i}" / "data" / "exec") in cmd for i in (1, 2)):
            subprocess.run(["pkill", "-KILL", "-P", p.name], check=False)
            subprocess.run(["kill", "-KILL", p.name], check=False, stderr=subprocess.DEVNULL)


def zombie(c, binary, policy, tag, by_reap=False):
    wf = c.run_workflow(tag, ["sleep 45"])
    task = [t for t in c.tasks() if t["wf"] == wf][0]
    wi = c.worker_index(task["host"])
    r = Reaper(binary, c, policy if not by_reap else REPORT_ONLY, tag)
    try:
        r.start()
        say(f"task {task['id']} runs on worker-{wi}; killing its host and master-1 together")
        r.stop_agent(wi, signal.SIGKILL)
        c.kill_host(f"worker-{wi}")
        c.stop("master-1", "KILL")
        t0 = time.monotonic()
        if by_reap:
            # as an operator would: once DS's registry shows both gone (their sessions expired);
            # while the master's node is there, reap fails the task but skips the recover
            wait_for("the dead master's and worker's nodes to expire",
                     lambda: not c.zk_children("/nodes/master")
                     and c.worker_node(wi) not in c.zk_children("/nodes/worker"), 180)
            def reaped():
                p = subprocess.run([binary, "--config", str(r.cfg), "reap", "--task-id", str(task["id"]),
                                    "--action", "fault-tolerance", "--workflow", "recover", "--yes"],
                                   capture_output=True, text=True, timeout=120)
                return p.returncode == 0
            wait_for("reap to accept the zombie", reaped, 180, 5)
        else:
            wait_for("ds-reaper's writes", lambda: [a for a in r.audit() if a.get("event") == "done"], 180)
        wrote_s = round(time.monotonic() - t0)
        time.sleep(5)
        after = c.tasks()
        cmds = [x for x in c.commands() if x[2] is None or int(x[2]) == wf]
        old = [t for t in after if t["id"] == task["id"]][0]
        check(old["state"] in (6, 8), f"task row after ds-reaper: {old}")
        check(len(cmds) == 1, f"commands for the workflow: {cmds} (want exactly one)")
        say(f"ds-reaper wrote in {wrote_s}s: task {old}, command {cmds}; restarting master-1 and worker-{wi}")
        c.restart("master-1")
        c.restart(f"worker-{wi}")
        r.start_agent(wi)
        c.wait_registered()
        t1 = time.monotonic()
        # `fail` + recover leaves the workflow FAILURE until a master takes the command: wait for that first
        wait_for("a master to take ds-reaper's command", lambda: not c.commands(), 300, 2)
        wait_for(f"workflow {wf} to end", lambda: c.workflow_state(wf) in TERMINAL.values(), 420, 3)
        end_s = round(time.monotonic() - t1)
        state = c.workflow_state(wf)
        rows = [t for t in c.tasks() if t["wf"] == wf]
        check(state == 7, f"workflow {wf} ended in state {state}; rows {rows}")
        live = [t for t in rows if t["flag"] == 1]
        check(len(live) == 1 and live[0]["state"] == 7, f"task rows after the recovery: {rows}")
        check(not c.commands(), f"commands left: {c.commands()}")
        n_writes = len([a for a in r.audit() if a.get("event") == "done"])
        return f"written {wrote_s}s after the deaths ({n_writes} done); SUCCESS {end_s}s after the restart; {len(rows)} task rows"
    finally:
        r.stop()
        cancel_running(c)


def s_zombie(c, binary):
    return zombie(c, binary, RECOMMENDED, "zombie")


def s_zombie_fail(c, binary):
    return zombie(c, binary, {**RECOMMENDED, "worker_lost": "fail", "master_lost": "fail"}, "zombiefail")


def s_reap(c, binary):
    return zombie(c, binary, None, "reap", by_reap=True)


def s_worker_kill(c, binary):
    wf = c.run_workflow("workerkill", ["sleep 120"])
    task = [t for t in c.tasks() if t["wf"] == wf][0]
    wi = c.worker_index(task["host"])
    r = Reaper(binary, c, RECOMMENDED, "workerkill")
    try:
        r.start()
        before = c.snapshot()
        say(f"kill -9 of worker-{wi}'s JVM (task {task['id']}); master alive")
        c.stop(f"worker-{wi}", "KILL")
        t0 = time.monotonic()
        wait_for("DS's own failover (old row 8, flag 0; a new attempt)",
                 lambda: any(t["id"] == task["id"] and t["state"] == 8 and t["flag"] == 0 for t in c.tasks())
                 and any(t["wf"] == wf and t["flag"] == 1 and t["id"] != task["id"] for t in c.tasks()), 240)
        ds_s = round(time.monotonic() - t0)
        # ds-reaper's grace (15 s) and a few sweeps pass; it must leave DS's failover alone
        time.sleep(30)
        writes = r.writes()
        check(not writes, f"ds-reaper wrote beside DS's own failover: {writes}; rows before {before}")
        c.restart(f"worker-{wi}")
        c.wait_registered()
        return f"DS failed over in {ds_s}s (±2); ds-reaper wrote nothing"
    finally:
        r.stop()
        cancel_running(c)


def s_sigstop(c, binary):
    """A worker frozen past its registry session but thawed within ds-reaper's grace (90 s here, as
    the default 60 s is to DS's 30 s session): DS fails it over and ds-reaper must leave that alone.
    Seen on 3.1.1: the master dispatches the new attempt to the frozen worker again (its worker list
    is stale), and the thawed worker runs it."""
    wf = c.run_workflow("sigstop", ["sleep 60"])
    task = [t for t in c.tasks() if t["wf"] == wf][0]
    wi = c.worker_index(task["host"])
    r = Reaper(binary, c, RECOMMENDED, "sigstop", grace="90s")
    try:
        r.start()
        c.stop(f"worker-{wi}", "STOP")
        t0 = time.monotonic()
        wait_for("the frozen worker's node to expire",
                 lambda: c.worker_node(wi) not in c.zk_children("/nodes/worker"), 180)
        exp_s = round(time.monotonic() - t0)
        wait_for("DS's failover of the frozen worker",
                 lambda: any(t["id"] == task["id"] and t["flag"] == 0 for t in c.tasks()), 240)
        ds_s = round(time.monotonic() - t0)
        retry = [t for t in c.tasks() if t["wf"] == wf and t["flag"] == 1]
        time.sleep(10)
        c.stop(f"worker-{wi}", "CONT")
        thaw_s = round(time.monotonic() - t0)
        wait_for(f"workflow {wf} to end", lambda: c.workflow_state(wf) in TERMINAL.values(), 300, 3)
        rows = [t for t in c.tasks() if t["wf"] == wf]
        writes = r.writes()
        check(not writes, f"ds-reaper wrote while DS failed over a frozen worker: {writes}")
        retry_host = retry[0]["host"] if retry else None
        return (f"node expired after {exp_s}s, DS failed over at {ds_s}s, new attempt on "
                f"{'the frozen worker again' if retry_host == task['host'] else retry_host}; thawed at {thaw_s}s; "
                f"workflow {'SUCCESS' if c.workflow_state(wf) == 7 else c.workflow_state(wf)}, "
                f"{len(rows)} task rows; ds-reaper wrote nothing")
    finally:
        r.stop()
        c.stop(f"worker-{wi}", "CONT")
        cancel_running(c)


def command_file_pids(wf, task_id):
    """Processes running task `task_id`'s 3.1 command file (`<wf>_<task>.command`)."""
    out = []
    for p in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if f"/{wf}_{task_id}.command" in cmd or f"/{wf}_{task_id}.sh" in cmd:
            out.append(int(p.name))
    return out


def s_ghost(c, binary):
    """DS's own worker failover leaves the killed worker's task processes running (FINDINGS §5.1): once
    the worker is back (its agent sees again), the orphan is a ghost of a flag-0 row; with
    `ghost_process = "kill"` and `agent.allow_kill` the orphan's tree dies, the new attempt runs on, and
    nothing of DS's is written."""
    wf = c.run_workflow("ghost", ["sleep 300"])
    task = [t for t in c.tasks() if t["wf"] == wf][0]
    wi = c.worker_index(task["host"])
    r = Reaper(binary, c, {**RECOMMENDED, "ghost_process": "kill"}, "ghost", allow_kill=True)
    try:
        r.start()
        if r.status_code("/api/v1/ghosts") == 404:
            raise Failed("this ds-reaper has no /api/v1/ghosts")
        orphans = command_file_pids(wf, task["id"])
        check(orphans, f"no process runs task {task['id']}'s command file")
        say(f"kill -9 of worker-{wi}'s JVM; task {task['id']} processes {orphans} stay")
        c.stop(f"worker-{wi}", "KILL")
        t0 = time.monotonic()
        wait_for("DS's own failover", lambda: any(t["id"] == task["id"] and t["flag"] == 0 for t in c.tasks()), 240)
        ds_s = round(time.monotonic() - t0)
        c.restart(f"worker-{wi}")
        c.wait_registered()
        seen = wait_for(f"ghost {task['id']} in /api/v1/ghosts",
                        lambda: [g for g in r.get("/api/v1/ghosts").get("ghosts", []) if g.get("task_id") == task["id"]],
                        240)
        ghost_s = round(time.monotonic() - t0)
        wait_for("the orphan's processes to end", lambda: not command_file_pids(wf, task["id"]), 120)
        kill_s = round(time.monotonic() - t0)
        wait_for("the kill's audit outcome",
                 lambda: [a for a in r.audit() if a.get("kind") == "process" and a.get("event") == "done"], 60)
        rows = [t for t in c.tasks() if t["wf"] == wf]
        live = [t for t in rows if t["flag"] == 1]
        check(len(live) == 1 and live[0]["state"] == 1, f"the new attempt must run on: {rows}")
        check(command_file_pids(wf, live[0]["id"]), f"the new attempt {live[0]['id']} has no process any more")
        task_writes = [a for a in r.writes() if a.get("kind") != "process"]
        check(not task_writes, f"ds-reaper wrote DS rows: {task_writes}")
        return (f"DS failed over in {ds_s}s; ghost reported at {ghost_s}s ({seen[0].get('row_state')}, "
                f"flag {seen[0].get('row_flag')}), killed by {kill_s}s; new attempt untouched")
    finally:
        r.stop()
        cancel_running(c)


def host_null(h):
    """DS's failover mark: the 4-character string 'NULL' (the mysql client prints it as it prints SQL NULL)."""
    return h in (None, "", "NULL")


def audit_text(records):
    """Every string an audit record carries, for a substring check."""
    return [json.dumps(a) for a in records]


def s_zombie_subprocess(c, binary):
    """SPEC §13 "a parent never ends before its child" (issue 39 item 13): a parent workflow whose
    SUB_PROCESS task's child runs a long SHELL task; the master owning both and the worker running
    the child's task die together (kill -9). ds-reaper (fault-tolerance + recover) writes the child's
    task and hands the child back, but leaves the parent's SUB_PROCESS row live and the parent with
    its master while the child is non-terminal (child_workflow_running), in the audit too. Then the
    master (and worker) start again, and from DS's rows: the parent ends no earlier than its child."""
    parent = int(c.api("run-parent", "--name", "zsub", "--script", "sleep 60"))
    pair = wait_for(f"a child of workflow {parent}", lambda: c.children(parent), 300)
    sub_id, child = pair[0]
    task = wait_for(f"child workflow {child}'s task to run on a worker",
                    lambda: next((t for t in c.tasks() if t["wf"] == child and t["state"] == 1 and t["host"]), None),
                    300)
    sub = [t for t in c.tasks() if t["id"] == sub_id][0]
    check(sub["state"] == 1 and sub["host"] == c.master_node(1), f"the SUB_PROCESS row: {sub}")
    wi = c.worker_index(task["host"])
    r = Reaper(binary, c, RECOMMENDED, "zombiesub")
    try:
        r.start()
        say(f"parent {parent} (SUB_PROCESS task {sub_id}) -> child {child}, its task {task['id']} on worker-{wi}; "
            "killing that host and master-1 together")
        r.stop_agent(wi, signal.SIGKILL)
        c.kill_host(f"worker-{wi}")
        c.stop("master-1", "KILL")
        t0 = time.monotonic()
        # the child is handed back by the task's follow-up or as a workflow finding of its own,
        # whichever grace ends first
        wait_for(f"ds-reaper's recover of child {child} (its task {task['id']} written)",
                 lambda: [a for a in r.audit() if a.get("event") == "done" and (a.get("task_id") == task["id"] or (
                     a.get("kind") == "workflow" and a.get("workflow_instance_id") == child))]
                 and host_null(c.workflow(child)["host"]), 240)
        wrote_s = round(time.monotonic() - t0)

        def held():
            zs = [z for z in r.get("/api/v1/zombies").get("zombies", []) if z.get("task_id") == sub_id]
            ws = [w for w in r.get("/api/v1/workflows").get("workflows", []) if w.get("workflow_instance_id") == parent]
            ok = zs and "child_workflow_running" in (zs[0].get("note") or "") and \
                ws and ws[0].get("action") == "report" and "child_workflow_running" in (ws[0].get("note") or "")
            return (zs[0], ws[0]) if ok else None
        z_sub, w_parent = wait_for("the parent's hold (SUB_PROCESS zombie and parent finding, child_workflow_running)",
                                   held, 240)
        hold_s = round(time.monotonic() - t0)
        # The hold lasts: for a while, with the child still not ended, the parent's rows stay as DS left them.
        for _ in range(10):
            time.sleep(3)
            s_row = [t for t in c.tasks() if t["id"] == sub_id][0]
            p_row = c.workflow(parent)
            check(s_row["state"] == 1 and s_row["flag"] == 1, f"the SUB_PROCESS row was written: {s_row}")
            check(p_row["host"] == c.master_node(1), f"the parent was handed back: {p_row}")
            check(not [x for x in c.commands() if x[2] and int(x[2]) == parent], f"a command for the parent: {c.commands()}")
        ch = c.workflow(child)
        check(ch["state"] not in TERMINAL.values(), f"the child ended before the master came back: {ch}")
        written = [a for a in r.writes() if a.get("task_id") == sub_id or
                   (a.get("kind") == "workflow" and a.get("workflow_instance_id") == parent)]
        check(not written, f"ds-reaper wrote the parent's rows: {written}")
        hold_audit = [a for a in r.audit() if a.get("event") == "detected" and "child_workflow_running" in json.dumps(a)
                      and (a.get("task_id") == sub_id or a.get("workflow_instance_id") == parent)]
        check(hold_audit, "no audit record shows the hold: " + "; ".join(audit_text(r.audit()))[-1500:])
        say(f"held at {hold_s}s: SUB_PROCESS {z_sub.get('reason')} / parent {w_parent.get('reason')}; "
            f"child {child} state {ch['state']} host {ch['host']}; restarting master-1 and worker-{wi}")
        restarted = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        c.restart("master-1")
        c.restart(f"worker-{wi}")
        r.start_agent(wi)
        c.wait_registered()
        t1 = time.monotonic()
        wait_for(f"parent {parent} and child {child} to end",
                 lambda: all(c.workflow(x)["state"] in TERMINAL.values() for x in (parent, child)), 600, 3)
        end_s = round(time.monotonic() - t1)
        p_row, ch = c.workflow(parent), c.workflow(child)
        kids = c.children(parent)
        rows = [t for t in c.tasks() if t["wf"] in {parent} | {k for _, k in kids}]
        say(f"parent {p_row}, child {ch}, children {kids}, rows {rows}")
        check(p_row["state"] == 7 and ch["state"] == 7, f"parent {p_row}, child {ch}")
        written = [a for a in r.writes() if a.get("task_id") == sub_id or
                   (a.get("kind") == "workflow" and a.get("workflow_instance_id") == parent)]
        check(not written, f"ds-reaper wrote the parent's rows: {written}")
        later = [k for _, k in kids if (c.workflow(k)["end"] or "") > (p_row["end"] or "")]
        order = f"child ended {ch['end']}, parent {p_row['end']}"
        if later:
            # DS 3.1.1 (FINDINGS §9): a starting master fails over the workflows of its previous
            # incarnation, the held parent too: its SUB_PROCESS row to NEED_FAULT_TOLERANCE, which the
            # recovered parent takes for complete -> SUCCESS at once. Only DS may have done that.
            s_row = [t for t in c.tasks() if t["id"] == sub_id][0]
            by_ds = c.master_log_since(restarted, f"[WorkflowInstance-{parent}]", "WorkflowInstance failover finished")
            check(by_ds and s_row["state"] == 8,
                  f"the parent ended ({p_row['end']}) before its child(ren) {later}, not by DS's own master "
                  f"failover: SUB_PROCESS row {s_row}, {[(k, c.workflow(k)) for k in later]}")
            order += (f": the parent first, by DS's own master failover at restart ({by_ds[0][:23]}; "
                      "its SUB_PROCESS row left NEED_FAULT_TOLERANCE, flag 1)")
        return (f"child's task written {wrote_s}s after the deaths; parent held (child_workflow_running, API and "
                f"audit) from {hold_s}s, nothing of it written; after the restart {order}; both SUCCESS "
                f"({end_s}s); {len(kids)} child instance(s)")
    finally:
        r.stop()
        cancel_running(c)


PAUSE_ENV = "DS_REAPER_TEST_PAUSE_AFTER"


def s_leader_handover(c, binary):
    """SPEC §13 "a follow-up survives a change of leader" (issue 39 item 14): two replicas elect a
    leader on the registry. The zombie of `zombie` (worker host and master killed together); the
    leader, held by its test-only fault point right after its task write (DS_REAPER_TEST_PAUSE_AFTER
    =task_write), is killed with kill -9 before its workflow step. The standby takes the lead and
    recovers the workflow after grace_period (15 s), not workflow_grace_period (15 m here); DS's
    master, started again, completes the workflow. The killed replica, started again, closes its
    dangling task intent as done from the row."""
    wf = c.run_workflow("handover", ["sleep 45"])
    task = [t for t in c.tasks() if t["wf"] == wf][0]
    wi = c.worker_index(task["host"])
    a = Reaper(binary, c, RECOMMENDED, "handover-a", workflow_grace="15m", env={PAUSE_ENV: "task_write"})
    b = Reaper(binary, c, RECOMMENDED, "handover-b", workflow_grace="15m", port=c.reaper_port + 1)
    try:
        a.start()
        wait_for("replica A to lead", lambda: a.leader(), 120, 1)
        b.start(agents=())
        check(b.leader() is False, "replica B leads beside A")
        say(f"A leads, B stands by; task {task['id']} runs on worker-{wi}; killing that host and master-1 together")
        a.stop_agent(wi, signal.SIGKILL)
        c.kill_host(f"worker-{wi}")
        c.stop("master-1", "KILL")
        t0 = time.monotonic()
        wait_for("A's task write, held before its workflow step",
                 lambda: "test fault point reached" in a.log()
                 and [t for t in c.tasks() if t["id"] == task["id"]][0]["state"] == 8, 240)
        held_s = round(time.monotonic() - t0)
        check(c.workflow(wf)["host"] == c.master_node(1) and not c.commands(),
              f"A's workflow step was made: {c.workflow(wf)}, commands {c.commands()}")
        a.daemon.send_signal(signal.SIGKILL)
        a.daemon.wait(30)
        t_kill = time.monotonic()
        say(f"A held after its task write {held_s}s after the deaths; kill -9 of A")
        wait_for("B to lead", lambda: b.leader(), 180, 1)
        lead_s = round(time.monotonic() - t_kill)
        done = wait_for("B's recover of the workflow",
                        lambda: [x for x in b.audit() if x.get("kind") == "workflow" and x.get("event") == "done"
                                 and x.get("workflow_instance_id") == wf], 300)
        rec_s = round(time.monotonic() - t_kill)
        ev = done[0].get("evidence") or {}
        check(done[0].get("reason") == "workflow_master_lost" and ev.get("resumed_tasks") == 1,
              f"B's recover record: {done[0]}")
        # workflow_grace_period is 15 m: a recover within minutes of the deaths came from grace_period
        check(held_s + rec_s < 450, f"B recovered {held_s + rec_s}s after the deaths: not within grace_period")
        w = c.workflow(wf)
        cmds = [x for x in c.commands() if x[2] and int(x[2]) == wf]
        check(host_null(w["host"]) and len(cmds) == 1 and int(cmds[0][1]) == 2, f"workflow {w}, commands {cmds}")
        check(not [x for x in b.writes() if x.get("kind") == "task"], f"B wrote a task: {b.writes()}")
        say(f"B led {lead_s}s after the kill and recovered at {rec_s}s ({done[0].get('detail')}); restarting A")
        a.start(agents=(), env={})
        closed = wait_for("A to close its dangling task intent",
                          lambda: [x for x in a.audit() if x.get("task_id") == task["id"] and x.get("event") == "done"],
                          120)
        check("interrupted" in (closed[0].get("detail") or ""), f"A's closing record: {closed[0]}")
        check(not [x for x in a.audit() if x.get("kind") == "workflow" and x.get("event") in ("intent", "done")],
              f"A wrote a workflow step: {a.audit()}")
        c.restart("master-1")
        c.restart(f"worker-{wi}")
        a.start_agent(wi)
        c.wait_registered()
        t1 = time.monotonic()
        wait_for("a master to take B's command", lambda: not c.commands(), 300, 2)
        wait_for(f"workflow {wf} to end", lambda: c.workflow_state(wf) in TERMINAL.values(), 420, 3)
        end_s = round(time.monotonic() - t1)
        rows = [t for t in c.tasks() if t["wf"] == wf]
        check(c.workflow_state(wf) == 7, f"workflow {wf} ended in state {c.workflow_state(wf)}; rows {rows}")
        live = [t for t in rows if t["flag"] == 1]
        check(len(live) == 1 and live[0]["state"] == 7, f"task rows after the recovery: {rows}")
        return (f"A held after its task write {held_s}s after the deaths, killed; B led {lead_s}s and recovered "
                f"{rec_s}s after the kill (resumed_tasks 1, workflow_grace_period 15m); A closed its intent as done; "
                f"SUCCESS {end_s}s after the restart")
    finally:
        a.stop()
        b.stop()
        cancel_running(c)


SCENARIOS = {"fidelity": s_fidelity, "worker-kill": s_worker_kill, "zombie": s_zombie,
             "zombie-fail": s_zombie_fail, "reap": s_reap, "sigstop": s_sigstop, "ghost": s_ghost,
             "zombie-subprocess": s_zombie_subprocess, "leader-handover": s_leader_handover}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="3.1.1")
    ap.add_argument("--db", default="mysql", choices=["mysql", "postgres"])
    ap.add_argument("--bin", default=str(REPO / "target" / "debug" / "ds-reaper"))
    ap.add_argument("--offline", action="store_true")
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("REAL_DS_PORT_BASE", PORT_BASE)),
                    help="DS's ports from here (launch.sh --port-base), ds-reaper's at +300, its agents' at +310; "
                         "another base than 25000 is a run of its own (name, database, ZooKeeper namespace)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--table", help="append the table rows (TSV) to this file")
    ap.add_argument("scenario", nargs="*", default=["fidelity", "zombie"])
    a = ap.parse_args()
    unknown = [s for s in a.scenario if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"[scenario] ERROR: no ds-reaper binary at {a.bin} (cargo build first)")
    for tool in ("java", "mvn", "unzip"):
        if not shutil.which(tool):
            sys.exit(f"[scenario] ERROR: no {tool} on PATH: the real-DS tier needs a JDK 17, Maven and unzip "
                     "(deploy/dev/services.sh installs them)")
    c = Cluster(a.version, a.db, a.offline, a.port_base)
    results = []
    t_all = time.monotonic()
    try:
        c.up()
        for s in a.scenario:
            say(f"== {s} on DS {a.version} / {a.db}")
            t0 = time.monotonic()
            try:
                figures = SCENARIOS[s](c, a.bin)
                results.append((s, "PASS", round(time.monotonic() - t0), figures))
            except Failed as e:
                results.append((s, "FAIL", round(time.monotonic() - t0), str(e)))
                say(f"FAIL {s}: {e}")
            c.heal()
    except Failed as e:
        results.append(("cluster", "FAIL", round(time.monotonic() - t_all), str(e)))
    finally:
        if not a.keep:
            c.down()
    print(f"\n| scenario | DS {a.version} / {a.db} | seconds | figures |")
    print("|---|---|---|---|")
    for s, res, secs, fig in results:
        print(f"| {s} | {res} | {secs} | {fig} |")
    if a.table:
        with open(a.table, "a") as f:
            for s, res, secs, fig in results:
                f.write(f"{s}\t{a.version}\t{a.db}\t{res}\t{secs}\t{fig}\n")
    passed = sum(1 for r in results if r[1] == "PASS")
    print(f"\n{passed} passed, {len(results) - passed} failed")
    sys.exit(0 if passed == len(results) and results else 1)


if __name__ == "__main__":
    main()
