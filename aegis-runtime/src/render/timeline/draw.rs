//! The page: HTML around one inline SVG, drawn from the model.
//!
//! Every `write!` goes to a `String`, which cannot fail: its results are
//! ignored.

use std::fmt::Write;

use super::facts::Hop;
use super::layout::{AXIS_H, BAR_H, LABEL_W, Layout, ROW_H, Row};
use super::marks::{Attempt, Lane, Mark, Outcome, Placed, Rule, RuleKind};
use super::model::Model;
use crate::render::html::{clip, esc, ms, px};
use crate::waypoint::HandlerKind;

/// The stylesheet, inlined: the page fetches nothing.
const STYLE: &str = include_str!("timeline.css");

/// The whole page: a heading, a summary line, the legend and the SVG.
pub(super) fn page(title: &str, model: &Model) -> String {
    let svg = svg(title, model, &Layout::new(model.end, model.lanes.len()));
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p class=\"summary\">{} · {} supersteps · {} attempts · {} lanes · {}{}</p>\n{}\n{svg}\n</body>\n</html>\n",
        esc(model.status),
        model.supersteps,
        model.attempts,
        model.lanes.len(),
        ms(model.end),
        model
            .spend
            .map(|s| format!(" · spent {}", esc(&s.to_string())))
            .unwrap_or_default(),
        legend(),
        t = esc(title)
    );
    html
}

/// What each colour and shape means.
fn legend() -> String {
    let items = [
        ("succeeded", "attempt succeeded"),
        ("failed-transient", "failed, transient"),
        ("failed-permanent", "failed, permanent"),
        ("failed-unknown", "failed, unknown"),
        ("timeout", "timed out"),
        ("skipped", "skipped"),
        ("cache-hit", "cache hit"),
        ("backoff", "backoff wait"),
        ("hop", "fallback hop"),
        ("handled", "handled failure"),
        ("parley", "parley (awaiting input)"),
    ];
    let mut out = String::from("<div class=\"legend\">");
    for (class, words) in items {
        let _ = write!(out, "<span><i class=\"{class}\"></i>{words}</span>");
    }
    out.push_str("</div>");
    out
}

/// The SVG, back to front: lanes, axis, rules, notes, then the marks.
fn svg(title: &str, model: &Model, layout: &Layout) -> String {
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{t}\">",
        w = px(layout.width()),
        h = px(layout.height()),
        t = esc(title)
    );
    for (i, lane) in model.lanes.iter().enumerate() {
        lane_label(&mut svg, lane, i, layout);
    }
    axis(&mut svg, layout);
    rules(&mut svg, &model.rules, layout);
    notes(&mut svg, model, layout);
    for (i, lane) in model.lanes.iter().enumerate() {
        lane_marks(&mut svg, lane, layout.row(i), layout);
    }
    svg.push_str("</svg>");
    svg
}

/// A lane's background (every other one shaded) and its label.
fn lane_label(svg: &mut String, lane: &Lane, i: usize, layout: &Layout) {
    let top = layout.row(i).top;
    if i.is_multiple_of(2) {
        let _ = write!(
            svg,
            "<rect class=\"lane-bg\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
            px(top),
            px(layout.width()),
            px(ROW_H)
        );
    }
    let _ = write!(
        svg,
        "<g class=\"lane\" data-node=\"{}\"{}><title>{}</title>",
        esc(lane.node.as_str()),
        lane.task
            .as_ref()
            .map(|t| format!(" data-task=\"{}\"", esc(t)))
            .unwrap_or_default(),
        esc(&lane.name())
    );
    let baseline = px(top + ROW_H / 2.0 + 4.0);
    match &lane.task {
        Some(task) => {
            let _ = write!(
                svg,
                "<text class=\"lane-label\" x=\"8\" y=\"{baseline}\">{}<tspan class=\"lane-task\"> [{}]</tspan></text>",
                esc(&clip(lane.node.as_str(), 16)),
                esc(&clip(task, 12))
            );
        }
        None => {
            let _ = write!(
                svg,
                "<text class=\"lane-label\" x=\"8\" y=\"{baseline}\">{}</text>",
                esc(&clip(lane.node.as_str(), 30))
            );
        }
    }
    svg.push_str("</g>");
}

