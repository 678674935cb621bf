//! Parsing of the data DS servers write into their registry node (reference §3.3).
//!
//! The format is recognised from the data itself, so a registry of unknown
//! version can be read: CSV with 7 (1.2), 10 (1.3), 13 (2.0.0–2.0.5, 3.0, 3.1.0)
//! or 14 (2.0.6–2.0.9) fields, or JSON (3.1 with an int `serverStatus`, 3.2+
//! with its name). Parsing is lenient: unknown JSON fields are ignored and an
//! unreadable time is `None`; only data with no recognisable shape is an error.
//! The data is the same whichever registry holds it (ZooKeeper node data, an
//! etcd value, a JDBC registry row's `data` column).

use crate::{HeartbeatFormat, Instant, Zone};
use chrono::DateTime;

/// What ds-reaper needs from a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Heartbeat {
    pub startup_time: Option<Instant>,
    pub report_time: Option<Instant>,
    /// `serverStatus` as a name (`NORMAL`, `ABNORMAL`, `BUSY`, ...), when present.
    pub status: Option<String>,
    /// The normalised `host:port` of a 3.2+ JSON heartbeat, None when either
    /// part is missing or unreadable. DS 3.3+ writes this, not the node name,
    /// into `t_ds_task_instance.host` (they differ when `worker-address` is set).
    pub address: Option<String>,
    /// `processId`: the server JVM's pid on its host (every line writes it).
    /// The worker-host agent checks that it can see this process (SPEC §12).
    pub process_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// 1.3 registers the node with empty data before the first heartbeat.
    #[error("empty heartbeat data")]
    Empty,
    #[error("heartbeat data is not UTF-8")]
    NotUtf8,
    #[error("heartbeat CSV has {0} fields (expected 7, 10, 13 or 14)")]
    FieldCount(usize),
    #[error("heartbeat JSON is invalid: {0}")]
    Json(String),
    #[error("heartbeat has neither a readable startupTime nor reportTime")]
    NoTimes,
}

/// Parses node data, detecting the format from the data itself.
pub fn parse(data: &[u8], zone: Zone) -> Result<(Heartbeat, HeartbeatFormat), HeartbeatError> {
    let text = std::str::from_utf8(data).map_err(|_| HeartbeatError::NotUtf8)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(HeartbeatError::Empty);
    }
    let (hb, format) = if text.starts_with('{') {
        parse_json(text)?
    } else {
        parse_csv(text, zone)?
    };
    if hb.startup_time.is_none() && hb.report_time.is_none() {
        return Err(HeartbeatError::NoTimes);
    }
    Ok((hb, format))
}

fn epoch_ms(s: &str) -> Option<Instant> {
    let s = s.trim();
    let ms = s.parse::<i64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f as i64)
    })?;
    DateTime::from_timestamp_millis(ms)
}

/// DS's int `serverStatus` (`Constants.NORMAL_NODE_STATUS` etc.) as the 3.2 names.
fn status_name(code: i64) -> String {
    match code {
        0 => "NORMAL".to_string(),
        1 => "ABNORMAL".to_string(),
        2 => "BUSY".to_string(),
        other => other.to_string(),
    }
}

fn status_field(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    Some(match s.parse::<i64>() {
        Ok(code) => status_name(code),
        Err(_) => s.to_string(),
    })
}

/// A pid as DS writes it: a positive int (0 or garbage: unknown).
fn pid_field(s: &str) -> Option<i64> {
    s.trim().parse::<i64>().ok().filter(|p| *p > 0)
}

fn json_pid(v: Option<&serde_json::Value>) -> Option<i64> {
    match v? {
        serde_json::Value::Number(n) => n.as_i64().filter(|p| *p > 0),
        serde_json::Value::String(s) => pid_field(s),
        _ => None,
    }
}

