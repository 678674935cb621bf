//! The audit trail (SPEC §10): one JSON line per event, appended and fsynced
//! before the call returns, so an `intent` is on disk before its write starts.
//! A crash mid-append leaves at worst one torn last line, which readers skip.

use reaper_core::Instant;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{BufRead, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What an audit record says happened (SPEC §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditEvent {
    /// A zombie first seen (once, whatever the action).
    Detected,
    /// A write about to be made: on disk before the write starts.
    Intent,
    Done,
    LostRace,
    Error,
    /// The brake engaged or released.
    Brake,
}

impl AuditEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditEvent::Detected => "detected",
            AuditEvent::Intent => "intent",
            AuditEvent::Done => "done",
            AuditEvent::LostRace => "lost_race",
            AuditEvent::Error => "error",
            AuditEvent::Brake => "brake",
        }
    }

    /// An outcome closes an intent.
    pub fn is_outcome(self) -> bool {
        matches!(
            self,
            AuditEvent::Done | AuditEvent::LostRace | AuditEvent::Error
        )
    }
}

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Task,
    Workflow,
    /// A ghost process and its kill order (SPEC §15).
    Process,
    /// SPEC §16: stuck under a live owner (report only).
    Anomaly,
    /// A kill of a task's YARN application (SPEC §17); `app_id` names it.
    RemoteApp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub ts: Instant,
    pub event: AuditEvent,
    /// task | workflow | process; None for records about the daemon (brake).
    #[serde(default)]
    pub kind: Option<RecordKind>,
    pub task_id: Option<i64>,
    pub workflow_instance_id: Option<i64>,
    pub task_name: Option<String>,
    pub host: Option<String>,
    pub worker_group: Option<String>,
    pub reason: Option<String>,
    /// The finding's evidence (a task's or a workflow's shape).
    pub evidence: Option<serde_json::Value>,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub action: Option<String>,
    pub workflow: Option<String>,
    /// daemon | cli:<user> | api
    pub actor: String,
    pub ds_line: Option<String>,
    /// Free text: the error, the follow-up's outcome, why the brake engaged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The YARN application of a `remote_app` record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
}

impl Record {
    pub fn event(event: AuditEvent, actor: &str, ts: Instant) -> Record {
        Record {
            ts,
            event,
            kind: None,
            task_id: None,
            workflow_instance_id: None,
            task_name: None,
            host: None,
            worker_group: None,
            reason: None,
            evidence: None,
            from_state: None,
            to_state: None,
            action: None,
            workflow: None,
            actor: actor.to_string(),
            ds_line: None,
            detail: None,
            app_id: None,
        }
    }
}

/// Records kept in memory for `/api/v1/audit` and the dangling-intent check,
/// so that neither re-reads a file that only grows.
pub const TAIL: usize = 10_000;

#[derive(Debug, thiserror::Error)]
#[error("audit file {path}: {source}")]
pub struct AuditError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

pub struct Audit {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
    /// The latest [`TAIL`] records; None until read from the file once.
    tail: Mutex<Option<VecDeque<Record>>>,
}

