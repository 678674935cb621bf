//! Which DS line to work with (SPEC §2): explicit, or detected from the
//! schema and the registry, with a hold when the two disagree.

use super::{Engine, Error, SweepState};
use crate::config::VersionSetting;
use reaper_core::ports::SchemaInfo;
use reaper_core::registry::Detected;
use reaper_core::DsLine;

/// Chooses the line to work with, and a hold when the sources disagree.
pub fn resolve_line(
    setting: VersionSetting,
    schema: Option<&SchemaInfo>,
    detected: &Detected,
) -> (Option<DsLine>, Option<String>) {
    let names = |v: &[DsLine]| v.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(", ");
    match setting {
        VersionSetting::Line(l) => (Some(l), None),
        VersionSetting::Auto => {
            let Some(schema) = schema else {
                return (
                    None,
                    Some("the database schema has not been read yet".into()),
                );
            };
            let both: Vec<DsLine> = schema
                .lines
                .iter()
                .copied()
                .filter(|l| detected.lines.contains(l))
                .collect();
            // Lines left after intersecting differ only in ways that do not
            // change what we read or write (e.g. 2.0 vs 3.0): take the newest.
            match both.iter().max() {
                Some(l) => (Some(*l), None),
                None => (
                    schema.lines.iter().max().copied(),
                    Some(format!(
                        "DS line disagreement: the schema fits [{}] but the registry fits [{}]; \
                         acting is held until dolphinscheduler.version is set",
                        names(&schema.lines),
                        names(&detected.lines)
                    )),
                ),
            }
        }
    }
}

impl Engine {
    /// Reads the schema once (again after a failure) and resolves the line.
    pub(super) async fn line(
        &self,
        st: &mut SweepState,
    ) -> Result<(DsLine, Option<String>), Error> {
        let setting = self.settings.dolphinscheduler.version;
        if st.schema.is_none() && setting == VersionSetting::Auto {
            match self.store.detect().await {
                Ok(info) => {
                    tracing::info!(lines = ?info.lines, version_row = ?info.version_row,
                        "database schema read (t_ds_version is logged, not trusted)");
                    st.schema = Some(info);
                }
                Err(e) => {
                    self.db_failed(&e);
                    return Err(Error::port("reading the schema")(e));
                }
            }
        }
        let detected = self.registry.detected();
        let (line, hold) = resolve_line(setting, st.schema.as_ref(), &detected);
        let line = line.ok_or(Error::LineUnknown)?;
        if hold != st.warned_line {
            match &hold {
                Some(h) => tracing::warn!("{h}"),
                None => tracing::info!(line = %line, "DolphinScheduler line"),
            }
            st.warned_line = hold.clone();
        }
        if st.warned_states != Some(line) {
            let (_, unknown) = self.settings.live_states(line);
            if !unknown.is_empty() {
                tracing::warn!(line = %line, states = ?unknown, "reconcile.states names states this DS line does not have; ignored");
            }
            st.warned_states = Some(line);
            self.metrics.set_build_info(line.as_str());
        }
        let mut s = self.status_write();
        s.line = Some(line);
        s.line_hold = hold.clone();
        Ok((line, hold))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_resolution() {
        let schema = SchemaInfo {
            lines: vec![DsLine::V3_1_0, DsLine::V3_1],
            version_row: None,
        };
        let detected = |lines: Vec<DsLine>| Detected {
            layout: None,
            format: None,
            lines,
        };
        // the registry narrows the schema's candidates
        assert_eq!(
            resolve_line(
                VersionSetting::Auto,
                Some(&schema),
                &detected(vec![DsLine::V3_1])
            ),
            (Some(DsLine::V3_1), None)
        );
        // nothing seen in the registry: the newest the schema allows
        assert_eq!(
            resolve_line(
                VersionSetting::Auto,
                Some(&schema),
                &detected(DsLine::ALL.to_vec())
            )
            .0,
            Some(DsLine::V3_1)
        );
        // disagreement holds
        let (l, hold) = resolve_line(
            VersionSetting::Auto,
            Some(&schema),
            &detected(vec![DsLine::V1_2]),
        );
        assert_eq!(l, Some(DsLine::V3_1));
        assert!(hold.unwrap().contains("disagreement"));
        // explicit wins
        assert_eq!(
            resolve_line(
                VersionSetting::Line(DsLine::V2_0),
                None,
                &detected(vec![DsLine::V1_2])
            ),
            (Some(DsLine::V2_0), None)
        );
        assert!(resolve_line(VersionSetting::Auto, None, &detected(vec![]))
            .1
            .is_some());
    }
}
