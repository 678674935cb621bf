//! Simulated DS servers in ZooKeeper: each [`SimServer`] is a real ZooKeeper
//! session that registers a worker or master with the exact paths and
//! heartbeat data of a DS line (reference §3), and refreshes `reportTime`
//! periodically like DS's heartbeat task.

use anyhow::Context;
use chrono::Utc;
use reaper_core::{DsLine, Instant, NodeKind, RegistryLayout, Zone};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

pub use reaper_core::NodeKind as ServerKind;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The simulator's own process id (owner strings of the JDBC registry).
/// Heartbeats carry [`crate::procs::jvm_stand_in_pid`]: an agent checks that
/// the pid is a live `java` process (SPEC §12).
pub fn sim_pid() -> u32 {
    std::process::id()
}

/// How a simulated server behaves.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// How often `reportTime` is refreshed (DS: 10 s).
    pub interval: Duration,
    /// Zone of the 1.x CSV date-times.
    pub zone: Zone,
    pub session_timeout: Duration,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            interval: Duration::from_secs(1),
            zone: Zone::Local,
            session_timeout: Duration::from_secs(10),
        }
    }
}

async fn call<T>(
    fut: impl std::future::Future<Output = Result<T, zk::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("ZooKeeper call timed out after {CALL_TIMEOUT:?}"),
    }
}

fn root_prefix(root: &str) -> String {
    let t = root.trim().trim_end_matches('/');
    if t.is_empty() || t.starts_with('/') {
        t.to_string()
    } else {
        format!("/{t}")
    }
}

/// The registry paths a server of `line` registers, relative to the root.
pub fn node_paths(line: DsLine, kind: NodeKind, host: &str, groups: &[&str]) -> Vec<String> {
    match (line.layout(), kind) {
        (RegistryLayout::Legacy, NodeKind::Worker) => vec![format!("/workers/{host}")],
        (RegistryLayout::Legacy, NodeKind::Master) => vec![format!("/masters/{host}")],
        (_, NodeKind::Master) => vec![format!("/nodes/master/{host}")],
        (RegistryLayout::Flat, NodeKind::Worker) => vec![format!("/nodes/worker/{host}")],
        (RegistryLayout::Grouped, NodeKind::Worker) => {
            let groups: Vec<&str> = if groups.is_empty() {
                vec!["default"]
            } else {
                groups.to_vec()
            };
            groups
                .iter()
                .map(|g| format!("/nodes/worker/{}/{host}", g.to_lowercase()))
                .collect()
        }
    }
}