/// The time axis: a line and a time at each tick.
fn axis(svg: &mut String, layout: &Layout) {
    svg.push_str("<g class=\"axis\">");
    for t in layout.ticks() {
        let _ = write!(
            svg,
            "<line x1=\"{tx}\" y1=\"{}\" x2=\"{tx}\" y2=\"{}\"/><text x=\"{tx}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(AXIS_H - 6.0),
            px(layout.lanes_bottom()),
            px(AXIS_H - 12.0),
            ms(t),
            tx = px(layout.x(t))
        );
    }
    svg.push_str("</g>");
}

/// Superstep barriers, halts, failures. A barrier's number is left out
/// where it would overprint the previous one (its line and hover stay).
fn rules(svg: &mut String, rules: &[Rule], layout: &Layout) {
    let bottom = layout.lanes_bottom();
    let mut last_label_x = f64::NEG_INFINITY;
    for rule in rules {
        let x = layout.x(rule.at);
        let (class, label_y) = match rule.kind {
            RuleKind::Barrier(_) => ("superstep", bottom + 12.0),
            RuleKind::Halted(_) => ("halted", bottom + 24.0),
            RuleKind::Failed(_) => ("failed", bottom + 24.0),
        };
        let anchor = if layout.near_right(x) {
            "end"
        } else {
            "middle"
        };
        let text = rule_text(&rule.kind);
        let shown = match rule.kind {
            RuleKind::Barrier(_) if x - last_label_x < 14.0 => String::new(),
            RuleKind::Barrier(superstep) => {
                last_label_x = x;
                superstep.to_string()
            }
            _ => clip(&text, 60),
        };
        let _ = write!(
            svg,
            "<g class=\"rule {class}\"><title>{} at {}</title><line x1=\"{rx}\" y1=\"{}\" x2=\"{rx}\" y2=\"{}\"/><text x=\"{rx}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text></g>",
            esc(&text),
            ms(rule.at),
            px(AXIS_H - 6.0),
            px(bottom + 2.0),
            px(label_y),
            esc(&shown),
            rx = px(x)
        );
    }
}

/// A rule's hover (and a halt's or failure's label).
fn rule_text(kind: &RuleKind) -> String {
    match kind {
        RuleKind::Barrier(superstep) => format!("superstep {superstep} barrier"),
        RuleKind::Halted(reason) => format!("halted: {reason}"),
        RuleKind::Failed(error) => format!("run failed: {error}"),
    }
}

/// What the barriers' numbers are, or that nothing ran.
fn notes(svg: &mut String, model: &Model, layout: &Layout) {
    if model
        .rules
        .iter()
        .any(|r| matches!(r.kind, RuleKind::Barrier(_)))
    {
        let _ = write!(
            svg,
            "<text class=\"axis-note\" x=\"8\" y=\"{}\">superstep ends</text>",
            px(layout.lanes_bottom() + 12.0)
        );
    }
    if model.lanes.is_empty() {
        let _ = write!(
            svg,
            "<text class=\"empty\" x=\"{}\" y=\"{}\">nothing ran in this thread</text>",
            px(LABEL_W),
            px(AXIS_H + ROW_H / 2.0 + 4.0)
        );
    }
}

/// Where a mark goes on its lane, and whose it is.
struct Spot<'a> {
    lane: &'a Lane,
    /// The lane's name, for hovers.
    who: &'a str,
    row: Row,
    x0: f64,
    w: f64,
    /// How long the mark lasted, in words.
    took: String,
}

/// A lane's marks: parleys under everything else.
fn lane_marks(svg: &mut String, lane: &Lane, row: Row, layout: &Layout) {
    let who = lane.name();
    let mut ordered: Vec<&Placed> = lane.marks.iter().collect();
    ordered.sort_by_key(|m| !matches!(m.mark, Mark::Parley { .. }));
    for m in ordered {
        let (x0, w) = layout.extent(m.start, m.end);
        let spot = Spot {
            lane,
            who: &who,
            row,
            x0,
            w,
            took: ms(m.end - m.start),
        };
        match &m.mark {
            Mark::Attempt(attempt) => {
                attempt_bar(svg, &spot, attempt);
                hop_diamonds(svg, &spot, attempt.attempt, &attempt.hops);
            }
            Mark::Backoff { before_attempt } => backoff(svg, &spot, *before_attempt),
            Mark::CacheHit => cache_hit(svg, &spot),
            Mark::Handled { handler } => handled(svg, &spot, handler),
            Mark::Parley { prompt, answered } => parley(svg, &spot, prompt, *answered),
        }
    }
}