fn parse_csv(text: &str, zone: Zone) -> Result<(Heartbeat, HeartbeatFormat), HeartbeatError> {
    let f: Vec<&str> = text.split(',').collect();
    let hb = match f.len() {
        // host,processId,cpuUsage,memoryUsage,loadAverage,createTime,lastHeartbeatTime
        7 => (
            Heartbeat {
                startup_time: zone.parse_ds_datetime(f[5]),
                report_time: zone.parse_ds_datetime(f[6]),
                status: None,
                address: None,
                process_id: pid_field(f[1]),
            },
            HeartbeatFormat::Csv7,
        ),
        // ...,startupTime,reportTime,serverStatus,processId
        10 => (
            Heartbeat {
                startup_time: zone.parse_ds_datetime(f[6]),
                report_time: zone.parse_ds_datetime(f[7]),
                status: status_field(f[8]),
                address: None,
                process_id: pid_field(f[9]),
            },
            HeartbeatFormat::Csv10,
        ),
        13 => (
            Heartbeat {
                startup_time: epoch_ms(f[6]),
                report_time: epoch_ms(f[7]),
                status: status_field(f[8]),
                address: None,
                process_id: pid_field(f[9]),
            },
            HeartbeatFormat::CsvEpoch,
        ),
        // 2.0.6+: diskAvailable inserted after memoryUsage
        14 => (
            Heartbeat {
                startup_time: epoch_ms(f[7]),
                report_time: epoch_ms(f[8]),
                status: status_field(f[9]),
                address: None,
                process_id: pid_field(f[10]),
            },
            HeartbeatFormat::CsvEpoch,
        ),
        n => return Err(HeartbeatError::FieldCount(n)),
    };
    Ok(hb)
}

fn json_ms(v: Option<&serde_json::Value>) -> Option<Instant> {
    match v? {
        serde_json::Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .and_then(DateTime::from_timestamp_millis),
        serde_json::Value::String(s) => epoch_ms(s),
        _ => None,
    }
}

/// Fields only the 3.2+ `BaseHeartBeat` has; a 3.1 master writes no `serverStatus`.
const JSON32_ONLY: &[&str] = &[
    "jvmCpuUsage",
    "jvmMemoryUsage",
    "diskUsage",
    "host",
    "port",
    "threadPoolUsage",
];

fn parse_json(text: &str) -> Result<(Heartbeat, HeartbeatFormat), HeartbeatError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| HeartbeatError::Json(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| HeartbeatError::Json("not an object".to_string()))?;
    let (status, format) = match obj.get("serverStatus") {
        Some(serde_json::Value::Number(n)) => {
            (n.as_i64().map(status_name), HeartbeatFormat::Json31)
        }
        Some(serde_json::Value::String(s)) => (Some(s.clone()), HeartbeatFormat::Json32),
        _ => {
            let newer = JSON32_ONLY.iter().any(|k| obj.contains_key(*k));
            (
                None,
                if newer {
                    HeartbeatFormat::Json32
                } else {
                    HeartbeatFormat::Json31
                },
            )
        }
    };
    Ok((
        Heartbeat {
            startup_time: json_ms(obj.get("startupTime")),
            report_time: json_ms(obj.get("reportTime")),
            status,
            address: json_address(obj),
            process_id: json_pid(obj.get("processId")),
        },
        format,
    ))
}

/// `host` and `port` of a 3.2+ heartbeat as one normalised `host:port`.
/// Lenient like the rest of the parser: a missing or malformed part only
/// loses the address, never the heartbeat.
fn json_address(obj: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let host = obj.get("host")?.as_str()?.trim();
    // An empty host, or one with blanks or a slash, is not what DS writes into
    // a task row; comparing with it could only produce a false match.
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/') {
        return None;
    }
    let port: u16 = match obj.get("port")? {
        serde_json::Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok())?,
        serde_json::Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    if port == 0 {
        return None;
    }
    Some(crate::host::normalize(&format!("{host}:{port}")).into_owned())
}

#[cfg(test)]
mod tests;