fn local(t: Instant, zone: Zone) -> String {
    zone.to_naive(t).format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A heartbeat of `line` exactly as DS writes it (reference §3.3), for host
/// `10.0.0.5:1234` where the format carries the host.
pub fn encode_heartbeat(line: DsLine, startup: Instant, report: Instant, zone: Zone) -> String {
    encode_heartbeat_for(line, "10.0.0.5:1234", startup, report, zone)
}

/// As [`encode_heartbeat`] for a given `host` (`ip` or `ip:port`).
pub fn encode_heartbeat_for(
    line: DsLine,
    host: &str,
    startup: Instant,
    report: Instant,
    zone: Zone,
) -> String {
    encode_heartbeat_with_pid(
        line,
        host,
        startup,
        report,
        zone,
        crate::procs::jvm_stand_in_pid(),
    )
}

/// [`encode_heartbeat_for`] with a given `processId`.
pub fn encode_heartbeat_with_pid(
    line: DsLine,
    host: &str,
    startup: Instant,
    report: Instant,
    zone: Zone,
    pid: u32,
) -> String {
    let (ip, port) = match host.rsplit_once(':') {
        Some((ip, p)) => (ip, p.parse::<u16>().unwrap_or(1234)),
        None => (host, 1234),
    };
    let (s, r) = (startup.timestamp_millis(), report.timestamp_millis());
    match line {
        DsLine::V1_2 => format!("{ip},{pid},0.15,0.62,1.2,{},{}", local(startup, zone), local(report, zone)),
        DsLine::V1_3 => format!("0.15,0.62,1.2,12.5,32.0,0.3,{},{},0,{pid}", local(startup, zone), local(report, zone)),
        // 2.0.6–2.0.9: 14 fields with diskAvailable
        DsLine::V2_0 => format!("0.15,0.62,120.0,1.2,12.5,32.0,0.3,{s},{r},0,{pid},100,100,0"),
        // 3.0.x and 3.1.0: 13 fields
        DsLine::V3_0 | DsLine::V3_1_0 => format!("0.15,0.62,1.2,12.5,32.0,0.3,{s},{r},0,{pid},100,100,0"),
        DsLine::V3_1 => format!(
            "{{\"startupTime\":{s},\"reportTime\":{r},\"cpuUsage\":0.15,\"memoryUsage\":0.62,\"loadAverage\":1.2,\
             \"availablePhysicalMemorySize\":12.5,\"maxCpuloadAvg\":32.0,\"reservedMemory\":0.3,\"diskAvailable\":120.0,\
             \"serverStatus\":0,\"processId\":{pid},\"workerHostWeight\":100,\"workerWaitingTaskCount\":0,\
             \"workerExecThreadCount\":100}}"
        ),
        DsLine::V3_2 | DsLine::V3_3 => {
            // threadPoolUsage is an int in 3.2.2 and a double in dev
            let pool = if line == DsLine::V3_2 { "0" } else { "0.0" };
            format!(
                "{{\"processId\":{pid},\"startupTime\":{s},\"reportTime\":{r},\"jvmCpuUsage\":0.02,\"cpuUsage\":0.15,\
                 \"jvmMemoryUsage\":0.31,\"memoryUsage\":0.62,\"diskUsage\":0.4,\"serverStatus\":\"NORMAL\",\
                 \"host\":\"{ip}\",\"port\":{port},\"workerHostWeight\":100,\"threadPoolUsage\":{pool}}}"
            )
        }
    }
}

struct HbState {
    startup: Instant,
    frozen: bool,
}

struct Shared {
    connect: String,
    root: String,
    line: DsLine,
    host: String,
    paths: Vec<String>,
    opts: SimOptions,
    /// The heartbeat's `processId`.
    pid: u32,
    hb: Mutex<HbState>,
    /// When the heartbeat last reached ZooKeeper (every node written).
    written: HeartbeatClock,
}

/// When a simulated server's heartbeat last reached ZooKeeper.
pub type HeartbeatClock = Arc<Mutex<Option<Instant>>>;

impl Shared {
    fn full(&self, rel: &str) -> String {
        format!("{}{rel}", self.root)
    }

    fn data(&self) -> Option<String> {
        let hb = self.hb.lock().unwrap_or_else(|e| e.into_inner());
        if hb.frozen {
            return None;
        }
        Some(encode_heartbeat_with_pid(
            self.line,
            &self.host,
            hb.startup,
            Utc::now(),
            self.opts.zone,
            self.pid,
        ))
    }
}

/// A simulated DS worker or master: one ZooKeeper session with its ephemeral node(s).
pub struct SimServer {
    shared: Arc<Shared>,
    client: Option<zk::Client>,
    task: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Registers a server with the default [`SimOptions`].
    pub async fn register(
        connect: &str,
        root: &str,
        line: DsLine,
        kind: NodeKind,
        host: &str,
        groups: &[&str],
        startup_time: Instant,
    ) -> anyhow::Result<SimServer> {
        Self::register_with(
            connect,
            root,
            (line, kind),
            host,
            groups,
            startup_time,
            SimOptions::default(),
        )
        .await
    }

    /// Creates the persistent parents, the ephemeral node(s) with the line's
    /// heartbeat, and starts refreshing `reportTime` every `opts.interval`.
    pub async fn register_with(
        connect: &str,
        root: &str,
        (line, kind): (DsLine, NodeKind),
        host: &str,
        groups: &[&str],
        startup_time: Instant,
        opts: SimOptions,
    ) -> anyhow::Result<SimServer> {
        let pid = crate::procs::jvm_stand_in_pid();
        Self::register_as(
            connect,
            root,
            (line, kind),
            host,
            groups,
            startup_time,
            opts,
            pid,
        )
        .await
    }

    /// [`SimServer::register_with`] with heartbeats whose `processId` is
    /// `pid` (a worker JVM of its own, e.g. a [`crate::procs::JvmStandIn`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn register_as(
        connect: &str,
        root: &str,
        (line, kind): (DsLine, NodeKind),
        host: &str,
        groups: &[&str],
        startup_time: Instant,
        opts: SimOptions,
        pid: u32,
    ) -> anyhow::Result<SimServer> {
        let shared = Arc::new(Shared {
            pid,
            connect: connect.to_string(),
            root: root_prefix(root),
            line,
            host: host.to_string(),
            paths: node_paths(line, kind, host, groups),
            opts,
            written: Arc::new(Mutex::new(None)),
            hb: Mutex::new(HbState {
                startup: startup_time,
                frozen: false,
            }),
        });
        let mut s = SimServer {
            shared,
            client: None,
            task: None,
        };
        s.go_live().await?;
        Ok(s)
    }

    async fn go_live(&mut self) -> anyhow::Result<()> {
        let sh = self.shared.clone();
        let client = call(
            zk::Client::connector()
                .with_session_timeout(sh.opts.session_timeout)
                .connect(&sh.connect),
        )
        .await
        .with_context(|| format!("connecting to ZooKeeper {}", sh.connect))?;
        let data = sh.data().unwrap_or_else(|| {
            encode_heartbeat_with_pid(
                sh.line,
                &sh.host,
                Utc::now(),
                Utc::now(),
                sh.opts.zone,
                sh.pid,
            )
        });
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        for rel in &sh.paths {
            let path = sh.full(rel);
            if let Some((parent, _)) = path.rsplit_once('/') {
                if !parent.is_empty() {
                    call(client.mkdir(parent, &persistent)).await?;
                }
            }
            // DS's persistEphemeral: replace a leftover node of an older session.
            match call(client.create(&path, data.as_bytes(), &ephemeral)).await {
                Ok(_) => {}
                Err(e) if e.downcast_ref::<zk::Error>() == Some(&zk::Error::NodeExists) => {
                    let _ = call(client.delete(&path, None)).await;
                    call(client.create(&path, data.as_bytes(), &ephemeral)).await?;
                }
                Err(e) => return Err(e.context(format!("creating {path}"))),
            }
        }
        let c = client.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(sh.opts.interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(data) = sh.data() else { continue };
                let mut all = true;
                for rel in &sh.paths {
                    if let Err(e) = call(c.set_data(&sh.full(rel), data.as_bytes(), None)).await {
                        all = false;
                        tracing::debug!(error = %e, path = %rel, "sim heartbeat write failed");
                    }
                }
                if all {
                    *sh.written.lock().unwrap_or_else(|e| e.into_inner()) = Some(Utc::now());
                }
            }
        });
        *self
            .shared
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Utc::now());
        self.client = Some(client);
        self.task = Some(task);
        Ok(())
    }

    /// The node paths (under the root) this server registers.
    pub fn paths(&self) -> Vec<String> {
        self.shared
            .paths
            .iter()
            .map(|p| self.shared.full(p))
            .collect()
    }

    pub fn host(&self) -> &str {
        &self.shared.host
    }

    /// When its heartbeat last reached ZooKeeper (registration included);
    /// the handle stays valid across crashes and restarts.
    pub fn heartbeat_clock(&self) -> HeartbeatClock {
        self.shared.written.clone()
    }

    /// The current session, if live (e.g. to read its id).
    pub fn client(&self) -> Option<&zk::Client> {
        self.client.as_ref()
    }

    /// Closes the session, like a dying server: its node disappears at once.
    pub async fn crash(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
        if let Some(client) = self.client.take() {
            let mut states = client.state_watcher();
            drop(client);
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while !states.peek_state().is_terminated() {
                    states.changed().await;
                }
            })
            .await;
        }
    }

    /// A new session and node with a new startup time (a restarted server).
    pub async fn restart(&mut self, new_startup_time: Instant) -> anyhow::Result<()> {
        self.crash().await;
        {
            let mut hb = self.shared.hb.lock().unwrap_or_else(|e| e.into_inner());
            hb.startup = new_startup_time;
            hb.frozen = false;
        }
        self.go_live().await
    }

    /// Stops refreshing `reportTime` (a hung server whose session stays alive).
    pub fn freeze_heartbeat(&self) {
        self.shared
            .hb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frozen = true;
    }

    pub fn resume_heartbeat(&self) {
        self.shared
            .hb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frozen = false;
    }

    /// Writes `data` into the node(s) now and freezes the heartbeat so it stays.
    pub async fn set_raw_data(&self, data: &[u8]) -> anyhow::Result<()> {
        self.freeze_heartbeat();
        let client = self.client.as_ref().context("server is crashed")?;
        for rel in &self.shared.paths {
            call(client.set_data(&self.shared.full(rel), data, None)).await?;
        }
        Ok(())
    }

    /// Writes a fresh heartbeat now (unless frozen).
    pub async fn heartbeat_now(&self) -> anyhow::Result<()> {
        let client = self.client.as_ref().context("server is crashed")?;
        if let Some(data) = self.shared.data() {
            for rel in &self.shared.paths {
                call(client.set_data(&self.shared.full(rel), data.as_bytes(), None)).await?;
            }
        }
        Ok(())
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// A host and its node paths relative to the root.
type HostPaths = (String, Vec<String>);

/// Many servers of one line on a single session, for load tests and benchmarks
/// (thousands of [`SimServer`]s would need thousands of sessions). Every
/// host's heartbeat is rewritten each `opts.interval`, spread over the interval
/// like independent servers.
pub struct SimFleet {
    client: zk::Client,
    root: String,
    line: DsLine,
    zone: Zone,
    startup: Instant,
    /// host -> node paths (relative to the root)
    hosts: Arc<Mutex<Vec<HostPaths>>>,
    task: Option<JoinHandle<()>>,
}

impl SimFleet {
    pub async fn register(
        connect: &str,
        root: &str,
        (line, kind): (DsLine, NodeKind),
        hosts: &[String],
        groups: &[&str],
        startup_time: Instant,
        opts: SimOptions,
    ) -> anyhow::Result<SimFleet> {
        let client = call(
            zk::Client::connector()
                .with_session_timeout(opts.session_timeout)
                .connect(connect),
        )
        .await?;
        let root = root_prefix(root);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        let mut all = Vec::new();
        let mut parents = std::collections::BTreeSet::new();
        for h in hosts {
            let paths = node_paths(line, kind, h, groups);
            for p in &paths {
                if let Some((parent, _)) = p.rsplit_once('/') {
                    parents.insert(format!("{root}{parent}"));
                }
            }
            all.push((h.clone(), paths));
        }
        for p in &parents {
            call(client.mkdir(p, &persistent)).await?;
        }
        let now = Utc::now();
        let mut jobs = Vec::new();
        for (h, paths) in &all {
            let data = encode_heartbeat_for(line, h, startup_time, now, opts.zone);
            jobs.extend(paths.iter().map(|p| (format!("{root}{p}"), data.clone())));
        }
        // The client sends each request when the call is made, so a chunk of
        // calls is pipelined on the connection before any reply is awaited.
        for chunk in jobs.chunks(256) {
            let futs: Vec<_> = chunk
                .iter()
                .map(|(p, d)| client.create(p, d.as_bytes(), &ephemeral))
                .collect();
            for f in futs {
                call(f).await?;
            }
        }
        let hosts = Arc::new(Mutex::new(all));
        let task = {
            let (client, root, hosts, zone) =
                (client.clone(), root.clone(), hosts.clone(), opts.zone);
            let interval = opts.interval;
            tokio::spawn(async move {
                loop {
                    let snapshot: Vec<HostPaths> =
                        hosts.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let n = snapshot.len().max(1) as u32;
                    let gap = interval / n;
                    for (h, paths) in snapshot {
                        let data = encode_heartbeat_for(line, &h, startup_time, Utc::now(), zone);
                        for p in paths {
                            // not awaited one by one: the client pipelines them
                            let fut = client.set_data(&format!("{root}{p}"), data.as_bytes(), None);
                            tokio::spawn(async move {
                                let _ = tokio::time::timeout(CALL_TIMEOUT, fut).await;
                            });
                        }
                        tokio::time::sleep(gap).await;
                    }
                }
            })
        };
        Ok(SimFleet {
            client,
            root,
            line,
            zone: opts.zone,
            startup: startup_time,
            hosts,
            task: Some(task),
        })
    }

    pub fn len(&self) -> usize {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes one host's node(s), as if that server died. Returns false for an unknown host.
    pub async fn remove_host(&self, host: &str) -> anyhow::Result<bool> {
        let paths = {
            let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
            match hosts.iter().position(|(h, _)| h == host) {
                Some(i) => hosts.swap_remove(i).1,
                None => return Ok(false),
            }
        };
        for p in paths {
            match call(self.client.delete(&format!("{}{p}", self.root), None)).await {
                Ok(()) => {}
                Err(e) if e.downcast_ref::<zk::Error>() == Some(&zk::Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Registers one more host on the fleet's session.
    pub async fn add_host(
        &self,
        host: &str,
        kind: NodeKind,
        groups: &[&str],
    ) -> anyhow::Result<()> {
        let paths = node_paths(self.line, kind, host, groups);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        let data = encode_heartbeat_for(self.line, host, self.startup, Utc::now(), self.zone);
        for p in &paths {
            let full = format!("{}{p}", self.root);
            if let Some((parent, _)) = full.rsplit_once('/') {
                call(self.client.mkdir(parent, &persistent)).await?;
            }
            call(self.client.create(&full, data.as_bytes(), &ephemeral)).await?;
        }
        self.hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((host.to_string(), paths));
        Ok(())
    }

    /// Closes the session: every node of the fleet disappears at once.
    pub async fn close(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
        let mut states = self.client.state_watcher();
        let client = self.client.clone();
        drop(self);
        drop(client);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while !states.peek_state().is_terminated() {
                states.changed().await;
            }
        })
        .await;
    }
}

impl Drop for SimFleet {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// 1.2.x: adds `<root>/tasks_queue/<procPrio>_<procInstId>_<taskPrio>_<taskInstId>_<ips>`
/// (persistent, as 1.2.1 `TaskQueueZkImpl.add`); `ips` is `-1` or the workers' IPs as longs.
/// Returns the full path.
pub async fn add_task_queue_entry(
    connect: &str,
    root: &str,
    proc_priority: i32,
    proc_instance_id: i64,
    task_priority: i32,
    task_instance_id: i64,
    ips: &str,
) -> anyhow::Result<String> {
    let client = call(zk::Client::connect(connect)).await?;
    let dir = format!("{}/tasks_queue", root_prefix(root));
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    call(client.mkdir(&dir, &persistent)).await?;
    let path = format!(
        "{dir}/{proc_priority}_{proc_instance_id}_{task_priority}_{task_instance_id}_{ips}"
    );
    match call(client.create(&path, b"", &persistent)).await {
        Ok(_) => {}
        Err(e) if e.downcast_ref::<zk::Error>() == Some(&zk::Error::NodeExists) => {}
        Err(e) => return Err(e),
    }
    Ok(path)
}

/// The names under `<root>/tasks_queue` (empty when there is no queue).
pub async fn task_queue_entries(connect: &str, root: &str) -> anyhow::Result<Vec<String>> {
    let client = call(zk::Client::connect(connect)).await?;
    let dir = format!("{}/tasks_queue", root_prefix(root));
    match tokio::time::timeout(CALL_TIMEOUT, client.list_children(&dir)).await {
        Ok(Ok(mut v)) => {
            v.sort();
            Ok(v)
        }
        Ok(Err(zk::Error::NoNode)) => Ok(Vec::new()),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => anyhow::bail!("listing {dir} timed out"),
    }
}

/// The master-failover lock DS takes before failing over `master`, relative
/// to the root; None where DS's failover needs no guard (3.3+). From DS's
/// source: 1.2.1/1.3.9 `ZKMasterClient` lock `/lock/failover/masters` for every
/// master; 2.0.2–2.0.9 `MasterRegistryClient.getFailoverLockPath` and
/// 3.0–3.1 `MasterFailoverService.failoverMaster` lock
/// `/lock/failover/masters/<host>` (2.0.0–2.0.1 still the single lock: see
/// [`FAILOVER_MASTERS_LOCK`]); 3.2 `/lock/master-failover/<host>`.
pub fn failover_lock_path(line: DsLine, master: &str) -> Option<String> {
    match line {
        DsLine::V1_2 | DsLine::V1_3 => Some(FAILOVER_MASTERS_LOCK.to_string()),
        DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 => {
            Some(format!("{FAILOVER_MASTERS_LOCK}/{master}"))
        }
        DsLine::V3_2 => Some(format!("/lock/master-failover/{master}")),
        DsLine::V3_3 => None,
    }
}

/// 1.2, 1.3 and 2.0.0–2.0.1's one master-failover lock.
pub const FAILOVER_MASTERS_LOCK: &str = "/lock/failover/masters";

/// A Curator-style protection id (`_c_<uuid>-`): random enough for tests.
pub(crate) fn lock_uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Utc::now().timestamp_nanos_opt().unwrap_or(0) as u128);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    format!(
        "{}-{}-{}-{}-{}",
        &out[0..8],
        &out[8..12],
        &out[12..16],
        &out[16..20],
        &out[20..32]
    )
}

/// A lock held the way DS's ZooKeeper registry holds one: Curator's
/// `InterProcessMutex` creates the lock path (container parents) and an
/// ephemeral sequential `_c_<uuid>-lock-<seq>` child on its own session;
/// release deletes the child, the session's end removes it too.
pub struct SimZkLock {
    client: Option<zk::Client>,
    node: String,
}

impl SimZkLock {
    /// Holds (or waits in line for) the lock at `lock` (relative to `root`).
    pub async fn hold(connect: &str, root: &str, lock: &str) -> anyhow::Result<SimZkLock> {
        let client = call(zk::Client::connect(connect)).await?;
        let path = format!("{}{}", root_prefix(root), lock.trim_end_matches('/'));
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        call(client.mkdir(&path, &persistent)).await?;
        let prefix = format!("{path}/_c_{}-lock-", lock_uuid());
        let seq_mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (_, seq) = call(client.create(&prefix, b"10.0.0.99", &seq_mode))
            .await
            .with_context(|| format!("creating a lock node under {path}"))?;
        Ok(SimZkLock {
            client: Some(client),
            node: format!("{prefix}{seq}"),
        })
    }

    /// The full path of the lock node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Releases the lock as Curator does: deletes the lock node.
    pub async fn release(mut self) -> anyhow::Result<()> {
        if let Some(c) = self.client.take() {
            call(c.delete(&self.node, None)).await?;
        }
        Ok(())
    }
}

/// Deletes a whole test root recursively (best effort), so tests leave the
/// shared server clean.
pub async fn delete_tree(connect: &str, root: &str) -> anyhow::Result<()> {
    let client = call(zk::Client::connect(connect)).await?;
    let root = root_prefix(root);
    if root.is_empty() {
        anyhow::bail!("refusing to delete the whole ZooKeeper tree");
    }
    let mut stack = vec![root.clone()];
    let mut order = Vec::new();
    while let Some(p) = stack.pop() {
        match call(client.list_children(&p)).await {
            Ok(kids) => stack.extend(kids.into_iter().map(|k| format!("{p}/{k}"))),
            Err(_) => continue,
        }
        order.push(p);
    }
    for p in order.into_iter().rev() {
        let _ = call(client.delete(&p, None)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn encodes_the_reference_examples() {
        let utc: Zone = "UTC".parse().unwrap();
        let t = |ms| Utc.timestamp_millis_opt(ms).unwrap();
        assert_eq!(
            encode_heartbeat_with_pid(
                DsLine::V1_3,
                "10.0.0.5:1234",
                t(1_634_586_908_000),
                t(1_634_587_208_000),
                utc,
                12345
            ),
            "0.15,0.62,1.2,12.5,32.0,0.3,2021-10-18 19:55:08,2021-10-18 20:00:08,0,12345"
        );
        assert_eq!(
            encode_heartbeat_with_pid(
                DsLine::V1_2,
                "10.0.0.5",
                t(1_585_735_200_000),
                t(1_585_735_500_000),
                utc,
                12345
            ),
            "10.0.0.5,12345,0.15,0.62,1.2,2020-04-01 10:00:00,2020-04-01 10:05:00"
        );
        assert_eq!(
            encode_heartbeat_with_pid(
                DsLine::V2_0,
                "10.0.0.5:1234",
                t(1_685_440_000_000),
                t(1_685_440_010_000),
                utc,
                12345
            ),
            "0.15,0.62,120.0,1.2,12.5,32.0,0.3,1685440000000,1685440010000,0,12345,100,100,0"
        );
        assert_eq!(
            encode_heartbeat_with_pid(
                DsLine::V3_1,
                "10.0.0.5:1234",
                t(1_703_125_000_000),
                t(1_703_125_010_000),
                utc,
                12345
            ),
            r#"{"startupTime":1703125000000,"reportTime":1703125010000,"cpuUsage":0.15,"memoryUsage":0.62,"loadAverage":1.2,"availablePhysicalMemorySize":12.5,"maxCpuloadAvg":32.0,"reservedMemory":0.3,"diskAvailable":120.0,"serverStatus":0,"processId":12345,"workerHostWeight":100,"workerWaitingTaskCount":0,"workerExecThreadCount":100}"#
        );
        assert_eq!(
            encode_heartbeat_with_pid(
                DsLine::V3_3,
                "10.0.0.5:1234",
                t(1_729_245_600_000),
                t(1_729_249_200_000),
                utc,
                12345
            ),
            r#"{"processId":12345,"startupTime":1729245600000,"reportTime":1729249200000,"jvmCpuUsage":0.02,"cpuUsage":0.15,"jvmMemoryUsage":0.31,"memoryUsage":0.62,"diskUsage":0.4,"serverStatus":"NORMAL","host":"10.0.0.5","port":1234,"workerHostWeight":100,"threadPoolUsage":0.0}"#
        );
        assert!(
            encode_heartbeat_with_pid(DsLine::V3_2, "10.0.0.5:1234", t(0), t(0), utc, 12345)
                .ends_with("\"threadPoolUsage\":0}")
        );
        assert_eq!(
            encode_heartbeat_with_pid(DsLine::V3_0, "10.0.0.5:1234", t(0), t(0), utc, 12345)
                .split(',')
                .count(),
            13
        );
    }

    #[test]
    fn paths_per_line() {
        assert_eq!(
            node_paths(DsLine::V1_2, NodeKind::Worker, "10.0.0.5", &[]),
            vec!["/workers/10.0.0.5"]
        );
        assert_eq!(
            node_paths(DsLine::V1_3, NodeKind::Worker, "h:1", &["Default", "gpu"]),
            vec!["/nodes/worker/default/h:1", "/nodes/worker/gpu/h:1"]
        );
        assert_eq!(
            node_paths(DsLine::V3_2, NodeKind::Worker, "h:1", &["x"]),
            vec!["/nodes/worker/h:1"]
        );
        assert_eq!(
            node_paths(DsLine::V3_0, NodeKind::Master, "h:5678", &[]),
            vec!["/nodes/master/h:5678"]
        );
        assert_eq!(
            node_paths(DsLine::V1_2, NodeKind::Master, "h", &[]),
            vec!["/masters/h"]
        );
    }
}
