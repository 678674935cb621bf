//! The agent's cost (issue 11: one scan of 2,000 processes ≤ 50 ms, the agent
//! ≤ 15 MB RSS). Prints:
//! - scans of a fake proc tree of 2,000 processes (100 of them task processes);
//! - scans of the real /proc with real processes added until it holds 2,000
//!   (`sleep`s, one in ten in a DS execute path);
//! - the RSS of the whole agent runtime as a process of its own (this
//!   example run with `--run-agent`: HTTP server, registry session — the
//!   shared ZooKeeper when reachable — and a scan of the real /proc every
//!   100 ms) on the ds-reaper binary's runtime shape (2 worker threads).
//!
//! `cargo run --release -p reaper-agent --example scan_bench [-- --scans N --procs N]`;
//! the last lines are `RESULT <key> <value>` for scripts/bench/all.sh.

use ds_sim::procs::{ExecBase, TaskProcess};
use futures::future::BoxFuture;
use futures::FutureExt;
use reaper_agent::host::RegisteredWorker;
use reaper_agent::testing::FakeProc;
use reaper_agent::{
    Agent, AgentRegistry, AgentSettings, ExecPaths, ProcFs, PublishError, Publisher, Scanner,
};
use reaper_core::DsLine;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This process's CPU time (user + system), in ms.
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // fields 14 and 15 (utime, stime) are the 12th and 13th after the state
    let ticks = f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0);
    ticks * 1000.0 / reaper_agent::proc::clock_ticks_per_second() as f64
}

/// Wall times in ms of `n` scans (sorted), their mean CPU time, the last scan.
fn time_scans(scanner: &mut Scanner, n: usize) -> (Vec<f64>, f64, reaper_agent::Scan) {
    let mut ms = Vec::with_capacity(n);
    let mut last = scanner.scan(); // warm-up
    let cpu = cpu_ms();
    for _ in 0..n {
        let t = std::time::Instant::now();
        last = scanner.scan();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let cpu = (cpu_ms() - cpu) / n as f64;
    ms.sort_by(|a, b| a.total_cmp(b));
    (ms, cpu, last)
}

fn stats(ms: &[f64], cpu: f64) -> String {
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms; CPU {cpu:.1} ms/scan",
        at(0.0),
        at(0.5),
        at(0.95),
        at(1.0)
    )
}

/// VmRSS and VmHWM of a process, in MiB.
fn rss_of(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

fn real_process_count() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .ok()
                    .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
                    .is_some()
            })
            .count()
        })
        .unwrap_or(0)
}

/// Discards reports (no ZooKeeper reachable).
struct Discard;

impl Publisher for Discard {
    fn publish<'a>(
        &'a self,
        _: &'a str,
        _: &'a reaper_core::agent::AgentReport,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        async { Ok(()) }.boxed()
    }
    fn workers(&self) -> BoxFuture<'_, Result<Vec<RegisteredWorker>, PublishError>> {
        async { Ok(vec![]) }.boxed()
    }
    fn worker<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<RegisteredWorker>, PublishError>> {
        async { Ok(None) }.boxed()
    }
    fn connected(&self) -> bool {
        true
    }
    fn close(&self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}

