//! Heartbeats of every line (CSV and JSON), as any registry holds them: no
//! input panics; a parsed heartbeat has a time, and its format agrees with
//! the data's shape.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reaper_core::registry::heartbeat;
use reaper_core::{HeartbeatFormat, Zone};

fuzz_target!(|data: &[u8]| {
    for zone in ["UTC", "Asia/Shanghai", "America/Sao_Paulo"] {
        let zone: Zone = zone.parse().expect("a known zone");
        if let Ok((hb, format)) = heartbeat::parse(data, zone) {
            assert!(hb.startup_time.is_some() || hb.report_time.is_some());
            let json = std::str::from_utf8(data).is_ok_and(|t| t.trim().starts_with('{'));
            let json_format = matches!(format, HeartbeatFormat::Json31 | HeartbeatFormat::Json32);
            assert_eq!(json, json_format, "{format:?}");
            if let Some(pid) = hb.process_id {
                assert!(pid > 0);
            }
        }
    }
});