/// An attempt's hover: who, which attempt, how it ended and after how
/// long; then its notes on one line, its effects a line each, its wait and
/// its hops.
fn attempt_tip(spot: &Spot<'_>, a: &Attempt) -> String {
    let mut tip = format!(
        "{} — attempt {}: {} after {}",
        spot.who,
        a.attempt,
        a.outcome.words(),
        spot.took
    );
    for (i, note) in a.notes.iter().enumerate() {
        let _ = write!(tip, "{}{note}", if i == 0 { "\n" } else { "; " });
    }
    for e in &a.effects {
        let _ = write!(tip, "\neffect {} {}: {}", e.name, e.key, e.outcome.name());
    }
    if a.includes_wait {
        tip.push_str("\n(the bar includes the backoff wait before this attempt)");
    }
    for hop in &a.hops {
        let _ = write!(tip, "\nfallback hop: {} → {}", hop.from, hop.to);
    }
    tip
}

/// An attempt's bar, classed by its outcome, with as many of its words as
/// fit on it: `#2 · run timeout`, `#1 · primary → backup`, or just `#2`.
fn attempt_bar(svg: &mut String, spot: &Spot<'_>, a: &Attempt) {
    let _ = write!(
        svg,
        "<g class=\"bar attempt {}\" data-node=\"{}\" data-attempt=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/>",
        a.outcome.class(),
        esc(spot.lane.node.as_str()),
        a.attempt,
        esc(&attempt_tip(spot, a)),
        px(spot.x0),
        px(spot.row.bar_y),
        px(spot.w),
        px(BAR_H)
    );
    let mut words = vec![format!("#{}", a.attempt)];
    if let Outcome::Timeout(bound) = a.outcome {
        words.push(bound.to_string());
    }
    for hop in &a.hops {
        words.push(format!("{} → {}", hop.from, hop.to));
    }
    let text = fitting(words, spot.w);
    if !text.is_empty() {
        let indent = if a.hops.is_empty() { 5.0 } else { 8.0 };
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\">{}</text>",
            px(spot.x0 + indent),
            px(spot.row.mid + 4.0),
            esc(&text)
        );
    }
    svg.push_str("</g>");
}

/// As many of `words` as fit, in order, on a bar `w` wide, joined by ` · `.
fn fitting(words: Vec<String>, w: f64) -> String {
    let mut text = String::new();
    for word in words {
        let candidate = if text.is_empty() {
            word
        } else {
            format!("{text} · {word}")
        };
        if w >= 10.0 + 6.8 * candidate.chars().count() as f64 {
            text = candidate;
        } else {
            break;
        }
    }
    text
}

/// Each hop is a diamond on the bar's left edge: the chain hopped during
/// this attempt (when, a waypoint does not say).
fn hop_diamonds(svg: &mut String, spot: &Spot<'_>, attempt: u32, hops: &[Hop]) {
    for (k, Hop { from, to }) in hops.iter().enumerate() {
        let _ = write!(
            svg,
            "<g class=\"hop\" data-node=\"{}\" data-attempt=\"{attempt}\"><title>{}</title><path d=\"M{} {} l5 5 l-5 5 l-5 -5 z\"/></g>",
            esc(spot.lane.node.as_str()),
            esc(&format!(
                "{} — attempt {attempt}: fallback hop {from} → {to}",
                spot.who
            )),
            px(spot.x0 + 10.0 * k as f64),
            px(spot.row.mid - 5.0),
        );
    }
}

/// The wait before a retry: a dashed line (over a transparent box, for
/// its hover).
fn backoff(svg: &mut String, spot: &Spot<'_>, before_attempt: u32) {
    let Spot { x0, w, row, .. } = *spot;
    let _ = write!(
        svg,
        "<g class=\"wait backoff\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\"/><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/></g>",
        esc(spot.lane.node.as_str()),
        esc(&format!(
            "{} — backoff {} before attempt {before_attempt}",
            spot.who, spot.took
        )),
        px(x0),
        px(row.bar_y),
        px(w),
        px(BAR_H),
        px(x0),
        px(row.mid),
        px(x0 + w),
        px(row.mid)
    );
}

/// A result served from the cache: a short bar, its words beside it.
fn cache_hit(svg: &mut String, spot: &Spot<'_>) {
    let Spot { x0, w, row, .. } = *spot;
    let _ = write!(
        svg,
        "<g class=\"bar cache-hit\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/><text x=\"{}\" y=\"{}\">cache hit</text></g>",
        esc(spot.lane.node.as_str()),
        esc(&format!(
            "{} — served from the cache in {}",
            spot.who, spot.took
        )),
        px(x0),
        px(row.bar_y),
        px(w),
        px(BAR_H),
        px(x0 + w + 4.0),
        px(row.mid + 4.0)
    );
}