/// `--run-agent <exec_base> <seconds>`: the agent runtime alone, on the
/// ds-reaper binary's runtime shape (2 worker threads), publishing to the
/// shared ZooKeeper when reachable.
fn run_agent(exec_base: &str, secs: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let zk = std::env::var("DS_TEST_ZK").unwrap_or_else(|_| "127.0.0.1:2181".into());
        let port = zk
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(2181);
        let root = format!("/bench-agent-{}/dolphinscheduler", std::process::id());
        let cancel = tokio_util::sync::CancellationToken::new();
        let target = reaper_zk::ZkSettings::new(&zk, &root);
        let start = target.clone();
        let mut settings = AgentSettings::new(AgentRegistry::new(
            format!("ZooKeeper {zk}"),
            move |path, _, cancel| -> Arc<dyn Publisher> {
                Arc::new(reaper_zk::ZkAgentPublisher::start(
                    start.clone(),
                    path,
                    cancel,
                ))
            },
        ));
        settings.worker = Some("bench:1234".into());
        settings.exec_base = exec_base.into();
        settings.scan_interval = Duration::from_millis(100);
        let reachable = ds_sim::zkserver::ruok(port).await;
        let publisher: Arc<dyn Publisher> = if reachable {
            Arc::new(reaper_zk::ZkAgentPublisher::start(
                target,
                "ds-reaper/agents",
                cancel.child_token(),
            ))
        } else {
            eprintln!("(no ZooKeeper at {zk}: reports are discarded)");
            Arc::new(Discard)
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = tokio::spawn(
            Agent::new(settings)
                .with_publisher(publisher)
                .serve(listener, cancel.clone()),
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
        cancel.cancel();
        let _ = agent.await;
        if reachable {
            let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--run-agent") {
        run_agent(&args[2], args[3].parse().unwrap_or(5));
        return;
    }
    let scans = arg("--scans", 50);
    let procs = arg("--procs", 2000);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} CPUs, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("| what | processes | task processes | time per scan |");
    println!("|---|---|---|---|");

    // 1. a fake tree
    let dir = tempfile::tempdir().expect("a temporary directory");
    let proc_root = dir.path().join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let fake = FakeProc::create(&proc_root, 1_700_000_000).unwrap();
    let base = dir.path().join("ds");
    let forms = [
        "default/4797859136768/4803964634368_1",
        "4797859136768/4803964634368_1",
        "1/2",
    ];
    for i in 0..procs {
        let pid = 1000 + i as i32;
        let cwd = if i % 20 == 0 {
            let task = 10_000 + (i / 40) as i64; // two processes per task
            base.join(format!(
                "exec/process/{}/{}/{task}",
                forms[i % 3],
                500 + i / 40
            ))
        } else {
            Path::new("/home/app").join((i % 7).to_string())
        };
        fake.add(pid, &cwd, 'S', 100 + i as u64).unwrap();
    }
    let mut scanner = Scanner::new(Box::new(fake.source()), ExecPaths::new(&base, None));
    let (ms, cpu, last) = time_scans(&mut scanner, scans);
    println!(
        "| fake tree, {scans} scans | {} | {} in {} tasks | {} |",
        last.processes,
        last.task_processes,
        last.tasks.len(),
        stats(&ms, cpu)
    );

    // 2. the real /proc, filled up with real processes
    let exec = ExecBase::new().unwrap();
    let mut children: Vec<TaskProcess> = Vec::new();
    let before = real_process_count();
    let add = procs.saturating_sub(before);
    for i in 0..add {
        let p = if i % 10 == 0 {
            exec.start(DsLine::V3_2, 1, 1 + (i / 10) as i64)
        } else {
            TaskProcess::spawn(Path::new("/"), "sleep", &["600"])
        };
        match p {
            Ok(p) => children.push(p),
            Err(e) => {
                eprintln!("could only start {i} processes: {e}");
                break;
            }
        }
    }
    let mut real = Scanner::new(
        Box::new(ProcFs::new("/proc")),
        ExecPaths::new(exec.path(), None),
    );
    // let the new processes settle before timing
    std::thread::sleep(Duration::from_secs(2));
    let (ms, cpu, last) = time_scans(&mut real, scans);
    println!(
        "| real /proc ({} started here), {scans} scans | {} | {} in {} tasks | {} |",
        children.len(),
        last.processes,
        last.task_processes,
        last.tasks.len(),
        stats(&ms, cpu)
    );
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let real_scan = (at(0.5), at(0.95), cpu);
    if last.unreadable > 0 {
        println!("  (unreadable: {} — {:?})", last.unreadable, last.denied);
    }

    // 3. the whole agent, as a process of its own, then its memory
    let exe = std::env::current_exe().unwrap();
    let mut agent = std::process::Command::new(exe)
        .args(["--run-agent", &exec.path().display().to_string(), "6"])
        .spawn()
        .expect("the agent process");
    std::thread::sleep(Duration::from_millis(5500));
    let (now, peak) = rss_of(agent.id());
    let out = agent.wait();
    println!();
    println!(
        "agent process (HTTP server, registry session, a scan of the real /proc every 100 ms for 6 s, \
         {} processes): VmRSS {now:.1} MiB, VmHWM {peak:.1} MiB ({:?})",
        last.processes,
        out.map(|s| s.code())
    );
    // for scripts/bench/all.sh (`RESULT <key> <value>` lines)
    println!("RESULT agent_scan_median_ms {:.1}", real_scan.0);
    println!("RESULT agent_scan_p95_ms {:.1}", real_scan.1);
    println!("RESULT agent_scan_cpu_ms {:.1}", real_scan.2);
    println!("RESULT agent_rss_mib {peak:.1}");
    drop(children);
}
