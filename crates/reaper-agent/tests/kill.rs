//! Carrying out kill orders against real processes started as DS's worker
//! starts a task (SPEC §15): the re-check at the moment of the order (start
//! time, membership, terminal, the worker's JVM), SIGTERM to the tree,
//! SIGKILL after the grace, and what `/proc` says afterwards. No registry:
//! the orders are built here from a scan, as the daemon builds them from a
//! report.

use ds_sim::procs::{ExecBase, TaskProcess};
use reaper_agent::kill::{carry_out, KillRules};
use reaper_agent::{ExecPaths, ProcFs, Scan, Scanner};
use reaper_core::order::{KillOrder, OrderPid, OrderResult};
use reaper_core::DsLine;
use std::collections::BTreeSet;
use std::time::Duration;

use reaper_test_support::WAIT;

const ALLOW: KillRules = KillRules {
    allow: true,
    grace: Duration::from_millis(500),
};

/// A scanner of `base` for 3.2 paths; the worker's JVM is this test process
/// (as in the registry tests, whose simulated heartbeat carries its pid).
fn scanner(base: &ExecBase) -> Scanner {
    let mut s = Scanner::new(
        Box::new(ProcFs::new("/proc")),
        ExecPaths::new(base.path(), Some(DsLine::V3_2)),
    );
    s.set_worker_pid(Some(me()));
    s
}

fn me() -> i64 {
    i64::from(std::process::id())
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Scans until task `task` has `n` processes of which `sleeps` run `sleep`
/// (the script's own short-lived subshells — `$(cd ...; pwd)` — have come
/// and gone by then); returns that scan.
fn scan_until(s: &mut Scanner, task: i64, n: usize, sleeps: usize) -> Scan {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let scan = s.scan();
        let procs = scan
            .tasks
            .iter()
            .find(|t| t.task_id == task)
            .map(|t| t.processes.clone())
            .unwrap_or_default();
        let sleeping = procs.iter().filter(|p| comm(p.pid) == "sleep").count();
        if procs.len() == n && sleeping == sleeps {
            return scan;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {task} never had {n} processes: {scan:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The order the daemon would write for every process of `task` in `scan`.
fn order_for(scan: &Scan, task: i64, id: &str) -> KillOrder {
    let t = scan.tasks.iter().find(|t| t.task_id == task).unwrap();
    KillOrder {
        task_id: task,
        pids: t
            .processes
            .iter()
            .map(|p| OrderPid {
                pid: p.pid,
                start_time: p.started_at,
            })
            .collect(),
        reason: "ghost_process".into(),
        issued_at: chrono::Utc::now().timestamp_millis(),
        order_id: id.into(),
    }
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|st| st != "Z")
        })
        .unwrap_or(false)
}

fn pids(order: &KillOrder) -> BTreeSet<i32> {
    order.pids.iter().map(|p| p.pid).collect()
}

/// The pids of `SIGTERM to pid(s) [..]` in an outcome's detail, in order.
fn sigtermed(detail: &str) -> Vec<i32> {
    let Some(rest) = detail.split("SIGTERM to pid(s) [").nth(1) else {
        return Vec::new();
    };
    rest.split(']')
        .next()
        .unwrap_or("")
        .split(", ")
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// Each ordered process's parent, read now.
fn parents(order: &KillOrder) -> std::collections::HashMap<i32, i32> {
    order
        .pids
        .iter()
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).ok()?;
            let i = stat.rfind(')')?;
            let pp = stat[i + 1..].split_whitespace().nth(1)?.parse().ok()?;
            Some((p.pid, pp))
        })
        .collect()
}

/// A fixed hold in which nothing must happen: a signal sent would have
/// ended these sleeping processes well within it.
fn hold() {
    std::thread::sleep(Duration::from_millis(300));
}

