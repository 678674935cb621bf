//! Which DS line a schema is (SPEC §2), from its structure alone.

use crate::{Db, SchemaInfo, SqlError};
use reaper_core::DsLine;
use std::collections::BTreeSet;

impl Db {
    /// Line detection from the schema's structure; see [`detect_lines`].
    /// Also (re-)learns the columns every later read and write uses.
    pub async fn detect(&self) -> Result<SchemaInfo, SqlError> {
        let (cat, version_row) = self.learn().await?;
        let lines = detect_lines(&cat.tables, &cat.task_columns())?;
        Ok(SchemaInfo { lines, version_row })
    }
}

/// The lines a schema is consistent with, from the tables and the columns of
/// `t_ds_task_instance` (lower-case names).
pub fn detect_lines(
    tables: &BTreeSet<String>,
    task_cols: &BTreeSet<String>,
) -> Result<Vec<DsLine>, SqlError> {
    let has = |c: &str| task_cols.contains(c);
    if !tables.contains("t_ds_task_instance") {
        return Err(SqlError::UnknownSchema(format!(
            "no t_ds_task_instance table ({} tables found)",
            tables.len()
        )));
    }
    let lines = if tables.contains("t_ds_workflow_instance") && has("workflow_instance_id") {
        vec![DsLine::V3_3]
    } else if !tables.contains("t_ds_process_instance") || !has("process_instance_id") {
        vec![]
    } else if has("project_code") {
        vec![DsLine::V3_2]
    } else if has("task_execute_type") {
        vec![DsLine::V3_1_0, DsLine::V3_1]
    } else if has("task_code") && has("task_group_id") {
        // 3.0.0's DDL added task_group_id; no 2.0.x release has it
        vec![DsLine::V3_0]
    } else if has("task_code") {
        vec![DsLine::V2_0]
    } else if has("worker_group_id") {
        vec![DsLine::V1_2]
    } else if has("worker_group") {
        vec![DsLine::V1_3]
    } else {
        vec![]
    };
    if lines.is_empty() {
        return Err(SqlError::UnknownSchema(format!(
            "t_ds_task_instance columns [{}], workflow table {}",
            task_cols.iter().cloned().collect::<Vec<_>>().join(", "),
            if tables.contains("t_ds_workflow_instance") {
                "t_ds_workflow_instance"
            } else if tables.contains("t_ds_process_instance") {
                "t_ds_process_instance"
            } else {
                "missing"
            }
        )));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detection_rules() {
        let t = set(&["t_ds_task_instance", "t_ds_process_instance"]);
        let l = |c: &[&str]| detect_lines(&t, &set(c)).unwrap();
        assert_eq!(
            l(&["process_instance_id", "worker_group_id"]),
            vec![DsLine::V1_2]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group"]),
            vec![DsLine::V1_3]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group", "task_code"]),
            vec![DsLine::V2_0]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "task_group_id"]),
            vec![DsLine::V3_0]
        );
        assert_eq!(
            l(&[
                "process_instance_id",
                "task_code",
                "task_group_id",
                "task_execute_type"
            ]),
            vec![DsLine::V3_1_0, DsLine::V3_1]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "project_code"]),
            vec![DsLine::V3_2]
        );
        let t33 = set(&["t_ds_task_instance", "t_ds_workflow_instance"]);
        assert_eq!(
            detect_lines(&t33, &set(&["workflow_instance_id"])).unwrap(),
            vec![DsLine::V3_3]
        );
        assert!(matches!(
            detect_lines(&set(&["t_ds_user"]), &set(&[])),
            Err(SqlError::UnknownSchema(_))
        ));
        assert!(matches!(
            detect_lines(&t, &set(&["id", "name"])),
            Err(SqlError::UnknownSchema(m)) if m.contains("id, name")
        ));
    }
}
