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
/// The middle of the x axis.
const MID: f64 = (LEFT + RIGHT) / 2.0;

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
        let mut h = String::new();
        self.head(&mut h, &last);
        self.no_data(&mut h);
        self.axes(&mut h, max);
        if plotted.iter().all(Vec::is_empty) {
            let _ = write!(
                h,
                "<text class=\"empty\" x=\"{MID}\" y=\"{}\" text-anchor=\"middle\">\
                 no sweep in the last {} min</text></svg>",
                (TOP + BOTTOM) / 2.0 + 4.0,
                self.window.num_minutes()
            );
            return h;
        }
        for ((s, pts), l) in self.series.iter().zip(&plotted).zip(&last) {
            Self::line(&mut h, s, pts, max);
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
                    esc(&(self.fmt)(*v)),
                    exact(*t)
                );
            }
        }
        h.push_str("</svg>");
        h
    }

    /// The SVG's start, the title, and each series' last value at the top
    /// right.
    fn head(&self, h: &mut String, last: &[Option<(Instant, f64)>]) {
        let _ = write!(
            h,
            "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
             aria-label=\"{t}, last {m} min\" xmlns=\"http://www.w3.org/2000/svg\">\
             <title>{t}, last {m} min</title>",
            t = esc(self.title),
            m = self.window.num_minutes()
        );
        let _ = write!(
            h,
            "<text class=\"ct\" x=\"{LEFT}\" y=\"15\">{}</text>\
             <text class=\"last\" x=\"{RIGHT}\" y=\"15\" text-anchor=\"end\">",
            esc(self.title)
        );
        for (i, (s, l)) in self.series.iter().zip(last).enumerate() {
            let value = l.map_or_else(|| "-".to_string(), |(_, v)| (self.fmt)(v));
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
    }

    /// The part of the hour before the first sweep has no data (a daemon
    /// started recently): shaded, so that it does not read as zeros.
    fn no_data(&self, h: &mut String) {
        let start = self.start();
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
    }

    /// Axes: gridlines at 0 and at the top, labelled; time at the bottom.
    fn axes(&self, h: &mut String, max: f64) {
        let f = self.fmt;
        let half = self.window.num_minutes() / 2;
        let _ = write!(
            h,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{RIGHT}\" y2=\"{TOP}\"/>\
             <line class=\"axis\" x1=\"{LEFT}\" y1=\"{BOTTOM}\" x2=\"{RIGHT}\" y2=\"{BOTTOM}\"/>\
             <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{BOTTOM}\"/>\
             <text class=\"yl\" x=\"{yl}\" y=\"{yt}\" text-anchor=\"end\">{top}</text>\
             <text class=\"yl\" x=\"{yl}\" y=\"{yb}\" text-anchor=\"end\">{zero}</text>\
             <text class=\"xl\" x=\"{LEFT}\" y=\"{xy}\" text-anchor=\"start\">-{m} min</text>\
             <text class=\"xl\" x=\"{MID}\" y=\"{xy}\" text-anchor=\"middle\">-{half} min</text>\
             <text class=\"xl\" x=\"{RIGHT}\" y=\"{xy}\" text-anchor=\"end\">now</text>",
            yl = LEFT - 4.0,
            yt = TOP + 4.0,
            yb = BOTTOM,
            top = esc(&f(max)),
            zero = esc(&f(0.0)),
            xy = HEIGHT - 6.0,
            m = self.window.num_minutes(),
        );
    }

    /// A series' plotted points as one polyline, when there are two or more.
    fn line(h: &mut String, s: &Series, pts: &[(f64, f64)], max: f64) {
        if pts.len() < 2 {
            return;
        }
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
}

#[cfg(test)]
mod tests;
