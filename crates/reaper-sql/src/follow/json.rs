//! The JSON texts of DS's rows, written and read as DS's own code does:
//! command params and 3.3's `state_history`.

use super::WfRow;
use chrono::NaiveDateTime;

/// dev `WorkflowExecutionStatus` names, for the failover command's param.
pub(super) fn wf_status_name_33(code: i32) -> Option<&'static str> {
    Some(match code {
        0 => "SUBMITTED_SUCCESS",
        1 => "RUNNING_EXECUTION",
        2 => "READY_PAUSE",
        3 => "PAUSE",
        4 => "READY_STOP",
        5 => "STOP",
        6 => "FAILURE",
        7 => "SUCCESS",
        14 => "SERIAL_WAIT",
        17 => "WAIT_TO_RUN",
        18 => "FAILOVER",
        _ => return None,
    })
}

/// `{"ProcessInstanceId":N}` plus, on 3.1+, `StartParams` copied from the
/// instance's own param (`createCommandParams`) when `with_start_params`.
pub(super) fn recover_param(
    wf_id: i64,
    wf: &WfRow,
    with_start_params: bool,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    if with_start_params {
        if let Some(sp) = wf
            .command_param
            .as_deref()
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
            .and_then(|v| v.get("StartParams").cloned())
        {
            if !sp.is_null() {
                m.insert("StartParams".into(), sp);
            }
        }
    }
    m.insert("ProcessInstanceId".into(), serde_json::Value::from(wf_id));
    m
}

pub(super) fn with_tz(
    mut m: serde_json::Map<String, serde_json::Value>,
    tz: &Option<String>,
) -> serde_json::Map<String, serde_json::Value> {
    if let Some(tz) = tz {
        m.insert(
            "schedule_timezone".into(),
            serde_json::Value::from(tz.clone()),
        );
    }
    m
}

/// 3.3 `WorkflowInstance.setStateWithDesc(SUBMITTED_SUCCESS,
/// "START_FAILURE_TASK_PROCESS")` as `WorkflowInstanceRecoverFailureTaskTrigger`
/// calls it: one `StateDesc` appended to the JSON list in `state_history`,
/// serialised by DS's `JSONUtils` (fields in declaration order, the enum by
/// name, the time as `yyyy-MM-dd HH:mm:ss` in the servers' zone). The
/// existing text is kept byte for byte. `None` when it is not a JSON list:
/// DS's `toList` then yields an immutable empty list and the trigger fails,
/// so there is nothing of DS's to imitate, and the history is left as it is.
pub(crate) fn restart_state_history(existing: Option<&str>, now: NaiveDateTime) -> Option<String> {
    let entry = format!(
        "{{\"time\":\"{}\",\"state\":\"SUBMITTED_SUCCESS\",\"desc\":\"START_FAILURE_TASK_PROCESS\"}}",
        now.format("%Y-%m-%d %H:%M:%S")
    );
    let old = existing.map(str::trim).unwrap_or_default();
    if old.is_empty() {
        return Some(format!("[{entry}]"));
    }
    match serde_json::from_str::<serde_json::Value>(old) {
        Ok(serde_json::Value::Array(items)) => {
            let head = old.strip_suffix(']')?.trim_end();
            Some(if items.is_empty() {
                format!("[{entry}]")
            } else {
                format!("{head},{entry}]")
            })
        }
        _ => None,
    }
}
