//! A scan that never finishes (SPEC §12): the classic `ps` hang behind a dead
//! NFS mount, here a listing of the process table that blocks. Each process's
//! reads are bounded by `agent.scan_timeout`, the listing itself is not, so
//! `/readyz` is what tells: 503 once the last completed scan is older than
//! 3 × `agent.scan_interval`, ready again once a scan completes. Paused tokio
//! time; the agent's publisher and proc tree are test doubles.

use reaper_agent::testing::FakeProc;
use reaper_agent::{Agent, AgentRegistry, AgentSettings, ProcSource, PublishError, Publisher};
use reaper_core::agent::AgentReport;
use reaper_core::ports::BoxFuture;
use reaper_core::publish::RegisteredWorker;
use reaper_core::DsLine;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WORKER: &str = "10.0.0.5:1234";
const JVM: i32 = 400;
const INTERVAL: Duration = Duration::from_secs(10);
/// The fake tree's boot time (epoch seconds); the JVM starts 1 s after it.
const BTIME: i64 = 1_700_000_000;

/// Lets a number of listings of the process table through, then holds the
/// next one (a hung `/proc` read) until opened.
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// Wakes the test (on the runtime) when a listing is held.
    held: tokio::sync::Notify,
}

struct GateState {
    /// Listings let through before the gate holds one (None: open).
    allowed: Option<usize>,
    passed: usize,
    holding: bool,
}

impl Gate {
    fn new(allowed: usize) -> Gate {
        Gate {
            state: Mutex::new(GateState {
                allowed: Some(allowed),
                passed: 0,
                holding: false,
            }),
            changed: Condvar::new(),
            held: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self) {
        self.lock().allowed = None;
        self.changed.notify_all();
    }

    fn holding(&self) -> bool {
        self.lock().holding
    }

    fn pass(&self) {
        let mut st = self.lock();
        while st.allowed.is_some_and(|n| st.passed >= n) {
            if !st.holding {
                st.holding = true;
                self.held.notify_one();
            }
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.holding = false;
        st.passed += 1;
    }
}

/// Opens the gate when dropped: a failed assertion must not leave the held
/// scan's blocking thread behind, which the runtime's drop would wait for.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A fake proc tree whose listing passes through the gate.
struct Stalling {
    inner: reaper_agent::ProcFs,
    gate: Arc<Gate>,
}

impl ProcSource for Stalling {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        self.gate.pass();
        self.inner.pids()
    }
    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.inner.cwd(pid)
    }
    fn stat(&mut self, pid: i32) -> io::Result<reaper_agent::proc::ProcStat> {
        self.inner.stat(pid)
    }
    fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
        self.inner.cmdline(pid)
    }
    fn exe(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.inner.exe(pid)
    }
    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        self.inner.fork()
    }
    fn self_pid(&mut self) -> Option<i32> {
        self.inner.self_pid()
    }
    fn boot_time(&mut self) -> io::Result<i64> {
        self.inner.boot_time()
    }
    fn clock_ticks(&self) -> u64 {
        self.inner.clock_ticks()
    }
    fn capabilities(&mut self) -> Option<u64> {
        self.inner.capabilities()
    }
    fn blind(&mut self) -> Option<String> {
        self.inner.blind()
    }
}

/// A registry in which the worker is registered with the fake tree's JVM.
struct OneWorker;

impl Publisher for OneWorker {
    fn publish<'a>(
        &'a self,
        _: &'a str,
        _: &'a AgentReport,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async { Ok(()) })
    }
    fn workers(&self) -> BoxFuture<'_, Result<Vec<RegisteredWorker>, PublishError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn worker<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<RegisteredWorker>, PublishError>> {
        Box::pin(async {
            Ok(Some(RegisteredWorker {
                name: WORKER.to_string(),
                heartbeat_host: None,
                process_id: Some(i64::from(JVM)),
                startup_time: chrono::DateTime::from_timestamp(BTIME + 1, 0),
                lines: vec![DsLine::V3_3],
            }))
        })
    }
    fn connected(&self) -> bool {
        true
    }
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

async fn readyz(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("GET /readyz");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn readyz_is_503_once_the_last_completed_scan_is_older_than_three_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    let exec_base = dir.path().join("ds");
    std::fs::create_dir_all(&proc_root).unwrap();
    std::fs::create_dir_all(exec_base.join("exec").join("process")).unwrap();
    let fake = FakeProc::create(&proc_root, BTIME).unwrap();
    fake.add(JVM, Path::new("/"), 'S', 100).unwrap();
    fake.set_comm(JVM, "java").unwrap();
    // two scans complete (at t0 and t0 + INTERVAL); the third's listing hangs
    let gate = Arc::new(Gate::new(2));
    let _open = OpenOnDrop(gate.clone());
    let source = Stalling {
        inner: fake.source(),
        gate: gate.clone(),
    };
    let publisher: Arc<dyn Publisher> = Arc::new(OneWorker);
    let registry = {
        let p = publisher.clone();
        AgentRegistry::new("test double", move |_, _, _| p.clone())
    };
    let settings = AgentSettings {
        worker: Some(WORKER.to_string()),
        exec_base,
        scan_interval: INTERVAL,
        line: Some(DsLine::V3_3),
        proc_root,
        ..AgentSettings::new(registry)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/readyz", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    let agent = Agent::new(settings)
        .with_publisher(publisher)
        .with_source(Box::new(source));
    let served = tokio::spawn(agent.serve(listener, cancel.clone()));

    // The clock moves to each next timer while the runtime is idle, so the
    // scans come on their ticks; while a scan runs on the blocking pool it
    // stands still (tokio stops auto-advancing), so the third scan is held at
    // t0 + 2 × INTERVAL with the last completed scan exactly INTERVAL old.
    for _ in 0..1000 {
        if gate.holding() {
            break;
        }
        tokio::select! {
            _ = gate.held.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    assert!(gate.holding(), "the third scan never started");
    let (code, body) = readyz(&url).await;
    assert_eq!(code, 200, "one interval old: {body}");
    tokio::time::advance(INTERVAL + INTERVAL / 2).await;
    let (code, body) = readyz(&url).await;
    assert_eq!(code, 200, "2.5 intervals old: {body}");
    tokio::time::advance(INTERVAL).await;
    let (code, body) = readyz(&url).await;
    assert_eq!(code, 503, "3.5 intervals old: {body}");
    assert!(
        body.contains("the last completed scan is") && body.contains("3 × agent.scan_interval"),
        "{body}"
    );

    // the listing returns, the scan completes: ready again
    gate.open();
    let mut back = false;
    for _ in 0..1000 {
        if readyz(&url).await.0 == 200 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "not ready again: {:?}", readyz(&url).await);
    cancel.cancel();
    served.await.unwrap().unwrap();
}
