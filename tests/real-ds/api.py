#!/usr/bin/env python3
"""Drive a real DolphinScheduler through its REST API, as a user does (python3 stdlib only).

Never writes DS's rows by hand: tenant, project, workflow definition, release and start all go
through the API server. Verified on 3.1.1 and 3.2.2 (tenantCode at start); the 3.3+
renames (workflow-definition, start-workflow-instance, workflow-instances) are taken from DS's
controllers of the dev branch (2024-10) and are NOT verified against a running 3.3+.

  api.py [--url http://127.0.0.1:25200/dolphinscheduler] [--ds-version 3.1.1] setup
        login, tenant (an existing OS user, default root), project 'reaper'   -> prints project code
  api.py run [--script 'sleep 600' [--script 'cd /tmp && sleep 600' ...]] [--name NAME] [--tasks N]
        one workflow with max(N, #scripts) parallel SHELL tasks NAME-t1.. (scripts in turn),
        release ONLINE, start it                                              -> prints instance id
  api.py run-parent [--script 'sleep 600'] [--name NAME]
        a child workflow NAME-child (one SHELL task) and a parent NAME whose only task NAME-sub is
        a SUB_PROCESS of it; both released ONLINE, the parent started         -> prints its instance id
  api.py tasks INSTANCE_ID        task instances of a workflow instance (id, name, state, host, pid)
  api.py wait INSTANCE_ID [--state RUNNING_EXECUTION] [--timeout 120]
        poll until every task instance of it is in that state
  api.py instances                last workflow instances of the project
"""
import argparse
import http.cookiejar
import json
import sys
import time
import urllib.parse
import urllib.request


