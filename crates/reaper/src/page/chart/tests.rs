use super::*;
use chrono::{TimeDelta, TimeZone};

fn now() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

fn chart(points: Vec<(Instant, f64)>) -> String {
    Chart {
        title: "Zombies found",
        series: vec![Series {
            label: "tasks",
            color: "#c00",
            points,
        }],
        fmt: count,
        now: now(),
        window: TimeDelta::hours(1),
    }
    .render()
}

/// The (x, y) pairs of every polyline of an SVG.
fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
    svg.split("<polyline")
        .skip(1)
        .map(|p| {
            let pts = p
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            pts.split(' ')
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

fn attr(svg: &str, el: &str, name: &str) -> Vec<f64> {
    svg.split(&format!("<{el} "))
        .skip(1)
        .map(|p| {
            p.split(&format!(" {name}=\""))
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

fn in_box(x: f64, y: f64) -> bool {
    (LEFT..=RIGHT).contains(&x) && (TOP..=BOTTOM).contains(&y)
}

#[test]
fn round_axis_maxima() {
    assert_eq!(nice_max(0.0), 1.0);
    assert_eq!(nice_max(1.0), 1.0);
    assert_eq!(nice_max(3.0), 5.0);
    assert_eq!(nice_max(7.0), 10.0);
    assert_eq!(nice_max(10.0), 10.0);
    assert_eq!(nice_max(11.0), 20.0);
    assert_eq!(nice_max(480.0), 500.0);
    assert_eq!(nice_max(501.0), 1000.0);
    assert_eq!(nice_max(f64::NAN), 1.0);
    assert_eq!(millis(850.0), "850 ms");
    assert_eq!(millis(1500.0), "1.5 s");
    assert_eq!(millis(20_000.0), "20 s");
}

#[test]
fn empty_history_says_so_and_draws_no_line() {
    let svg = chart(vec![]);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
    assert!(svg.contains("no sweep in the last 60 min"), "{svg}");
    assert!(
        !svg.contains("<polyline") && !svg.contains("<circle"),
        "{svg}"
    );
    // The axes are still there, and the last value is unknown.
    assert!(svg.contains(">-60 min<") && svg.contains(">now<"), "{svg}");
    assert!(svg.contains(">0<") && svg.contains(">1<"), "{svg}");
    assert!(svg.contains("last <tspan class=\"lv\">-</tspan>"), "{svg}");
    // The whole box is without data.
    assert_eq!(attr(&svg, "rect", "width"), vec![RIGHT - LEFT], "{svg}");
    // Points older than the window count as no history.
    let old = chart(vec![(now() - TimeDelta::hours(2), 5.0)]);
    assert!(old.contains("no sweep in the last 60 min"), "{old}");
}

#[test]
fn one_point_is_a_dot_at_now() {
    let svg = chart(vec![(now(), 3.0)]);
    assert!(!svg.contains("<polyline"), "{svg}");
    let (cx, cy) = (attr(&svg, "circle", "cx"), attr(&svg, "circle", "cy"));
    assert_eq!((cx.len(), cy.len()), (1, 1), "{svg}");
    assert_eq!(cx[0], RIGHT);
    // 3 on an axis topped at 5: three fifths of the way up.
    assert!(
        (cy[0] - (BOTTOM - 0.6 * (BOTTOM - TOP))).abs() < 0.1,
        "{svg}"
    );
    assert!(svg.contains(">5<"), "axis top label: {svg}");
    assert!(svg.contains("last <tspan class=\"lv\">3</tspan>"), "{svg}");
    assert!(
        svg.contains("<title>tasks: 3 at 2023-11-14T22:13:20Z</title>"),
        "{svg}"
    );
    // Everything before it is shaded as without data.
    assert_eq!(attr(&svg, "rect", "width"), vec![RIGHT - LEFT], "{svg}");
    assert!(
        svg.contains("no sweep recorded before 2023-11-14T22:13:20Z"),
        "{svg}"
    );
    // Half an hour of history: the first half of the box is shaded.
    let half = chart(vec![(now() - TimeDelta::minutes(30), 1.0), (now(), 1.0)]);
    let w = attr(&half, "rect", "width");
    assert!(
        w.len() == 1 && (w[0] - (RIGHT - LEFT) / 2.0).abs() < 0.1,
        "{half}"
    );
}

#[test]
fn many_points_are_scaled_into_the_box() {
    // One sweep a second for the last hour and ten minutes before it:
    // a ramp 0..=19 repeating, with one spike of 40 ten minutes ago.
    let pts: Vec<(Instant, f64)> = (0..4200)
        .map(|i| {
            let t = now() - TimeDelta::seconds(4199 - i);
            let v = if i == 3600 { 40.0 } else { (i % 20) as f64 };
            (t, v)
        })
        .collect();
    let svg = chart(pts);
    let lines = polylines(&svg);
    assert_eq!(lines.len(), 1, "{svg}");
    let line = &lines[0];
    // At most one point per pixel column, all inside the plot box,
    // left to right.
    assert!(
        line.len() >= 100 && line.len() <= (RIGHT - LEFT) as usize + 2,
        "{}",
        line.len()
    );
    assert!(line.iter().all(|&(x, y)| in_box(x, y)), "{line:?}");
    assert!(line.windows(2).all(|w| w[0].0 < w[1].0), "{line:?}");
    // The spike is the axis top (nice_max(40) = 50): nothing is above the
    // box, the spike is the highest point, and the ramp stays below it.
    assert!(svg.contains(">50<"), "{svg}");
    let top = line.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    assert!(
        (top - (BOTTOM - 0.8 * (BOTTOM - TOP))).abs() < 0.1,
        "top {top}"
    );
    // The first point is at the window's start, the last at now.
    assert!((line[0].0 - LEFT).abs() < 1.0, "{:?}", line[0]);
    assert_eq!(line.last().unwrap().0, RIGHT);
    // The last value is the last sweep's (4199 % 20 = 19).
    assert!(svg.contains("last <tspan class=\"lv\">19</tspan>"), "{svg}");
    // History over the whole hour: nothing is shaded.
    assert!(!svg.contains("<rect"), "{svg}");
}

#[test]
fn two_series_share_one_scale_and_show_both_last_values() {
    let t = |s: i64| now() - TimeDelta::seconds(s);
    let svg = Chart {
        title: "Zombies found",
        series: vec![
            Series {
                label: "tasks",
                color: "#c00",
                points: vec![(t(1800), 0.0), (t(60), 2.0)],
            },
            Series {
                label: "workflows",
                color: "#e80",
                points: vec![(t(1800), 10.0), (t(60), 1.0)],
            },
        ],
        fmt: count,
        now: now(),
        window: TimeDelta::hours(1),
    }
    .render();
    let lines = polylines(&svg);
    assert_eq!(lines.len(), 2, "{svg}");
    // Half an hour ago is the middle of the x axis; 10 is the top.
    let mid = (LEFT + RIGHT) / 2.0;
    assert!(
        (lines[1][0].0 - mid).abs() < 0.1 && lines[1][0].1 == TOP,
        "{lines:?}"
    );
    assert_eq!(lines[0][0].1, BOTTOM);
    assert!(svg.contains("tasks <tspan class=\"lv\">2</tspan>"), "{svg}");
    assert!(
        svg.contains("workflows <tspan class=\"lv\">1</tspan>"),
        "{svg}"
    );
    assert_eq!(attr(&svg, "circle", "cx").len(), 2);
}

#[test]
fn durations_label_the_axis_in_time_units() {
    let svg = Chart {
        title: "Sweep duration",
        series: vec![Series {
            label: "duration",
            color: "#06c",
            points: vec![(now() - TimeDelta::seconds(30), 120.0), (now(), 1300.0)],
        }],
        fmt: millis,
        now: now(),
        window: TimeDelta::hours(1),
    }
    .render();
    assert!(svg.contains(">2.0 s<"), "axis top: {svg}");
    assert!(svg.contains(">0 ms<"), "{svg}");
    assert!(
        svg.contains("last <tspan class=\"lv\">1.3 s</tspan>"),
        "{svg}"
    );
}