/// bash runs the command file; one child traps and ignores SIGTERM (its
/// sleep inherits the ignored signal), another sleeps: SIGTERM ends the
/// script and the plain sleep, SIGKILL after the grace the two that ignore
/// it — every process of the tree is gone, the result `killed`.
#[test]
fn a_tree_whose_child_ignores_sigterm_ends_by_sigkill() {
    let base = ExecBase::new().unwrap();
    let script = "bash -c 'trap \"\" TERM; sleep 86400; true' &\nsleep 86400 &\nwait";
    let mut p = base.start_ds_command(DsLine::V3_2, 11, 12, script).unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 12, 4, 2);
    let order = order_for(&scan, 12, "o-1");
    assert!(pids(&order).contains(&p.pid()));
    let parent = parents(&order);
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Killed, "{out:?}");
    assert_eq!(out.order_id, "o-1");
    assert!(out.detail.contains("SIGKILL"), "{out:?}");
    // children before parents: every process before its parent
    let termed = sigtermed(&out.detail);
    assert_eq!(termed.len(), 4, "{out:?}");
    assert_eq!(termed.last(), Some(&p.pid()), "the root goes last: {out:?}");
    for (i, pid) in termed.iter().enumerate() {
        if let Some(at) = termed.iter().position(|x| Some(x) == parent.get(pid)) {
            assert!(at > i, "{pid} signalled after its parent: {out:?}");
        }
    }
    for pid in pids(&order) {
        assert!(!alive(pid), "pid {pid} survived: {out:?}");
    }
    assert!(!p.is_running());
    // this test process, the parent of the root (the "worker"), lives on
    assert!(alive(std::process::id() as i32));
}

/// A pid whose start time is not the order's — another process has it now —
/// refuses the whole order: nothing is signalled.
#[test]
fn a_reused_pid_is_refused_and_nothing_is_signalled() {
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 21, 22, "sleep 86400 &\nwait")
        .unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 22, 2, 1);
    let mut order = order_for(&scan, 22, "o-2");
    // the order was written for an earlier process of the same pid
    order.pids[0].start_time -= 600_000;
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Refused, "{out:?}");
    assert!(out.detail.contains("another process"), "{out:?}");
    hold();
    for pid in pids(&order) {
        assert!(alive(pid), "pid {pid} was signalled: {out:?}");
    }
    assert!(p.is_running());
}

/// With `agent.allow_kill = false` every order is refused, nothing checked
/// or signalled.
#[test]
fn without_allow_kill_every_order_is_refused_and_every_process_lives() {
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 31, 32, "sleep 86400 &\nwait")
        .unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 32, 2, 1);
    let order = order_for(&scan, 32, "o-3");
    let rules = KillRules {
        allow: false,
        ..ALLOW
    };
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), rules, &mut proc);
    assert_eq!(out.result, OrderResult::Refused, "{out:?}");
    assert!(out.detail.contains("allow_kill"), "{out:?}");
    hold();
    for pid in pids(&order) {
        assert!(alive(pid), "pid {pid} was signalled");
    }
    assert!(p.is_running());
}