class Ds:
    def __init__(self, url, version, user, password):
        self.url = url.rstrip("/")
        self.v = tuple(int(x) for x in version.split(".")[:2])
        self.user, self.password = user, password
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.session = None

    # 3.3+ renamed process -> workflow in paths and parameters
    def wf(self, old, new):
        return new if self.v >= (3, 3) else old

    def call(self, method, path, params=None):
        params = {k: v for k, v in (params or {}).items() if v is not None}
        data = None
        url = self.url + path
        if method == "GET":
            if params:
                url += "?" + urllib.parse.urlencode(params)
        else:
            data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self.session:
            req.add_header("sessionId", self.session)
        try:
            with self.opener.open(req, timeout=60) as r:
                body = json.loads(r.read().decode() or "{}")
        except urllib.error.HTTPError as e:
            raise SystemExit(f"{method} {path}: HTTP {e.code} {e.read().decode()[:500]}")
        if body.get("code") not in (0, None):
            raise ApiError(method, path, body)
        return body.get("data")

    def login(self):
        d = self.call("POST", "/login", {"userName": self.user, "userPassword": self.password})
        self.session = d["sessionId"]

    def ensure_tenant(self, code):
        for t in self.call("GET", "/tenants/list") or []:
            if t["tenantCode"] == code:
                return t["id"]
        queues = self.call("GET", "/queues/list") or []
        qid = queues[0]["id"] if queues else 1
        self.call("POST", "/tenants", {"tenantCode": code, "queueId": qid, "description": "ds-reaper real-ds"})
        return self.ensure_tenant(code)

    def ensure_project(self, name):
        for p in self.call("GET", "/projects/list") or []:
            if p["name"] == name:
                return p["code"]
        return self.call("POST", "/projects", {"projectName": name, "description": "ds-reaper real-ds"})["code"]

    def gen_codes(self, project, n):
        return self.call("GET", f"/projects/{project}/task-definition/gen-task-codes", {"genNum": n})

    def create_workflow(self, project, name, tenant, scripts):
        """A workflow of parallel SHELL tasks, one per (task name, script)."""
        return self.create_tasks(project, name, tenant, [
            (tname, "SHELL", {"localParams": [], "rawScript": script, "resourceList": []})
            for tname, script in scripts])

    def create_tasks(self, project, name, tenant, specs):
        """A workflow of parallel tasks, one per (task name, task type, task params)."""
        codes = self.gen_codes(project, len(specs))
        tasks, rels, locs = [], [], []
        for i, (code, (tname, ttype, tparams)) in enumerate(zip(codes, specs)):
            tasks.append({
                "code": code, "version": 1, "name": tname, "description": "", "taskType": ttype,
                "taskParams": tparams,
                "flag": "YES", "taskPriority": "MEDIUM", "workerGroup": "default",
                "failRetryTimes": 0, "failRetryInterval": 1, "timeoutFlag": "CLOSE",
                "timeoutNotifyStrategy": "", "timeout": 0, "delayTime": 0, "environmentCode": -1,
                "isCache": "NO", "taskExecuteType": "BATCH",
            })
            rels.append({"name": "", "preTaskCode": 0, "preTaskVersion": 0, "postTaskCode": code,
                         "postTaskVersion": 1, "conditionType": "NONE", "conditionParams": {}})
            locs.append({"taskCode": code, "x": 100, "y": 100 + 80 * i})
        params = {"name": name, "description": "ds-reaper real-ds", "globalParams": "[]",
                  "locations": json.dumps(locs), "timeout": 0,
                  "taskRelationJson": json.dumps(rels), "taskDefinitionJson": json.dumps(tasks),
                  "executionType": "PARALLEL"}
        if self.v < (3, 2):
            params["tenantCode"] = tenant  # 3.2 moved the tenant to the start call
        # the API server loads its task plugins only after it serves HTTP (ApplicationReadyEvent):
        # until then every task is "parameter invalid" (50020)
        for attempt in range(30):
            try:
                d = self.call("POST", f"/projects/{project}/" + self.wf("process-definition", "workflow-definition"), params)
                return d["code"]
            except ApiError as e:
                if e.body.get("code") != 50020 or attempt == 29:
                    raise
                time.sleep(2)

    def release(self, project, code):
        self.call("POST", f"/projects/{project}/" + self.wf("process-definition", "workflow-definition")
                  + f"/{code}/release", {"releaseState": "ONLINE", "name": None})

    def start(self, project, code, tenant, worker_group="default"):
        params = {self.wf("processDefinitionCode", "workflowDefinitionCode"): code,
                  "scheduleTime": "", "failureStrategy": "CONTINUE", "warningType": "NONE",
                  "warningGroupId": 0, "taskDependType": "TASK_POST", "runMode": "RUN_MODE_SERIAL",
                  "execType": "START_PROCESS", self.wf("processInstancePriority", "workflowInstancePriority"): "MEDIUM",
                  "workerGroup": worker_group, "environmentCode": -1, "dryRun": 0}
        if self.v >= (3, 2):
            params["tenantCode"] = tenant
            params["testFlag"] = 0
        if self.v >= (3, 3):
            params["execType"] = "START_PROCESS"
        self.call("POST", f"/projects/{project}/executors/" + self.wf("start-process-instance", "start-workflow-instance"), params)
        # the start call answers no instance id (3.1): the newest instance of this definition is ours
        for _ in range(60):
            for inst in self.instances(project):
                if inst.get(self.wf("processDefinitionCode", "workflowDefinitionCode")) == code:
                    return inst["id"]
            time.sleep(1)
        raise SystemExit("workflow instance did not appear within 60 s (is a master registered?)")

    def instances(self, project, n=10):
        d = self.call("GET", f"/projects/{project}/" + self.wf("process-instances", "workflow-instances"),
                      {"pageNo": 1, "pageSize": n})
        return d.get("totalList") or []

    def tasks(self, project, inst):
        d = self.call("GET", f"/projects/{project}/" + self.wf("process-instances", "workflow-instances") + f"/{inst}/tasks")
        return d.get("taskList") or []