/// A handled final failure: a flag after the activation, naming the
/// handler.
fn handled(svg: &mut String, spot: &Spot<'_>, handler: &HandlerKind) {
    let Spot { x0, row, .. } = *spot;
    let handler = handler_words(handler);
    let _ = write!(
        svg,
        "<g class=\"handled\" data-node=\"{}\"><title>{}</title><path d=\"M{} {} l8 -6 v12 z\"/><text x=\"{}\" y=\"{}\">{}</text></g>",
        esc(spot.lane.node.as_str()),
        esc(&format!("{} — final failure handled: {handler}", spot.who)),
        px(x0 + 2.0),
        px(row.mid),
        px(x0 + 13.0),
        px(row.mid + 4.0),
        esc(&clip(&handler, 28))
    );
}

/// Which handler, in words: `route → compensate`, `absorb`, `custom name`.
fn handler_words(handler: &HandlerKind) -> String {
    match handler {
        HandlerKind::Route { to } => format!("route → {to}"),
        HandlerKind::Custom { name } => format!("custom {name}"),
        HandlerKind::Absorb => handler.name().to_string(),
    }
}

/// A parley: a band across the whole row from the question to its answer,
/// the prompt on it when there is room.
fn parley(svg: &mut String, spot: &Spot<'_>, prompt: &str, answered: bool) {
    let Spot { x0, w, row, .. } = *spot;
    let state = if answered {
        "answered"
    } else {
        "awaiting input"
    };
    let _ = write!(
        svg,
        "<g class=\"parley\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>",
        esc(spot.lane.node.as_str()),
        esc(&format!(
            "{} — parley ({state}) for {}: {prompt}",
            spot.who, spot.took
        )),
        px(x0),
        px(row.top + 3.0),
        px(w),
        px(ROW_H - 6.0)
    );
    let text = format!("parley: {}", clip(prompt, 60));
    if w >= 8.0 * 12.0 {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\">{}</text>",
            px(x0 + 8.0),
            px(row.mid + 4.0),
            esc(&clip(&text, ((w - 16.0) / 6.5) as usize))
        );
    }
    svg.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{NodeErrorSource, TimeoutKind};
    use crate::id::NodeId;
    use crate::render::timeline::marks::Note;

    fn model(marks: Vec<Placed>, rules: Vec<Rule>) -> Model {
        Model {
            lanes: vec![Lane {
                node: NodeId::new("n"),
                task: None,
                marks,
            }],
            rules,
            end: 1_000.0,
            status: "Running",
            supersteps: 1,
            attempts: 1,
            spend: None,
        }
    }

    #[test]
    fn a_timeout_bar_names_its_bound_whatever_its_notes_say() {
        let attempt = Attempt {
            attempt: 1,
            outcome: Outcome::Timeout(TimeoutKind::Idle),
            notes: vec![
                Note::Error(NodeErrorSource::Timeout(TimeoutKind::Idle)),
                Note::SkipReason("shutdown".to_string()),
            ],
            effects: Vec::new(),
            hops: Vec::new(),
            includes_wait: false,
        };
        let placed = Placed {
            start: 0.0,
            end: 1_000.0,
            mark: Mark::Attempt(attempt),
        };
        let page = page("t", &model(vec![placed], Vec::new()));
        assert!(page.contains(">#1 · idle timeout</text>"), "{page}");
        assert!(page.contains("n — attempt 1: timed out after 1s\nidle timeout elapsed; shutdown"));
    }

    #[test]
    fn rules_and_handlers_are_labelled_from_their_kinds() {
        let handled = Placed {
            start: 500.0,
            end: 500.0,
            mark: Mark::Handled {
                handler: HandlerKind::Route {
                    to: NodeId::new("refund"),
                },
            },
        };
        let rules = vec![
            Rule {
                at: 200.0,
                kind: RuleKind::Barrier(7),
            },
            Rule {
                at: 900.0,
                kind: RuleKind::Failed("card declined".to_string()),
            },
        ];
        let page = page("t", &model(vec![handled], rules));
        assert!(page.contains("<title>superstep 7 barrier at 200ms</title>"));
        assert!(page.contains("text-anchor=\"middle\">7</text>"), "{page}");
        assert!(page.contains(">run failed: card declined</text>"));
        assert!(page.contains("<title>n — final failure handled: route → refund</title>"));
        assert!(page.contains(">route → refund</text>"));
    }
}