/// An operator's shell in the execute path has a controlling terminal (here
/// a `sleep` under `script`, on a pty, working in the task's folder): an
/// order naming it is refused, and neither it nor the task is signalled.
#[test]
fn a_process_with_a_controlling_terminal_is_never_signalled() {
    let base = ExecBase::new().unwrap();
    let dir = base.execute_path(DsLine::V3_2, 41, 42).unwrap();
    let mut shell =
        match TaskProcess::spawn(&dir, "script", &["-qc", "exec sleep 86400", "/dev/null"]) {
            Ok(p) => p,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "script(1) is needed: {e}"
                );
                eprintln!("SKIPPED: script(1) not runnable: {e}");
                return;
            }
        };
    // script, and its sleep on the pty: `exec` so that no shell stays
    // between them, whichever shell `script` starts ($SHELL differs by host)
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 42, 2, 1);
    // the sleep has its terminal once script has made it its session's
    let mut scan = scan;
    let deadline = std::time::Instant::now() + WAIT;
    while !scan
        .tasks
        .iter()
        .any(|t| t.task_id == 42 && t.processes.iter().any(|p| p.tty))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no terminal: {scan:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
        scan = scan_until(&mut s, 42, 2, 1);
    }
    let t = scan.tasks.iter().find(|t| t.task_id == 42).unwrap();
    let on_tty: Vec<i32> = t
        .processes
        .iter()
        .filter(|p| p.tty)
        .map(|p| p.pid)
        .collect();
    assert_eq!(on_tty.len(), 1, "{t:?}");
    let order = order_for(&scan, 42, "o-4");
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Refused, "{out:?}");
    assert!(out.detail.contains("controlling terminal"), "{out:?}");
    hold();
    for pid in pids(&order) {
        assert!(alive(pid), "pid {pid} was signalled");
    }
    assert!(shell.is_running());
}

/// The worker's JVM (its heartbeat's processId) is never signalled: an order
/// naming it is refused.
#[test]
fn an_order_naming_the_worker_jvm_is_refused() {
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 51, 52, "sleep 86400 &\nwait")
        .unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 52, 2, 1);
    let order = order_for(&scan, 52, "o-5");
    let mut proc = ProcFs::new("/proc");
    // say the task's script were the worker's JVM
    let out = carry_out(&order, &scan, Some(i64::from(p.pid())), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Refused, "{out:?}");
    assert!(out.detail.contains("worker's JVM"), "{out:?}");
    hold();
    assert!(p.is_running());
}

/// A process of the order that is not (any more) the task's — here a sleep
/// outside every execute path — refuses the order.
#[test]
fn a_process_outside_the_task_is_refused() {
    let base = ExecBase::new().unwrap();
    let mut task = base
        .start_ds_command(DsLine::V3_2, 61, 62, "sleep 86400 &\nwait")
        .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut stranger = TaskProcess::spawn(elsewhere.path(), "sleep", &["86400"]).unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 62, 2, 1);
    let mut order = order_for(&scan, 62, "o-6");
    // the stranger's own start time, so only membership can refuse it
    let st = {
        use reaper_agent::ProcSource;
        let mut fs = ProcFs::new("/proc");
        let stat = fs.stat(stranger.pid()).unwrap();
        fs.boot_time().unwrap() * 1000 + (stat.start_ticks * 1000 / fs.clock_ticks().max(1)) as i64
    };
    order.pids.push(OrderPid {
        pid: stranger.pid(),
        start_time: st,
    });
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Refused, "{out:?}");
    assert!(out.detail.contains("does not belong"), "{out:?}");
    hold();
    assert!(task.is_running() && stranger.is_running());
}

/// A task whose processes have all exited (and one no longer listed at all)
/// is `gone`: nothing was left to signal.
#[test]
fn an_exited_task_is_gone() {
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 71, 72, "sleep 86400 &\nwait")
        .unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 72, 2, 1);
    let order = order_for(&scan, 72, "o-7");
    p.kill().unwrap();
    let mut proc = ProcFs::new("/proc");
    let deadline = std::time::Instant::now() + WAIT;
    while pids(&order).iter().any(|p| alive(*p)) {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    // against the scan the daemon's order came from
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Gone, "{out:?}");
    // and against a fresh one that no longer lists the task
    let fresh = s.scan();
    assert!(fresh.tasks.iter().all(|t| t.task_id != 72));
    let out = carry_out(&order, &fresh, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Gone, "{out:?}");
}

