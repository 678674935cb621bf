//! DS writes `datetime` columns and 1.x heartbeat times as local wall-clock
//! times of its servers' zone (`dolphinscheduler.time_zone`); everything inside
//! ds-reaper is an [`Instant`]. This converts between the two.

use crate::Instant;
use chrono::{LocalResult, NaiveDateTime, TimeZone, Utc};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// The zone of the machine ds-reaper runs on.
    Local,
    Named(chrono_tz::Tz),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown time zone {0:?} (expected an IANA name such as \"Asia/Shanghai\", or \"local\")")]
pub struct UnknownZone(pub String);

impl FromStr for Zone {
    type Err = UnknownZone;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("local") {
            return Ok(Zone::Local);
        }
        t.parse::<chrono_tz::Tz>()
            .map(Zone::Named)
            .map_err(|_| UnknownZone(s.to_string()))
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Local => f.write_str("local"),
            Zone::Named(tz) => f.write_str(tz.name()),
        }
    }
}

fn pick<T: TimeZone>(r: LocalResult<chrono::DateTime<T>>) -> Option<Instant> {
    match r {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        // The repeated hour when clocks go back: the earlier reading makes a
        // task look older, never younger, which errs toward the grace period.
        LocalResult::Ambiguous(a, _) => Some(a.with_timezone(&Utc)),
        LocalResult::None => None,
    }
}

impl Zone {
    /// A wall-clock time in this zone as an instant. A time inside a DST gap
    /// (which DS cannot have written) is read one hour later.
    pub fn to_instant(self, naive: NaiveDateTime) -> Option<Instant> {
        let r = |n: NaiveDateTime| match self {
            Zone::Local => pick(chrono::Local.from_local_datetime(&n)),
            Zone::Named(tz) => pick(tz.from_local_datetime(&n)),
        };
        r(naive).or_else(|| r(naive + chrono::TimeDelta::hours(1)))
    }

    /// An instant as wall-clock time in this zone, for writing `datetime` columns.
    pub fn to_naive(self, t: Instant) -> NaiveDateTime {
        match self {
            Zone::Local => t.with_timezone(&chrono::Local).naive_local(),
            Zone::Named(tz) => t.with_timezone(&tz).naive_local(),
        }
    }

    /// Parses DS's `yyyy-MM-dd HH:mm:ss` in this zone.
    pub fn parse_ds_datetime(self, s: &str) -> Option<Instant> {
        let n = NaiveDateTime::parse_from_str(s.trim(), "%Y-%m-%d %H:%M:%S").ok()?;
        self.to_instant(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_zone_round_trip() {
        let z: Zone = "Asia/Shanghai".parse().unwrap();
        let t = z.parse_ds_datetime("2021-10-18 19:55:08").unwrap();
        assert_eq!(t.to_rfc3339(), "2021-10-18T11:55:08+00:00");
        assert_eq!(z.to_naive(t).to_string(), "2021-10-18 19:55:08");
    }

    #[test]
    fn parse_zone_names() {
        assert_eq!("local".parse::<Zone>().unwrap(), Zone::Local);
        assert_eq!("UTC".parse::<Zone>().unwrap().to_string(), "UTC");
        assert!("Mars/Olympus".parse::<Zone>().is_err());
    }

    #[test]
    fn dst_edges_do_not_fail() {
        let z: Zone = "Europe/Berlin".parse().unwrap();
        // gap: 02:30 does not exist on 2024-03-31
        assert!(z.parse_ds_datetime("2024-03-31 02:30:00").is_some());
        // overlap: 02:30 happens twice on 2024-10-27; the earlier one is taken
        let t = z.parse_ds_datetime("2024-10-27 02:30:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2024-10-27T00:30:00+00:00");
    }

    #[test]
    fn garbage_is_none() {
        assert!(Zone::Local.parse_ds_datetime("yesterday").is_none());
    }
}
