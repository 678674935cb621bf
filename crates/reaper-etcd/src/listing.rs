//! The full read that ends every gap: every key under a few prefixes, all at
//! one revision (the first page's), in pages so that a large cluster never
//! meets the client's message size limit.

use crate::keys::prefix_end;
use crate::{bounded, EtcdError};
use etcd_client::{GetOptions, KvClient};
use std::time::Duration;

/// Keys per page.
const PAGE: i64 = 500;

/// One key as read or watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kv {
    pub(crate) key: String,
    pub(crate) value: Vec<u8>,
    /// 0: not bound to a lease.
    pub(crate) lease: i64,
    pub(crate) create_revision: i64,
    pub(crate) mod_revision: i64,
}

impl Kv {
    /// None for a key that is not UTF-8 (DS writes none).
    pub(crate) fn from_client(kv: &etcd_client::KeyValue) -> Option<Kv> {
        Some(Kv {
            key: kv.key_str().ok()?.to_string(),
            value: kv.value().to_vec(),
            lease: kv.lease(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        })
    }
}

/// Everything under some prefixes at one revision.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub(crate) revision: i64,
    /// Per prefix, in the order asked.
    pub(crate) ranges: Vec<Vec<Kv>>,
}

/// Reads every key under each prefix at one revision: the first request is
/// a linearizable read at the current revision, every later page is read at
/// that same revision. Each request is bounded by `rt`.
pub(crate) async fn read_all(
    kv: &mut KvClient,
    prefixes: &[String],
    rt: Duration,
) -> Result<Snapshot, EtcdError> {
    let mut revision: Option<i64> = None;
    let mut ranges = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut out = Vec::new();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if let Some(r) = revision {
                opts = opts.with_revision(r);
            }
            let resp = bounded("range read", rt, kv.get(from.clone(), Some(opts))).await?;
            if revision.is_none() {
                let r = resp
                    .header()
                    .map(|h| h.revision())
                    .filter(|r| *r > 0)
                    .ok_or_else(|| EtcdError::Etcd("range read", "no revision in reply".into()))?;
                revision = Some(r);
            }
            let kvs = resp.kvs();
            out.extend(kvs.iter().filter_map(Kv::from_client));
            match kvs.last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        ranges.push(out);
    }
    Ok(Snapshot {
        revision: revision.unwrap_or(0),
        ranges,
    })
}
