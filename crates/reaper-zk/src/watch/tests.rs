use super::*;

fn paths(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_changed_node_is_reread_at_most_once_per_coalesce_window() {
    let mut c = Coalescer::default();
    c.listed(&paths(&["/a", "/b"]));
    c.dirty.insert("/a".into());
    c.dirty.insert("/gone".into());
    let known = |p: &str| p != "/gone";
    assert!(c.take_due(known).is_empty(), "read just now");
    tokio::time::advance(DATA_COALESCE).await;
    assert_eq!(c.take_due(known), paths(&["/a"]));
    assert!(c.take_due(known).is_empty(), "taken out of the dirty set");
    c.read(&paths(&["/a"]));
    c.dirty.insert("/a".into());
    tokio::time::advance(DATA_COALESCE / 2).await;
    assert!(c.take_due(known).is_empty());
    // a deletion forgets it; a listing starts over
    c.forget("/a");
    assert!(!c.dirty.contains("/a") && !c.last_read.contains_key("/a"));
    c.dirty.insert("/b".into());
    c.listed(&paths(&["/b"]));
    assert!(c.dirty.is_empty());
}