class ApiError(SystemExit):
    def __init__(self, method, path, body):
        super().__init__(f"{method} {path}: code {body.get('code')} {body.get('msg')}")
        self.body = body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:25200/dolphinscheduler")
    ap.add_argument("--ds-version", default="3.1.1")
    ap.add_argument("--user", default="admin")
    ap.add_argument("--password", default="dolphinscheduler123")
    ap.add_argument("--tenant", default="root", help="an existing OS user (sudo.enable=false runs tasks as the worker's user anyway)")
    ap.add_argument("--project", default="reaper")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup")
    r = sub.add_parser("run")
    r.add_argument("--script", action="append", help="a task's script; repeat for several tasks (default 'sleep 600')")
    r.add_argument("--name", default=None)
    r.add_argument("--tasks", type=int, default=1)
    r.add_argument("--worker-group", default="default")
    rp = sub.add_parser("run-parent")
    rp.add_argument("--script", default=None, help="the child's SHELL task (default 'sleep 600')")
    rp.add_argument("--name", default=None)
    rp.add_argument("--worker-group", default="default")
    t = sub.add_parser("tasks")
    t.add_argument("instance", type=int)
    w = sub.add_parser("wait")
    w.add_argument("instance", type=int)
    w.add_argument("--state", default="RUNNING_EXECUTION")
    w.add_argument("--timeout", type=int, default=180)
    sub.add_parser("instances")
    a = ap.parse_args()

    ds = Ds(a.url, a.ds_version, a.user, a.password)
    ds.login()
    ds.ensure_tenant(a.tenant)
    project = ds.ensure_project(a.project)
    if a.cmd == "setup":
        print(project)
    elif a.cmd == "run":
        name = a.name or f"reaper-{int(time.time())}"
        src = a.script or ["sleep 600"]
        n = max(a.tasks, len(src))
        scripts = [(f"{name}-t{i}", src[(i - 1) % len(src)]) for i in range(1, n + 1)]
        code = ds.create_workflow(project, name, a.tenant, scripts)
        ds.release(project, code)
        inst = ds.start(project, code, a.tenant, a.worker_group)
        print(inst)
    elif a.cmd == "run-parent":
        name = a.name or f"reaper-{int(time.time())}"
        child = ds.create_workflow(project, f"{name}-child", a.tenant, [(f"{name}-child-t1", a.script or "sleep 600")])
        ds.release(project, child)
        # 3.1 / 3.2 SubProcessParameters: the child's definition code
        parent = ds.create_tasks(project, name, a.tenant, [
            (f"{name}-sub", ds.wf("SUB_PROCESS", "SUB_WORKFLOW"),
             {"localParams": [], "resourceList": [], ds.wf("processDefinitionCode", "workflowDefinitionCode"): child})])
        ds.release(project, parent)
        print(ds.start(project, parent, a.tenant, a.worker_group))
    elif a.cmd == "tasks":
        for x in ds.tasks(project, a.instance):
            print(json.dumps({k: x.get(k) for k in ("id", "name", "taskType", "state", "host", "pid", "flag",
                                                   "submitTime", "startTime", "endTime", "executePath", "logPath")}))
    elif a.cmd == "wait":
        t0 = time.time()
        while True:
            ts = ds.tasks(project, a.instance)
            states = [x.get("state") for x in ts]
            if ts and all(s == a.state for s in states):
                print(f"{len(ts)} task(s) {a.state} after {time.time() - t0:.1f} s: "
                      + ", ".join(f"{x['name']}@{x.get('host')}" for x in ts))
                return
            if time.time() - t0 > a.timeout:
                raise SystemExit(f"timeout: states {states}")
            time.sleep(1)
    elif a.cmd == "instances":
        for x in ds.instances(project):
            print(json.dumps({k: x.get(k) for k in ("id", "name", "state", "host", "commandType", "startTime", "endTime")}))


if __name__ == "__main__":
    main()
