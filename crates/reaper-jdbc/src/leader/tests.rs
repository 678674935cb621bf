use super::*;

#[test]
fn options() {
    let mut o = LeaderOptions::new("r1");
    assert_eq!(o.takeover_delay(), Duration::from_secs(3));
    assert!(o.check().is_ok());
    o.lock_name = "x'; DROP".into();
    assert!(o.check().is_err());
    o.lock_name = "a".repeat(65);
    assert!(o.check().is_err());
}