impl Audit {
    pub fn new(path: impl Into<PathBuf>) -> Audit {
        Audit {
            path: path.into(),
            file: Mutex::new(None),
            tail: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: std::io::Error) -> AuditError {
        AuditError {
            path: self.path.clone(),
            source,
        }
    }

    fn open(&self) -> Result<std::fs::File, AuditError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(|e| self.err(e))?;
        // A previous crash may have left a torn line: start ours on a fresh one.
        let len = f.metadata().map_err(|e| self.err(e))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1)).map_err(|e| self.err(e))?;
            std::io::Read::read_exact(&mut f, &mut last).map_err(|e| self.err(e))?;
            if last[0] != b'\n' {
                f.write_all(b"\n").map_err(|e| self.err(e))?;
            }
        }
        Ok(f)
    }

    /// Appends records as one write and fsyncs. Blocking: the engine calls
    /// it through [`Audit::append_blocking`] off the async worker threads.
    pub fn append(&self, records: &[Record]) -> Result<(), AuditError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for r in records {
            serde_json::to_writer(&mut buf, r).map_err(|e| self.err(e.into()))?;
            buf.push(b'\n');
        }
        {
            let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                *guard = Some(self.open()?);
            }
            let f = guard.as_mut().expect("opened above");
            let res = f.write_all(&buf).and_then(|_| f.sync_data());
            if let Err(e) = res {
                // Reopen next time: the handle may be broken (disk replaced, rotated).
                *guard = None;
                return Err(self.err(e));
            }
        }
        let mut tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tail.as_mut() {
            for r in records {
                if t.len() == TAIL {
                    t.pop_front();
                }
                t.push_back(r.clone());
            }
        }
        Ok(())
    }

    /// [`Audit::append`] on tokio's blocking pool: an fsync must not stall
    /// the workers that serve HTTP and the registry session.
    pub async fn append_blocking(self: &Arc<Self>, records: Vec<Record>) -> Result<(), AuditError> {
        self.append_returning(records).await.map(|_| ())
    }

    /// [`Audit::append_blocking`] that hands the records back once they are
    /// on disk: the intents of a large batch become its outcome records, and
    /// copying thousands of them only to keep them was a visible share of a
    /// batch's reaping time.
    pub async fn append_returning(
        self: &Arc<Self>,
        records: Vec<Record>,
    ) -> Result<Vec<Record>, AuditError> {
        if records.is_empty() {
            return Ok(records);
        }
        let me = self.clone();
        match tokio::task::spawn_blocking(move || me.append(&records).map(|()| records)).await {
            Ok(r) => r,
            Err(e) => Err(self.err(std::io::Error::other(e.to_string()))),
        }
    }

    /// The latest `limit` records (at most [`TAIL`]), oldest first. The file
    /// is read once; later records come from memory. Torn or foreign lines
    /// are skipped.
    pub fn tail(&self, limit: usize) -> Result<Vec<Record>, AuditError> {
        let mut guard = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.read_tail()?);
        }
        let t = guard.as_ref().expect("read above");
        Ok(t.iter()
            .skip(t.len().saturating_sub(limit))
            .cloned()
            .collect())
    }

    fn read_tail(&self) -> Result<VecDeque<Record>, AuditError> {
        let f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(VecDeque::new()),
            Err(e) => return Err(self.err(e)),
        };
        let mut ring = VecDeque::with_capacity(TAIL);
        for line in std::io::BufReader::new(f).lines() {
            let Ok(line) = line else { continue };
            if let Ok(r) = serde_json::from_str::<Record>(&line) {
                if ring.len() == TAIL {
                    ring.pop_front();
                }
                ring.push_back(r);
            }
        }
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_tails() {
        let dir = tempfile::tempdir().unwrap();
        let a = Audit::new(dir.path().join("sub/audit.jsonl"));
        let now = chrono::Utc::now();
        for i in 0..5 {
            let mut r = Record::event(AuditEvent::Intent, "daemon", now);
            r.task_id = Some(i);
            a.append(&[r]).unwrap();
        }
        let t = a.tail(3).unwrap();
        assert_eq!(
            t.iter().map(|r| r.task_id.unwrap()).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
    }

    #[test]
    fn survives_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let now = chrono::Utc::now();
        let a = Audit::new(&p);
        a.append(&[Record::event(AuditEvent::Intent, "daemon", now)])
            .unwrap();
        drop(a);
        // simulate a crash in the middle of a write
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"ts\":\"2024-").unwrap();
        drop(f);
        let a = Audit::new(&p);
        a.append(&[Record::event(AuditEvent::Done, "daemon", now)])
            .unwrap();
        let t = a.tail(10).unwrap();
        assert_eq!(
            t.iter().map(|r| r.event).collect::<Vec<_>>(),
            vec![AuditEvent::Intent, AuditEvent::Done]
        );
    }

    #[test]
    fn tail_is_read_once_then_kept_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let now = chrono::Utc::now();
        let a = Audit::new(&p);
        a.append(&[Record::event(AuditEvent::Intent, "daemon", now)])
            .unwrap();
        assert_eq!(a.tail(10).unwrap().len(), 1);
        // appended after the first read: served from memory, in order
        a.append(&[Record::event(AuditEvent::Done, "daemon", now)])
            .unwrap();
        let t = a.tail(10).unwrap();
        assert_eq!(
            t.iter().map(|r| r.event).collect::<Vec<_>>(),
            vec![AuditEvent::Intent, AuditEvent::Done]
        );
        assert_eq!(a.tail(1).unwrap()[0].event, AuditEvent::Done);
        // the file holds the same
        assert_eq!(Audit::new(&p).tail(10).unwrap(), t);
    }

    #[test]
    fn missing_file_is_empty() {
        let a = Audit::new("/nonexistent/dir/audit.jsonl");
        assert!(a.tail(10).unwrap().is_empty());
    }
}
