use super::*;

#[test]
fn parse_roundtrip() {
    for l in DsLine::ALL {
        assert_eq!(l.as_str().parse::<DsLine>().unwrap(), l);
    }
    assert!("3.4".parse::<DsLine>().is_err());
    assert!("auto".parse::<DsLine>().is_err());
}

#[test]
fn running_spelling_variants_map_to_code_1() {
    assert_eq!(DsLine::V1_2.state_code("RUNNING_EXECUTION"), Some(1));
    assert_eq!(DsLine::V1_2.state_code("RUNNING_EXEUTION"), Some(1));
    assert_eq!(DsLine::V1_3.state_code("running_exeution"), Some(1));
    assert_eq!(DsLine::V1_3.state_code("WAITTING_DEPEND"), Some(11));
}

#[test]
fn dispatch_only_from_3_0() {
    assert_eq!(DsLine::V2_0.state_code("DISPATCH"), None);
    assert_eq!(DsLine::V3_0.state_code("DISPATCH"), Some(17));
    assert_eq!(DsLine::V1_3.default_live_states(), vec![1]);
    assert_eq!(DsLine::V3_2.default_live_states(), vec![1, 17]);
    assert_eq!(DsLine::V3_3.default_live_states(), vec![1, 17]);
}

#[test]
fn writable_codes_follow_the_enum() {
    for l in DsLine::ALL {
        assert!(l.can_write(FAILURE), "{l}");
        assert!(l.can_write(NEED_FAULT_TOLERANCE), "{l}");
        assert!(l.can_write(KILL), "{l}");
    }
    assert!(!DsLine::V3_1.can_write(2));
    assert!(!DsLine::V3_3.can_write(5));
    assert!(DsLine::V3_2.can_write(5));
    assert!(!DsLine::V3_1_0.can_write(5));
    assert!(DsLine::V1_2.can_write(11));
    assert!(!DsLine::V2_0.can_write(17));
}

#[test]
fn layouts_and_formats() {
    assert_eq!(DsLine::V1_2.layout(), RegistryLayout::Legacy);
    assert_eq!(DsLine::V3_1_0.layout(), RegistryLayout::Grouped);
    assert_eq!(DsLine::V3_1.layout(), RegistryLayout::Flat);
    assert_eq!(DsLine::V3_1_0.heartbeat_format(), HeartbeatFormat::CsvEpoch);
    assert_eq!(DsLine::V3_3.heartbeat_format(), HeartbeatFormat::Json32);
    assert_eq!(RegistryLayout::Legacy.worker_dir(), "/workers");
    assert_eq!(RegistryLayout::Flat.master_dir(), "/nodes/master");
}

#[test]
fn table_names() {
    assert_eq!(DsLine::V3_2.workflow_table(), "t_ds_process_instance");
    assert_eq!(DsLine::V3_3.workflow_table(), "t_ds_workflow_instance");
    assert_eq!(DsLine::V3_3.workflow_fk_column(), "workflow_instance_id");
}

#[test]
fn master_failover_states_per_line() {
    assert_eq!(
        DsLine::V1_3.master_failover_workflow_states(),
        &[0, 1, 2, 4]
    );
    assert_eq!(
        DsLine::V2_0.master_failover_workflow_states(),
        &[0, 1, 12, 2, 4]
    );
    assert_eq!(
        DsLine::V3_0.master_failover_workflow_states(),
        &[0, 17, 1, 12, 2, 4]
    );
    assert_eq!(
        DsLine::V3_2.master_failover_workflow_states(),
        &[0, 1, 12, 2, 4]
    );
    assert_eq!(DsLine::V3_3.master_failover_workflow_states(), &[1, 2, 4]);
    for l in DsLine::ALL {
        // SERIAL_WAIT and READY_BLOCK are never DS's failover's
        assert!(!l.master_failover_workflow_states().contains(&14), "{l}");
        assert!(!l.master_failover_workflow_states().contains(&15), "{l}");
    }
}

#[test]
fn master_failover_task_rows_per_line() {
    let h = Some("10.0.0.5:1234");
    for l in [DsLine::V1_2, DsLine::V1_3, DsLine::V3_2, DsLine::V3_3] {
        assert!(!l.master_failover_tolerates_task(1, h, true), "{l}");
    }
    for l in [DsLine::V2_0, DsLine::V3_0, DsLine::V3_1_0, DsLine::V3_1] {
        assert!(l.master_failover_tolerates_task(1, h, true), "{l}");
        assert!(l.master_failover_tolerates_task(0, h, true), "{l}");
        for finished in [3, 5, 6, 7, 8, 9, 13] {
            assert!(
                !l.master_failover_tolerates_task(finished, h, true),
                "{l} {finished}"
            );
        }
    }
    // 2.0.9 skips rows with no host or no submit time; 3.x does not
    assert!(!DsLine::V2_0.master_failover_tolerates_task(1, None, true));
    assert!(!DsLine::V2_0.master_failover_tolerates_task(1, Some("NULL"), true));
    assert!(!DsLine::V2_0.master_failover_tolerates_task(1, h, false));
    assert!(DsLine::V3_1.master_failover_tolerates_task(0, None, false));
    assert!(
        !DsLine::V3_0.master_failover_tolerates_task(16, h, true),
        "3.0 BLOCK is finished"
    );
}

#[test]
fn workflow_terminal() {
    assert!(!DsLine::V3_2.is_workflow_terminal(1));
    assert!(DsLine::V3_2.is_workflow_terminal(7));
    assert!(!DsLine::V3_3.is_workflow_terminal(18));
}

#[test]
fn logic_tasks() {
    for l in DsLine::ALL {
        assert!(l.is_logic_task("SUB_PROCESS"), "{l}");
        assert!(!l.is_logic_task("SHELL"), "{l}");
    }
    assert!(DsLine::V1_3.is_logic_task(" dependent "));
    assert!(DsLine::V3_3.is_logic_task("SUB_WORKFLOW"));
    // 1.2 runs DEPENDENT (and CONDITIONS, had it any) on a worker
    assert!(!DsLine::V1_2.is_logic_task("DEPENDENT"));
    assert!(!DsLine::V1_2.is_logic_task("CONDITIONS"));
}
