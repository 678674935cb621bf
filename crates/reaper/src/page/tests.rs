use super::*;
use crate::views::NodeView;
use chrono::TimeZone;

#[test]
fn ages_read_like_a_person_would_say_them() {
    let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let t = |s: i64| Some(now - chrono::TimeDelta::seconds(s));
    assert!(ago(t(12), now).contains(">12 s ago<"));
    assert!(ago(t(600), now).contains(">10 min ago<"));
    assert!(ago(t(3 * 3600), now).contains(">3 h ago<"));
    assert!(ago(t(-5), now).contains(">in 5 s<"));
    assert!(ago(t(12), now).contains("title=\"2023-11-14T22:13:08Z\""));
    assert_eq!(ago(None, now), "-");
}

#[test]
fn text_is_escaped() {
    assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
}

#[test]
fn reasons_are_counted_largest_first() {
    assert_eq!(
        tally(["worker_lost", "process_gone", "worker_lost", "no_host"]),
        vec![("worker_lost", 2), ("no_host", 1), ("process_gone", 1)]
    );
    assert!(tally(Vec::<&str>::new()).is_empty());
}

fn quiet_page(now: Instant) -> Page {
    use crate::views::{BrakeView, RegistryViewState};
    Page {
        lang: Default::default(),
        status: StatusView {
            version: "0.0.0-test",
            ds_line: Some("3.2"),
            ds_line_hold: None,
            leader: true,
            leader_election: true,
            registry_view: RegistryViewState {
                valid: true,
                since: now - chrono::TimeDelta::seconds(90),
                reason: None,
                registry: "zookeeper",
                workers: 1,
                masters: 0,
            },
            brake: BrakeView {
                engaged: false,
                since: None,
                why: None,
                reason: None,
                servers: Vec::new(),
            },
            last_sweep: Some(crate::engine::SweepSummary {
                at: now - chrono::TimeDelta::seconds(3),
                result: crate::engine::SweepResult::Ok,
                detail: None,
                kind: "incremental",
                candidates: 12,
                zombies: 0,
                actions: 0,
                workflows: 0,
            }),
            database_error: None,
            started_at: now,
        },
        workers: WorkersView {
            workers: vec![NodeView {
                host: "10.0.0.11:1234".into(),
                address: "10.0.0.11:1234".into(),
                startup_time: Some(now - chrono::TimeDelta::hours(3)),
                report_time: Some(now - chrono::TimeDelta::seconds(4)),
                status: Some("NORMAL".into()),
                groups: vec![],
                agent: Some(None),
            }],
            masters: vec![],
            lost: vec![],
        },
        zombies: vec![],
        zombies_total: 0,
        zombie_reasons: vec![],
        workflows: vec![],
        ghosts: vec![],
        anomalies: vec![],
        recent: vec![],
        history: vec![],
        now,
    }
}

#[test]
fn a_quiet_cluster_reads_all_clear_and_the_charts_say_there_is_no_data() {
    let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let mut p = quiet_page(now);
    let h = render(&p);
    assert!(
        h.contains("All clear: no zombie tasks, no stuck workflows."),
        "{h}"
    );
    assert!(
        h.contains("<meta http-equiv=\"refresh\" content=\"10\">"),
        "{h}"
    );
    assert!(!h.contains("<script") && !h.contains("src="), "{h}");
    assert_eq!(h.matches("<svg").count(), 3, "{h}");
    assert_eq!(h.matches("no sweep in the last 60 min").count(), 3, "{h}");
    assert!(
        h.contains("<h2>Zombie tasks (0)</h2><p class=\"muted\">none</p>"),
        "{h}"
    );
    assert!(
        h.contains("<h2>Stuck workflows (0)</h2><p class=\"muted\">none</p>"),
        "{h}"
    );
    assert!(h.contains("no agent"), "{h}");
    // Sweeps, then an agent gone stale beside its worker: a warning.
    p.history = (0..5)
        .map(|i| SweepPoint {
            at: now - chrono::TimeDelta::seconds(60 * (5 - i)),
            zombies: 0,
            workflows: 0,
            actions: 0,
            duration_ms: 40 + i as u64,
        })
        .collect();
    p.workers.workers[0].agent = Some(Some(crate::views::AgentView {
        fresh: false,
        last_report_at: now - chrono::TimeDelta::seconds(50),
        tasks: 0,
        unreadable: 2,
        blind: Some("worker pid 77 <not visible>".into()),
        gone_at: None,
    }));
    let h = render(&p);
    assert!(
        h.contains(
            "<div class=\"verdict warn\">Attention: 1 stale agent beside a live worker.</div>"
        ),
        "{h}"
    );
    assert!(!h.contains("no sweep in the last"), "{h}");
    assert_eq!(h.matches("<polyline").count(), 4, "{h}");
    assert!(h.contains("<tr class=\"warn\">"), "{h}");
    assert!(h.contains("2 unreadable"), "{h}");
    assert!(
        h.contains("blind: worker pid 77 &lt;not visible&gt;"),
        "{h}"
    );
    assert!(h.contains("last <tspan class=\"lv\">44 ms</tspan>"), "{h}");
}

#[test]
fn the_page_speaks_chinese_when_asked_and_keeps_identifiers() {
    let now = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    let mut p = quiet_page(now);
    p.lang = super::lang::Lang::Zh;
    let h = render(&p);
    assert!(h.contains("<html lang=\"zh-CN\">"), "{h}");
    assert!(
        h.contains("一切正常：没有僵尸任务，没有卡住的工作流。"),
        "{h}"
    );
    assert!(h.contains("僵尸任务"), "{h}");
    assert!(h.contains("最近一次扫描"), "{h}");
    assert!(h.contains("秒前"), "ages in Chinese: {h}");
    assert!(!h.contains("All clear"), "{h}");
    assert!(!h.contains(" ago<"), "{h}");
    // the API's words stay as the API spells them
    assert!(h.contains("zookeeper"), "{h}");
    assert!(h.contains("incremental"), "{h}");
    // and the next render, in English, is English again
    p.lang = super::lang::Lang::En;
    let h = render(&p);
    assert!(h.contains("All clear"), "{h}");
    assert!(!h.contains("僵尸"), "{h}");
}

#[test]
fn a_ghost_shows_its_kind_and_its_note() {
    use reaper_core::ghost::{GhostEvidence, Over};
    let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let mut p = quiet_page(now);
    let ghost = |task_id: i64, over: Over, note: &str| crate::views::GhostView {
        task_id,
        task_name: None,
        workflow_instance_id: Some(9),
        worker: "10.0.0.11:1234".into(),
        pids: vec![100],
        started_at: Some(now),
        row_state: None,
        row_flag: None,
        row_host: None,
        newer_attempt: None,
        reason: reaper_core::ghost::GHOST_PROCESS,
        evidence: GhostEvidence {
            over,
            row_state: None,
            row_flag: None,
            row_host: None,
            row_start_time: None,
            row_end_time: None,
            pids: vec![100],
            started_at: Some(now),
            over_since: now,
            reports_since: 2,
            newer_attempt_id: None,
            newer_attempt_host: None,
            excluded_pids: vec![],
        },
        action: "report",
        note: Some(note.into()),
        remote_apps: vec![],
    };
    p.ghosts = vec![
        ghost(5, Over::NoRow, "row_never_seen"),
        ghost(6, Over::Superseded, "database_mismatch"),
    ];
    let h = render(&p);
    for s in ["no_row", "row_never_seen", "flag_0", "database_mismatch"] {
        assert!(h.contains(s), "{s}: {h}");
    }
}
