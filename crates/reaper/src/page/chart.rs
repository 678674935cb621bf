//! Small server-rendered SVG line charts for the status page: the last hour
//! of one or two per-sweep series, with a y axis from 0 to a round maximum,
//! a time axis ending at "now", and each series' last value. No script, no
//! external asset: the SVG is inline in the page.

use super::format::{esc, exact};
use reaper_core::Instant;
use std::fmt::Write;

/// The SVG's user-space size and the plot box inside it.
pub const WIDTH: f64 = 360.0;
pub const HEIGHT: f64 = 150.0;
pub const LEFT: f64 = 46.0;
pub const RIGHT: f64 = WIDTH - 12.0;
pub const TOP: f64 = 26.0;
pub const BOTTOM: f64 = HEIGHT - 22.0;

/// One line of a chart.
pub struct Series<'a> {
    pub label: &'a str,
    /// A CSS colour.
    pub color: &'a str,
    /// (time, value), oldest first.
    pub points: Vec<(Instant, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub series: Vec<Series<'a>>,
    /// Formats a value for the axis and the last-value label.
    pub fmt: fn(f64) -> String,
    pub now: Instant,
    /// The time span the x axis covers, ending at `now`.
    pub window: chrono::TimeDelta,
}

/// A count: "3".
pub fn count(v: f64) -> String {
    format!("{}", v.round() as i64)
}

/// Milliseconds: "850 ms", "1.5 s", "12 s".
pub fn millis(v: f64) -> String {
    if v < 1000.0 {
        format!("{} ms", v.round() as i64)
    } else if v < 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{} s", (v / 1000.0).round() as i64)
    }
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `v` (at least 1): the top of
/// the y axis.
pub fn nice_max(v: f64) -> f64 {
    if v.is_nan() || v <= 1.0 {
        return 1.0;
    }
    let mut step = 10f64.powi(v.log10().floor() as i32);
    loop {
        for m in [1.0, 2.0, 5.0] {
            if m * step >= v {
                return m * step;
            }
        }
        step *= 10.0;
    }
}

