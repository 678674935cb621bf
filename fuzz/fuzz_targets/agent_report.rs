//! An agent's report as its registry node holds it: no input panics, and a
//! report that parses survives a round trip unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reaper_core::agent::{AgentReport, AgentSeen};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = AgentReport::parse("w1:1234", data) else {
        return;
    };
    let again = AgentReport::parse("w1:1234", &r.to_json()).expect("our own JSON parses");
    assert_eq!(again, r);
    // what the daemon keeps of it never panics either, whatever its times
    let now = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("a valid instant");
    let stale = std::time::Duration::from_secs(35);
    let seen = AgentSeen::received(None, Some(r.clone()), now, false, stale);
    let _ = r.scan_started();
    for t in &r.tasks {
        assert!(seen.holds(t.task_id, now, stale));
        assert_eq!(seen.listed_in_streak(t.task_id), Some(now));
    }
});
