use super::*;

fn t(s: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").ok()
}

fn live(wf: i64, id: i64, state: i32, host: &str, end: Option<NaiveDateTime>) -> SumRow {
    SumRow {
        wf,
        item: Ok(SumItem {
            live: Some((
                id,
                LiveTask {
                    state,
                    host: Some(host.into()),
                },
            )),
            end,
        }),
    }
}

fn rows(v: Vec<SumRow>) -> SumRows {
    v.into_iter().collect()
}

/// A summary's live tasks as (id, state, host).
fn tasks_of(s: &Summary) -> Vec<(i64, i32, &str)> {
    s.live
        .iter()
        .map(|(id, t)| (*id, t.state, t.host.as_deref().unwrap_or_default()))
        .collect()
}

fn ended(wf: i64, end: Option<NaiveDateTime>) -> SumRow {
    SumRow {
        wf,
        item: Ok(SumItem { live: None, end }),
    }
}

#[test]
fn the_task_bound_waits_for_three_tops() {
    let mut c = WorkflowCursor::new();
    for (k, top) in [Some(100), Some(150), None, Some(170)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(c.task_bound().is_some(), k >= 3, "sweep {k}");
        c.replace(
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
            Some(10),
            top,
            HashMap::new(),
        );
    }
    // tops 150, None (an empty table), 170: the oldest bounds the read
    assert_eq!(c.task_bound(), Some(150));
    c.replace(
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
        Some(10),
        Some(180),
        HashMap::new(),
    );
    assert_eq!(c.task_bound(), Some(0), "an empty table bounds nothing out");
}

#[test]
fn summaries_keep_the_newest_end_and_only_the_live_rows_read() {
    let mut c = WorkflowCursor::new();
    let (s, bad) = summarise(
        &[1, 2],
        rows(vec![
            live(1, 10, 1, "w1:1234", None),
            live(1, 11, 17, "w2:1234", None),
            ended(1, t("2024-01-01 00:00:05")),
            ended(2, t("2024-01-01 00:00:09")),
            // a row of a workflow not tracked
            ended(3, t("2030-01-01 00:00:00")),
        ]),
        None,
    );
    assert!(bad.is_empty());
    assert_eq!(s[&1].live.len(), 2);
    assert_eq!(s[&1].last_end, t("2024-01-01 00:00:05"));
    assert!(!s.contains_key(&3));
    c.replace(
        [1, 2].into(),
        BTreeSet::new(),
        BTreeSet::new(),
        Some(5),
        Some(20),
        s,
    );
    // next sweep, bound 10: task 10 is read again by id, 11 with the rows above
    assert_eq!(c.live_tasks_at_or_below(10), vec![10]);
    assert_eq!(c.live_tasks_at_or_below(11), vec![10, 11]);
    // task 11 ended earlier than the workflow's newest end; workflow 2's
    // rows above the bound are older than what the cursor knows
    let (s, bad) = summarise(
        &[1, 2],
        rows(vec![
            live(1, 10, 1, "w1:1234", None),
            ended(1, t("2024-01-01 00:00:01")),
            ended(2, t("2023-01-01 00:00:00")),
        ]),
        Some(&c),
    );
    assert!(bad.is_empty());
    assert_eq!(
        s[&1].live.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![10]
    );
    assert_eq!(
        s[&1].last_end,
        t("2024-01-01 00:00:05"),
        "only moves forward"
    );
    assert_eq!(s[&2].last_end, t("2024-01-01 00:00:09"));
}

#[test]
fn live_tasks_in_any_order_and_repeated_keep_the_last_row_read() {
    // the reads of a sweep run at once: a workflow's rows come in any
    // order, and a task read twice (with its workflow's rows and by id)
    // is what its last row says
    let (s, bad) = summarise(
        &[1],
        rows(vec![
            live(1, 30, 1, "w3:1234", None),
            live(1, 10, 0, "w1:1234", None),
            live(1, 20, 1, "w2:1234", None),
            live(1, 10, 1, "w9:1234", None),
        ]),
        None,
    );
    assert!(bad.is_empty());
    let live = tasks_of(&s[&1]);
    assert_eq!(
        live,
        vec![(10, 1, "w9:1234"), (20, 1, "w2:1234"), (30, 1, "w3:1234")]
    );
}

#[test]
fn an_undecodable_row_leaves_its_workflow_without_summary() {
    let (s, bad) = summarise(
        &[1, 2],
        rows(vec![
            live(1, 10, 1, "w1:1234", None),
            SumRow {
                wf: 1,
                item: Err(SumError {
                    task: None,
                    error: "bad date".into(),
                }),
            },
            ended(2, None),
        ]),
        None,
    );
    assert!(!s.contains_key(&1));
    assert!(s.contains_key(&2));
    assert_eq!(bad.len(), 1);
    assert!(bad[0].1.contains("bad date"), "{bad:?}");
}

#[test]
fn candidates_count_states_and_keep_live_hosts_of_task_states() {
    let s = Summary {
        live: [
            (
                10,
                LiveTask {
                    state: 1,
                    host: Some("w1:1234".into()),
                },
            ),
            (
                11,
                LiveTask {
                    state: 1,
                    host: Some("w1:1234".into()),
                },
            ),
            (
                12,
                LiveTask {
                    state: 0,
                    host: Some("w2:1234".into()),
                },
            ),
            (
                13,
                LiveTask {
                    state: 17,
                    host: Some("NULL".into()),
                },
            ),
        ]
        .into(),
        last_end: t("2024-01-01 00:00:05"),
    };
    let c = candidate(
        WorkflowCandidate::new(7, 1, Some("m:5678")),
        &s,
        &[1, 17],
        "UTC".parse::<Zone>().unwrap(),
    );
    assert_eq!(c.tasks_by_state, [(0, 1), (1, 2), (17, 1)].into());
    assert_eq!(c.live_task_hosts, vec!["w1:1234".to_string()]);
    assert_eq!(
        c.last_task_end.map(|t| t.to_rfc3339()),
        Some("2024-01-01T00:00:05+00:00".into())
    );
}

#[test]
fn tracked_states_add_the_candidates_to_the_non_terminal_ones() {
    assert_eq!(
        tracked_states(DsLine::V3_3, &[1, 2, 4]),
        vec![0, 1, 2, 4, 14, 17, 18]
    );
    assert_eq!(
        tracked_states(DsLine::V1_3, &[1, 3]),
        vec![0, 1, 2, 3, 4, 10, 11]
    );
}

#[test]
fn reads_appended_keep_the_later_reads_row_of_a_task_and_the_newest_end() {
    // the incremental sweep appends its by-id read after the rows above the
    // bound: a task in both is what the by-id read says
    let mut a = rows(vec![
        live(1, 10, 0, "w1:1234", t("2024-01-01 00:00:03")),
        ended(1, t("2024-01-01 00:00:09")),
    ]);
    a.append(rows(vec![
        live(1, 10, 1, "w2:1234", None),
        ended(1, t("2024-01-01 00:00:04")),
    ]));
    let (s, bad) = summarise(&[1], a, None);
    assert!(bad.is_empty());
    let live = tasks_of(&s[&1]);
    assert_eq!(live, vec![(10, 1, "w2:1234")]);
    assert_eq!(s[&1].last_end, t("2024-01-01 00:00:09"));
}
