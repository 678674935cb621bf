use super::*;
use crate::leader::LEADER_KEY;

#[test]
fn ids_travel_through_the_ping_text() {
    let info = format!(
        "SELECT /* {MARK}{} */ IS_USED_LOCK('x') = CONNECTION_ID(), SLEEP(1.000)",
        hex("host-a:1234 */ DROP")
    );
    assert_eq!(id_from_info(&info).as_deref(), Some("host-a:1234 */ DROP"));
    assert_eq!(id_from_info("SELECT GET_LOCK('ds-reaper-leader', 0)"), None);
    assert_eq!(id_from_info(&format!("/* {MARK}zz */")), None);
}

#[test]
fn application_names_fit() {
    assert_eq!(app_name("r1"), "ds-reaper:r1");
    let long = "x".repeat(100);
    assert_eq!(app_name(&long).len(), 63);
    assert_eq!(app_name("é".repeat(40).as_str()).len(), 62);
}

#[test]
fn key_halves_are_what_pg_locks_shows() {
    assert_eq!(halves(LEADER_KEY), (0x6473_7265, 0x6170_6572));
    assert_eq!(halves(-1), (0xffff_ffff, 0xffff_ffff));
}