/// An order naming only the task's root process still ends its children: the
/// tree is the ordered processes and every descendant of theirs in the task.
#[test]
fn the_descendants_of_an_ordered_process_are_signalled_too() {
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(
            DsLine::V3_2,
            81,
            82,
            "sleep 86400 &\nsh -c 'sleep 86400; true' &\nwait",
        )
        .unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 82, 4, 2);
    let all = pids(&order_for(&scan, 82, "x"));
    let mut order = order_for(&scan, 82, "o-8");
    order.pids.retain(|o| o.pid == p.pid());
    assert_eq!(order.pids.len(), 1);
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Killed, "{out:?}");
    for pid in all {
        assert!(!alive(pid), "pid {pid} survived: {out:?}");
    }
    assert!(!p.is_running());
}

/// DS 3.2+ with `sudo.enable` runs `sudo -u <tenant> -i <command file>`; that
/// root-owned `sudo` is never signalled: it ends with its children. Here a
/// stand-in named `sudo` (a copy of bash, run as root) runs the command file
/// and would leave a marker if it ever got SIGTERM; the order is carried out
/// through its child alone, and the stand-in ends by itself. Needs root (a
/// process of the test's own user is no root-owned sudo).
#[test]
fn a_root_owned_sudo_is_signalled_only_through_its_children() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|u| u.split_whitespace().nth(1) == Some("0"));
    if !root {
        eprintln!("SKIPPED: a root-owned sudo needs the test to run as root");
        return;
    }
    let base = ExecBase::new().unwrap();
    let dir = base.execute_path(DsLine::V3_2, 91, 92).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let sudo = bin.path().join("sudo");
    std::fs::copy("/bin/bash", &sudo).unwrap();
    let marker = bin.path().join("sudo-got-sigterm");
    let file = dir.join("91_92.sh");
    std::fs::write(
        &file,
        format!(
            "trap 'touch {}' TERM\nsleep 86400 &\nwait\n",
            marker.display()
        ),
    )
    .unwrap();
    let mut p =
        TaskProcess::spawn(&dir, sudo.to_str().unwrap(), &[file.to_str().unwrap()]).unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 92, 2, 1);
    assert_eq!(comm(p.pid()), "sudo");
    let order = order_for(&scan, 92, "o-9");
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Killed, "{out:?}");
    assert!(
        out.detail.contains(&format!(
            "not signalled (root-owned sudo, or no handle): pid(s) [{}]",
            p.pid()
        )),
        "{out:?}"
    );
    for pid in pids(&order) {
        assert!(!alive(pid), "pid {pid} survived: {out:?}");
    }
    assert!(!p.is_running());
    assert!(!marker.exists(), "the sudo stand-in got SIGTERM");
}

/// Something of the tree that outlives the grace and SIGKILL makes the result
/// `partial`, naming it: here the root-owned `sudo` stand-in, which is never
/// signalled and, its child killed, goes on to run another command.
#[test]
fn a_survivor_makes_the_result_partial() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|u| u.split_whitespace().nth(1) == Some("0"));
    if !root {
        eprintln!("SKIPPED: a root-owned sudo needs the test to run as root");
        return;
    }
    let base = ExecBase::new().unwrap();
    let dir = base.execute_path(DsLine::V3_2, 93, 94).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let sudo = bin.path().join("sudo");
    std::fs::copy("/bin/bash", &sudo).unwrap();
    let file = dir.join("93_94.sh");
    std::fs::write(&file, "sleep 86400 &\nwait\nsleep 86400\n").unwrap();
    let mut p =
        TaskProcess::spawn(&dir, sudo.to_str().unwrap(), &[file.to_str().unwrap()]).unwrap();
    let mut s = scanner(&base);
    let scan = scan_until(&mut s, 94, 2, 1);
    let order = order_for(&scan, 94, "o-10");
    let mut proc = ProcFs::new("/proc");
    let out = carry_out(&order, &scan, Some(me()), ALLOW, &mut proc);
    assert_eq!(out.result, OrderResult::Partial, "{out:?}");
    assert!(
        out.detail
            .contains(&format!("still alive: pid(s) [{}]", p.pid())),
        "{out:?}"
    );
    assert!(p.is_running());
}
