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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn utc() -> Zone {
        "UTC".parse().unwrap()
    }

    fn ms(t: Option<Instant>) -> i64 {
        t.unwrap().timestamp_millis()
    }

    #[test]
    fn csv7_of_1_2() {
        let z: Zone = "Asia/Shanghai".parse().unwrap();
        let (hb, f) = parse(
            b"10.0.0.5,12345,0.15,0.62,1.2,2020-04-01 10:00:00,2020-04-01 10:05:00",
            z,
        )
        .unwrap();
        assert_eq!(f, HeartbeatFormat::Csv7);
        assert_eq!(
            hb.startup_time.unwrap().to_rfc3339(),
            "2020-04-01T02:00:00+00:00"
        );
        assert_eq!(
            hb.report_time.unwrap().to_rfc3339(),
            "2020-04-01T02:05:00+00:00"
        );
        assert_eq!(hb.status, None);
    }

    #[test]
    fn csv10_of_1_3() {
        let (hb, f) = parse(
            b"0.15,0.62,1.2,12.5,32.0,0.3,2021-10-18 19:55:08,2021-10-18 20:00:08,0,12345",
            utc(),
        )
        .unwrap();
        assert_eq!(f, HeartbeatFormat::Csv10);
        assert_eq!(
            hb.startup_time.unwrap().to_rfc3339(),
            "2021-10-18T19:55:08+00:00"
        );
        assert_eq!(
            hb.report_time.unwrap().to_rfc3339(),
            "2021-10-18T20:00:08+00:00"
        );
        assert_eq!(hb.status.as_deref(), Some("NORMAL"));
    }

    #[test]
    fn csv13_of_2_0_0_and_3_0() {
        let (hb, f) = parse(
            b"0.15,0.62,1.2,12.5,32.0,0.3,1685440000000,1685440010000,2,12345,100,100,0",
            utc(),
        )
        .unwrap();
        assert_eq!(f, HeartbeatFormat::CsvEpoch);
        assert_eq!(ms(hb.startup_time), 1_685_440_000_000);
        assert_eq!(ms(hb.report_time), 1_685_440_010_000);
        assert_eq!(hb.status.as_deref(), Some("BUSY"));
    }

    #[test]
    fn csv14_of_2_0_9() {
        let (hb, f) = parse(
            b"0.15,0.62,120.0,1.2,12.5,32.0,0.3,1685440000000,1685440010000,0,12345,100,100,0",
            utc(),
        )
        .unwrap();
        assert_eq!(f, HeartbeatFormat::CsvEpoch);
        assert_eq!(ms(hb.startup_time), 1_685_440_000_000);
        assert_eq!(ms(hb.report_time), 1_685_440_010_000);
        assert_eq!(hb.status.as_deref(), Some("NORMAL"));
    }

    #[test]
    fn json_of_3_1() {
        let s = r#"{"startupTime":1703125000000,"reportTime":1703125010000,"cpuUsage":0.15,"memoryUsage":0.62,"loadAverage":1.2,"availablePhysicalMemorySize":12.5,"maxCpuloadAvg":32.0,"reservedMemory":0.3,"diskAvailable":120.0,"serverStatus":0,"processId":12345,"workerHostWeight":100,"workerWaitingTaskCount":0,"workerExecThreadCount":100}"#;
        let (hb, f) = parse(s.as_bytes(), utc()).unwrap();
        assert_eq!(f, HeartbeatFormat::Json31);
        assert_eq!(ms(hb.startup_time), 1_703_125_000_000);
        assert_eq!(ms(hb.report_time), 1_703_125_010_000);
        assert_eq!(hb.status.as_deref(), Some("NORMAL"));
    }

    #[test]
    fn json_of_3_1_master_without_status() {
        let s = r#"{"startupTime":1703125000000,"reportTime":1703125010000,"cpuUsage":0.15,"memoryUsage":0.62,"loadAverage":1.2,"availablePhysicalMemorySize":12.5,"maxCpuloadAvg":32.0,"reservedMemory":0.3,"diskAvailable":120.0,"processId":12345}"#;
        let (hb, f) = parse(s.as_bytes(), utc()).unwrap();
        assert_eq!(f, HeartbeatFormat::Json31);
        assert_eq!(hb.status, None);
        assert_eq!(ms(hb.report_time), 1_703_125_010_000);
    }

    #[test]
    fn json_of_3_2_and_dev() {
        let dev = r#"{"processId":12345,"startupTime":1729245600000,"reportTime":1729249200000,"jvmCpuUsage":0.02,"cpuUsage":0.15,"jvmMemoryUsage":0.31,"memoryUsage":0.62,"diskUsage":0.4,"serverStatus":"NORMAL","host":"10.0.0.5","port":1234,"workerHostWeight":100,"threadPoolUsage":0.0}"#;
        let v322 = dev.replace("\"threadPoolUsage\":0.0", "\"threadPoolUsage\":0");
        for s in [dev.to_string(), v322] {
            let (hb, f) = parse(s.as_bytes(), utc()).unwrap();
            assert_eq!(f, HeartbeatFormat::Json32);
            assert_eq!(ms(hb.startup_time), 1_729_245_600_000);
            assert_eq!(ms(hb.report_time), 1_729_249_200_000);
            assert_eq!(hb.status.as_deref(), Some("NORMAL"));
            assert_eq!(hb.address.as_deref(), Some("10.0.0.5:1234"));
        }
    }

    #[test]
    fn json_of_3_3_carries_host_and_port() {
        // a 3.3 worker with worker-address set: the node is named otherwise
        let s = r#"{"processId":12345,"startupTime":1736490000000,"reportTime":1736490010000,"cpuUsage":0.15,"memoryUsage":0.62,"diskUsage":0.4,"serverStatus":"NORMAL","host":"10.0.0.9","port":1234,"workerHostWeight":100,"threadPoolUsage":0.0,"workerGroup":"default"}"#;
        let (hb, f) = parse(s.as_bytes(), utc()).unwrap();
        assert_eq!(f, HeartbeatFormat::Json32);
        assert_eq!(hb.address.as_deref(), Some("10.0.0.9:1234"));
        assert_eq!(ms(hb.report_time), 1_736_490_010_000);
        // a master, its port as a string, a host in upper case with blanks
        let s = r#"{"startupTime":1,"reportTime":2,"serverStatus":"NORMAL","host":" Master-1.DS.svc ","port":"5678","isCoordinator":true}"#;
        let (hb, _) = parse(s.as_bytes(), utc()).unwrap();
        assert_eq!(hb.address.as_deref(), Some("master-1.ds.svc:5678"));
    }

    #[test]
    fn heartbeats_without_host_and_port_have_no_address() {
        let v31 = r#"{"startupTime":1703125000000,"reportTime":1703125010000,"serverStatus":0,"processId":12345}"#;
        let csv13 = "0.15,0.62,1.2,12.5,32.0,0.3,1685440000000,1685440010000,2,12345,100,100,0";
        let csv7 = "10.0.0.5,12345,0.15,0.62,1.2,2020-04-01 10:00:00,2020-04-01 10:05:00";
        for s in [v31, csv13, csv7] {
            let (hb, _) = parse(s.as_bytes(), utc()).unwrap();
            assert_eq!(hb.address, None, "{s}");
            assert!(hb.report_time.is_some(), "{s}");
        }
        // only one of the two
        for s in [
            r#"{"startupTime":1,"reportTime":2,"serverStatus":"NORMAL","host":"10.0.0.9"}"#,
            r#"{"startupTime":1,"reportTime":2,"serverStatus":"NORMAL","port":1234}"#,
        ] {
            let (hb, _) = parse(s.as_bytes(), utc()).unwrap();
            assert_eq!(hb.address, None, "{s}");
        }
    }

    #[test]
    fn a_bad_host_or_port_loses_only_the_address() {
        let bad_ports = [
            r#""abc""#, "-1", "70000", "0", "1234.5", "null", "true", r#""""#, "[1234]",
        ];
        for p in bad_ports {
            let s = format!(
                r#"{{"startupTime":1,"reportTime":2,"serverStatus":"NORMAL","host":"10.0.0.9","port":{p}}}"#
            );
            let (hb, f) = parse(s.as_bytes(), utc())
                .unwrap_or_else(|e| panic!("port {p}: the heartbeat itself must parse: {e}"));
            assert_eq!(f, HeartbeatFormat::Json32, "port {p}");
            assert_eq!(hb.address, None, "port {p}");
            assert_eq!(ms(hb.startup_time), 1, "port {p}");
            assert_eq!(ms(hb.report_time), 2, "port {p}");
            assert_eq!(hb.status.as_deref(), Some("NORMAL"), "port {p}");
        }
        for h in [
            r#""""#, r#""  ""#, "12", "null", r#""a b""#, r#""a/b""#, "{}",
        ] {
            let s = format!(
                r#"{{"startupTime":1,"reportTime":2,"serverStatus":"NORMAL","host":{h},"port":1234}}"#
            );
            let (hb, _) = parse(s.as_bytes(), utc())
                .unwrap_or_else(|e| panic!("host {h}: the heartbeat itself must parse: {e}"));
            assert_eq!(hb.address, None, "host {h}");
            assert_eq!(ms(hb.report_time), 2, "host {h}");
        }
    }

    #[test]
    fn unknown_json_fields_are_ignored() {
        let s = r#"{"startupTime":1,"reportTime":2,"serverStatus":"BUSY","isCoordinator":true,"extra":{"a":[1]}}"#;
        let (hb, f) = parse(s.as_bytes(), utc()).unwrap();
        assert_eq!(f, HeartbeatFormat::Json32);
        assert_eq!(hb.status.as_deref(), Some("BUSY"));
        assert_eq!(ms(hb.report_time), 2);
    }

    #[test]
    fn empty_and_garbage() {
        assert_eq!(parse(b"", utc()), Err(HeartbeatError::Empty));
        assert_eq!(parse(b"  \n", utc()), Err(HeartbeatError::Empty));
        assert_eq!(
            parse(&[0xff, 0xfe, 0x00], utc()),
            Err(HeartbeatError::NotUtf8)
        );
        assert_eq!(parse(b"hello", utc()), Err(HeartbeatError::FieldCount(1)));
        assert!(matches!(
            parse(b"{not json", utc()),
            Err(HeartbeatError::Json(_))
        ));
        assert!(matches!(
            parse(b"[1,2]", utc()),
            Err(HeartbeatError::FieldCount(2))
        ));
        assert_eq!(
            parse(b"{\"cpuUsage\":1}", utc()),
            Err(HeartbeatError::NoTimes)
        );
        assert_eq!(
            parse(b"a,b,c,d,e,f,g,h,i,j", utc()),
            Err(HeartbeatError::NoTimes)
        );
        // one unreadable time: still a heartbeat, that time unknown
        let (hb, _) = parse(b"0,0,0,0,0,0,garbage,2021-10-18 20:00:08,0,1", utc()).unwrap();
        assert_eq!(hb.startup_time, None);
        assert!(hb.report_time.is_some());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&data, utc());
        }

        #[test]
        fn never_panics_on_csv_like(fields in proptest::collection::vec("[0-9:. eE+-]{0,24}", 0..16)) {
            let s = fields.join(",");
            let _ = parse(s.as_bytes(), Zone::Local);
        }

        #[test]
        fn never_panics_on_json_like(st in any::<i64>(), rt in any::<f64>(), status in ".{0,8}") {
            let s = format!(r#"{{"startupTime":{st},"reportTime":{rt},"serverStatus":{status:?}}}"#);
            let _ = parse(s.as_bytes(), utc());
        }
    }

    /// The worker-host agent checks the JVM's pid (SPEC §12): every format carries it.
    #[test]
    fn process_id_of_every_format() {
        let pid = |d: &str| parse(d.as_bytes(), utc()).unwrap().0.process_id;
        assert_eq!(
            pid("10.0.0.5,4242,0.15,0.62,1.2,2020-04-01 10:00:00,2020-04-01 10:05:00"),
            Some(4242)
        );
        assert_eq!(
            pid("0.15,0.62,1.2,12.5,32.0,0.3,2021-10-18 19:55:08,2021-10-18 20:00:08,0,4243"),
            Some(4243)
        );
        assert_eq!(
            pid("0.15,0.62,1.2,12.5,32.0,0.3,1685440000000,1685440010000,2,4244,100,100,0"),
            Some(4244)
        );
        assert_eq!(
            pid("0.15,0.62,120.0,1.2,12.5,32.0,0.3,1685440000000,1685440010000,0,4245,100,100,0"),
            Some(4245)
        );
        assert_eq!(
            pid(
                r#"{"startupTime":1703125000000,"reportTime":1703125010000,"serverStatus":0,"processId":4246}"#
            ),
            Some(4246)
        );
        assert_eq!(
            pid(r#"{"processId":"4247","startupTime":1729245600000,"serverStatus":"NORMAL"}"#),
            Some(4247)
        );
        assert_eq!(
            pid(r#"{"processId":0,"startupTime":1729245600000,"serverStatus":"NORMAL"}"#),
            None
        );
        assert_eq!(pid(r#"{"startupTime":1729245600000}"#), None);
        assert_eq!(
            pid("10.0.0.5,x,0.15,0.62,1.2,2020-04-01 10:00:00,2020-04-01 10:05:00"),
            None
        );
    }
}