impl Chart<'_> {
    fn start(&self) -> Instant {
        self.now - self.window
    }

    fn x(&self, t: Instant) -> f64 {
        let span = self.window.num_milliseconds().max(1) as f64;
        let off = (t - self.start()).num_milliseconds() as f64;
        LEFT + (off / span).clamp(0.0, 1.0) * (RIGHT - LEFT)
    }

    fn y(v: f64, max: f64) -> f64 {
        BOTTOM - (v / max).clamp(0.0, 1.0) * (BOTTOM - TOP)
    }

    /// The series' points inside the window, at most one per pixel column
    /// (the column's largest value, so that a spike is never averaged away),
    /// with the last point's value kept as the series' last value.
    fn plotted(&self, s: &Series) -> Vec<(f64, f64)> {
        let start = self.start();
        let mut out: Vec<(i64, f64, f64)> = Vec::new();
        for &(t, v) in s.points.iter().filter(|(t, _)| *t >= start) {
            let x = self.x(t);
            let col = x.floor() as i64;
            match out.last_mut() {
                Some((c, lx, lv)) if *c == col => {
                    *lx = x;
                    *lv = lv.max(v);
                }
                _ => out.push((col, x, v)),
            }
        }
        out.into_iter().map(|(_, x, v)| (x, v)).collect()
    }

    pub fn render(&self) -> String {
        let start = self.start();
        let plotted: Vec<Vec<(f64, f64)>> = self.series.iter().map(|s| self.plotted(s)).collect();
        let last: Vec<Option<(Instant, f64)>> = self
            .series
            .iter()
            .map(|s| s.points.iter().rev().find(|(t, _)| *t >= start).copied())
            .collect();
        let max = nice_max(
            plotted
                .iter()
                .flatten()
                .map(|&(_, v)| v)
                .fold(0.0, f64::max),
        );
        let f = self.fmt;
        let mut h = String::new();
        let _ = write!(
            h,
            "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
             aria-label=\"{t}, last {m} min\" xmlns=\"http://www.w3.org/2000/svg\">\
             <title>{t}, last {m} min</title>",
            t = esc(self.title),
            m = self.window.num_minutes()
        );
        // The title, and each series' last value at the top right.
        let _ = write!(
            h,
            "<text class=\"ct\" x=\"{LEFT}\" y=\"15\">{}</text>\
             <text class=\"last\" x=\"{RIGHT}\" y=\"15\" text-anchor=\"end\">",
            esc(self.title)
        );
        for (i, (s, l)) in self.series.iter().zip(&last).enumerate() {
            let value = l.map_or_else(|| "-".to_string(), |(_, v)| f(v));
            let label = if self.series.len() == 1 {
                super::lang::tr("last").to_string()
            } else {
                esc(s.label)
            };
            let _ = write!(
                h,
                "{}<tspan fill=\"{}\">■</tspan> {label} <tspan class=\"lv\">{}</tspan>",
                if i > 0 { "  " } else { "" },
                esc(s.color),
                esc(&value)
            );
        }
        h.push_str("</text>");
        // The part of the hour before the first sweep has no data (a daemon
        // started recently): shaded, so that it does not read as zeros.
        let first = self
            .series
            .iter()
            .filter_map(|s| s.points.iter().find(|(t, _)| *t >= start).map(|p| p.0))
            .min();
        let no_data_to = first.map_or(RIGHT, |t| self.x(t));
        if no_data_to - LEFT > 1.0 {
            let _ = write!(
                h,
                "<rect class=\"nodata\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{}\">\
                 <title>{}</title></rect>",
                no_data_to - LEFT,
                BOTTOM - TOP,
                match first {
                    Some(t) => format!("no sweep recorded before {}", exact(t)),
                    None => "no sweep recorded".into(),
                }
            );
        }
        // Axes: gridlines at 0 and at the top, labelled; time at the bottom.
        let mid = (LEFT + RIGHT) / 2.0;
        let half = self.window.num_minutes() / 2;
        let _ = write!(
            h,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{RIGHT}\" y2=\"{TOP}\"/>\
             <line class=\"axis\" x1=\"{LEFT}\" y1=\"{BOTTOM}\" x2=\"{RIGHT}\" y2=\"{BOTTOM}\"/>\
             <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{BOTTOM}\"/>\
             <text class=\"yl\" x=\"{yl}\" y=\"{yt}\" text-anchor=\"end\">{top}</text>\
             <text class=\"yl\" x=\"{yl}\" y=\"{yb}\" text-anchor=\"end\">{zero}</text>\
             <text class=\"xl\" x=\"{LEFT}\" y=\"{xy}\" text-anchor=\"start\">-{m} min</text>\
             <text class=\"xl\" x=\"{mid}\" y=\"{xy}\" text-anchor=\"middle\">-{half} min</text>\
             <text class=\"xl\" x=\"{RIGHT}\" y=\"{xy}\" text-anchor=\"end\">now</text>",
            yl = LEFT - 4.0,
            yt = TOP + 4.0,
            yb = BOTTOM,
            top = esc(&f(max)),
            zero = esc(&f(0.0)),
            xy = HEIGHT - 6.0,
            m = self.window.num_minutes(),
        );
        if plotted.iter().all(Vec::is_empty) {
            let _ = write!(
                h,
                "<text class=\"empty\" x=\"{mid}\" y=\"{}\" text-anchor=\"middle\">\
                 no sweep in the last {} min</text></svg>",
                (TOP + BOTTOM) / 2.0 + 4.0,
                self.window.num_minutes()
            );
            return h;
        }
        for ((s, pts), l) in self.series.iter().zip(&plotted).zip(&last) {
            if pts.len() >= 2 {
                let _ = write!(
                    h,
                    "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" points=\"",
                    esc(s.color)
                );
                for (i, &(x, v)) in pts.iter().enumerate() {
                    let _ = write!(
                        h,
                        "{}{x:.1},{:.1}",
                        if i > 0 { " " } else { "" },
                        Self::y(v, max)
                    );
                }
                h.push_str("\"/>");
            }
            // The latest point, marked, with its exact time on hover.
            if let Some((t, v)) = l {
                let _ = write!(
                    h,
                    "<circle class=\"dot\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\">\
                     <title>{}: {} at {}</title></circle>",
                    self.x(*t),
                    Self::y(*v, max),
                    esc(s.color),
                    esc(s.label),
                    esc(&f(*v)),
                    exact(*t)
                );
            }
        }
        h.push_str("</svg>");
        h
    }
}

#[cfg(test)]
mod tests {
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
}
