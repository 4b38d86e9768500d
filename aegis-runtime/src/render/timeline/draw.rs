//! The page: HTML around one inline SVG, drawn from the model.

use std::fmt::Write;

use super::layout::{
    AXIS_H, BAR_H, CHART_W, FOOT_H, LABEL_W, MIN_BAR, RIGHT_PAD, ROW_H, tick_step,
};
use super::model::{Mark, Model, Outcome, Placed, RuleKind};
use crate::render::html::{clip, esc, ms, px};

/// The stylesheet, inlined: the page fetches nothing.
const STYLE: &str = include_str!("timeline.css");

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

pub(super) fn page(title: &str, model: &Model) -> String {
    let span = model.end.max(1.0);
    let x = |t: f64| LABEL_W + (t / span).clamp(0.0, 1.0) * CHART_W;
    let height = AXIS_H + ROW_H * model.lanes.len().max(1) as f64 + FOOT_H;
    let width = LABEL_W + CHART_W + RIGHT_PAD;
    let lanes_bottom = AXIS_H + ROW_H * model.lanes.len().max(1) as f64;

    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{t}\">",
        w = px(width),
        h = px(height),
        t = esc(title)
    );

    // Lane backgrounds and labels.
    for (i, lane) in model.lanes.iter().enumerate() {
        let top = AXIS_H + ROW_H * i as f64;
        if i % 2 == 0 {
            let _ = write!(
                svg,
                "<rect class=\"lane-bg\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                px(top),
                px(width),
                px(ROW_H)
            );
        }
        let full = lane.name();
        let _ = write!(
            svg,
            "<g class=\"lane\" data-node=\"{}\"{}><title>{}</title>",
            esc(lane.node.as_str()),
            lane.task
                .as_ref()
                .map(|t| format!(" data-task=\"{}\"", esc(t)))
                .unwrap_or_default(),
            esc(&full)
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

    // The time axis.
    let step = tick_step(span);
    svg.push_str("<g class=\"axis\">");
    let mut t = 0.0;
    while t <= span + 0.5 {
        let tx = x(t);
        let _ = write!(
            svg,
            "<line x1=\"{tx}\" y1=\"{}\" x2=\"{tx}\" y2=\"{}\"/><text x=\"{tx}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(AXIS_H - 6.0),
            px(lanes_bottom),
            px(AXIS_H - 12.0),
            ms(t),
            tx = px(tx)
        );
        t += step;
    }
    svg.push_str("</g>");

    // Superstep barriers, halts, failures. A barrier's number is left out
    // where it would overprint the previous one (its line and hover stay).
    let mut last_label_x = f64::NEG_INFINITY;
    for rule in &model.rules {
        let rx = px(x(rule.at));
        let (class, label_y) = match rule.kind {
            RuleKind::Superstep => ("superstep", lanes_bottom + 12.0),
            RuleKind::Halted => ("halted", lanes_bottom + 24.0),
            RuleKind::Failed => ("failed", lanes_bottom + 24.0),
        };
        let anchor = if x(rule.at) > LABEL_W + CHART_W * 0.8 {
            "end"
        } else {
            "middle"
        };
        let shown = match rule.kind {
            RuleKind::Superstep if x(rule.at) - last_label_x < 14.0 => String::new(),
            RuleKind::Superstep => {
                last_label_x = x(rule.at);
                rule.text
                    .trim_start_matches("superstep ")
                    .trim_end_matches(" barrier")
                    .to_string()
            }
            _ => clip(&rule.text, 60),
        };
        let _ = write!(
            svg,
            "<g class=\"rule {class}\"><title>{} at {}</title><line x1=\"{rx}\" y1=\"{}\" x2=\"{rx}\" y2=\"{}\"/><text x=\"{rx}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text></g>",
            esc(&rule.text),
            ms(rule.at),
            px(AXIS_H - 6.0),
            px(lanes_bottom + 2.0),
            px(label_y),
            esc(&shown)
        );
    }

    if model.rules.iter().any(|r| r.kind == RuleKind::Superstep) {
        let _ = write!(
            svg,
            "<text class=\"axis-note\" x=\"8\" y=\"{}\">superstep ends</text>",
            px(lanes_bottom + 12.0)
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

    // The marks: parleys under everything else on their lane.
    for (i, lane) in model.lanes.iter().enumerate() {
        let top = AXIS_H + ROW_H * i as f64;
        let bar_y = top + (ROW_H - BAR_H) / 2.0;
        let mid = top + ROW_H / 2.0;
        let who = lane.name();
        let mut ordered: Vec<&Placed> = lane.marks.iter().collect();
        ordered.sort_by_key(|m| !matches!(m.mark, Mark::Parley { .. }));
        for m in ordered {
            let x0 = x(m.start);
            let w = (x(m.end) - x0).max(MIN_BAR);
            let took = ms(m.end - m.start);
            match &m.mark {
                Mark::Attempt {
                    attempt,
                    outcome,
                    detail,
                    hops,
                    includes_wait,
                } => {
                    let mut tip = format!(
                        "{who} — attempt {attempt}: {} after {took}",
                        outcome.words()
                    );
                    if let Some(d) = detail {
                        let _ = write!(tip, "\n{d}");
                    }
                    if *includes_wait {
                        tip.push_str("\n(the bar includes the backoff wait before this attempt)");
                    }
                    for (from, to) in hops {
                        let _ = write!(tip, "\nfallback hop: {from} → {to}");
                    }
                    let _ = write!(
                        svg,
                        "<g class=\"bar attempt {}\" data-node=\"{}\" data-attempt=\"{attempt}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/>",
                        outcome.class(),
                        esc(lane.node.as_str()),
                        esc(&tip),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H)
                    );
                    // The bar's own words, as many as fit: `#2 run timeout`,
                    // `#1 primary → backup`, or just `#2`.
                    let mut words = vec![format!("#{attempt}")];
                    if let (Outcome::Timeout, Some(d)) = (outcome, detail) {
                        words.push(d.trim_end_matches(" elapsed").to_string());
                    }
                    for (from, to) in hops {
                        words.push(format!("{from} → {to}"));
                    }
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
                    if !text.is_empty() {
                        let indent = if hops.is_empty() { 5.0 } else { 8.0 };
                        let _ = write!(
                            svg,
                            "<text x=\"{}\" y=\"{}\">{}</text>",
                            px(x0 + indent),
                            px(mid + 4.0),
                            esc(&text)
                        );
                    }
                    svg.push_str("</g>");
                    // Each hop is a diamond on the bar's left edge: the
                    // chain hopped during this attempt (when, a waypoint
                    // does not say).
                    for (k, (from, to)) in hops.iter().enumerate() {
                        let _ = write!(
                            svg,
                            "<g class=\"hop\" data-node=\"{}\" data-attempt=\"{attempt}\"><title>{}</title><path d=\"M{} {} l5 5 l-5 5 l-5 -5 z\"/></g>",
                            esc(lane.node.as_str()),
                            esc(&format!(
                                "{who} — attempt {attempt}: fallback hop {from} → {to}"
                            )),
                            px(x0 + 10.0 * k as f64),
                            px(mid - 5.0),
                        );
                    }
                }
                Mark::Backoff { before_attempt } => {
                    let _ = write!(
                        svg,
                        "<g class=\"wait backoff\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\"/><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/></g>",
                        esc(lane.node.as_str()),
                        esc(&format!(
                            "{who} — backoff {took} before attempt {before_attempt}"
                        )),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H),
                        px(x0),
                        px(mid),
                        px(x0 + w),
                        px(mid)
                    );
                }
                Mark::CacheHit => {
                    let _ = write!(
                        svg,
                        "<g class=\"bar cache-hit\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/><text x=\"{}\" y=\"{}\">cache hit</text></g>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — served from the cache in {took}")),
                        px(x0),
                        px(bar_y),
                        px(w),
                        px(BAR_H),
                        px(x0 + w + 4.0),
                        px(mid + 4.0)
                    );
                }
                Mark::Handled { handler } => {
                    let hx = x(m.start);
                    let _ = write!(
                        svg,
                        "<g class=\"handled\" data-node=\"{}\"><title>{}</title><path d=\"M{} {} l8 -6 v12 z\"/><text x=\"{}\" y=\"{}\">{}</text></g>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — final failure {handler}")),
                        px(hx + 2.0),
                        px(mid),
                        px(hx + 13.0),
                        px(mid + 4.0),
                        esc(&clip(handler.trim_start_matches("handled: "), 28))
                    );
                }
                Mark::Parley { prompt, answered } => {
                    let state = if *answered {
                        "answered"
                    } else {
                        "awaiting input"
                    };
                    let _ = write!(
                        svg,
                        "<g class=\"parley\" data-node=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>",
                        esc(lane.node.as_str()),
                        esc(&format!("{who} — parley ({state}) for {took}: {prompt}")),
                        px(x0),
                        px(top + 3.0),
                        px(w),
                        px(ROW_H - 6.0)
                    );
                    let text = format!("parley: {}", clip(prompt, 60));
                    if w >= 8.0 * 12.0 {
                        let _ = write!(
                            svg,
                            "<text x=\"{}\" y=\"{}\">{}</text>",
                            px(x0 + 8.0),
                            px(mid + 4.0),
                            esc(&clip(&text, ((w - 16.0) / 6.5) as usize))
                        );
                    }
                    svg.push_str("</g>");
                }
            }
        }
    }
    svg.push_str("</svg>");

    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p class=\"summary\">{} · {} supersteps · {} attempts · {} lanes · {}{}</p>\n{}\n{svg}\n</body>\n</html>\n",
        esc(&model.status),
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
