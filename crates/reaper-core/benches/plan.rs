//! `plan` over 100,000 candidates and 2,000 workers (target: under 20 ms).

use chrono::TimeZone;
use criterion::{criterion_group, criterion_main, Criterion};
use reaper_core::*;
use std::hint::black_box;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn setup() -> (RegistryView, Vec<Candidate>, Policy) {
    let mut v = RegistryView::invalid(t(0), "bench");
    v.state = ViewState::Valid { since: t(0) };
    for i in 0..2_000 {
        let mut n = NodeInfo::new(&format!("10.1.{}.{}:1234", i / 256, i % 256), t(0));
        n.startup_time = Some(t(0));
        n.report_time = Some(t(990));
        v.upsert(NodeKind::Worker, n);
    }
    for i in 0..20 {
        v.lost_workers.insert(format!("10.9.0.{i}:1234"), t(100));
    }
    v.upsert(NodeKind::Master, NodeInfo::new("10.0.0.1:5678", t(0)));
    let candidates = (0..100_000)
        .map(|i| {
            // 1 in 1000 on a lost worker, the rest spread over live workers
            let host = if i % 1000 == 7 {
                format!("10.9.0.{}:1234", i % 20)
            } else {
                let w = i % 2_000;
                format!("10.1.{}.{}:1234", w / 256, w % 256)
            };
            let mut c = Candidate::new(
                i,
                if i % 50 == 0 { "DEPENDENT" } else { "SHELL" },
                1,
                Some(&host),
            );
            if i % 50 == 0 {
                c.host = Some("10.0.0.1:5678".into());
            }
            c.submit_time = Some(t(10));
            c.workflow_instance_id = Some(i / 10);
            c.workflow_host = Some("10.0.0.1:5678".into());
            c
        })
        .collect();
    let mut p = Policy::defaults(DsLine::V3_2);
    p.worker_lost = Action::Fail;
    (v, candidates, p)
}

fn bench(c: &mut Criterion) {
    let (v, cands, p) = setup();
    let pl = plan(&v, &cands, t(1000), &p, &SafetyState::default());
    println!(
        "plan: {} candidates, {} workers -> {} zombies, {} actions (target: < 20 ms per plan)",
        cands.len(),
        v.workers.len(),
        pl.zombies.len(),
        pl.action_count()
    );
    c.bench_function("plan 100k candidates x 2k workers", |b| {
        b.iter(|| {
            black_box(plan(
                black_box(&v),
                black_box(&cands),
                t(1000),
                &p,
                &SafetyState::default(),
            ))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
