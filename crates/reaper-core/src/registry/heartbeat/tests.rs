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
