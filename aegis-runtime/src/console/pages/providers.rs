//! What the attempt records say of each LLM provider.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::{Nav, clip, layout, span, when};
use crate::console::escape::escape;
use crate::error::{NodeErrorSource, redact_secrets};
use crate::waypoint::Waypoint;

/// What the attempt records say of one provider.
#[derive(Default)]
pub(crate) struct ProviderHealth {
    pub(crate) failures: usize,
    pub(crate) transient: usize,
    pub(crate) threads: std::collections::BTreeSet<String>,
    pub(crate) last: Option<(SystemTime, String)>,
    pub(crate) kinds: BTreeMap<String, usize>,
    pub(crate) cache_served: usize,
    /// The latest attempt its circuit breaker refused (`CircuitOpen`): when,
    /// and the cool-down it had left then.
    pub(crate) breaker_open: Option<(SystemTime, Option<Duration>)>,
    /// Fallback hops away from it (it failed, the chain moved on), from
    /// the records' hop notes: those inside calls that then succeeded too.
    pub(crate) hops_away: usize,
    /// Fallback hops onto it.
    pub(crate) hops_onto: usize,
}

/// Adds what `history` records of providers to `health`.
pub(crate) fn tally_providers(history: &[Waypoint], health: &mut BTreeMap<String, ProviderHealth>) {
    let mut seen = std::collections::HashSet::new();
    for w in history {
        for r in &w.records {
            if !seen.insert((r.node_id.to_string(), r.task_key.clone(), r.started_at)) {
                continue;
            }
            if let Some(p) = r.cache_origin.as_ref().and_then(|o| o.served_by.as_ref()) {
                health.entry(p.clone()).or_default().cache_served += 1;
            }
            for hop in r.hops() {
                let away = health.entry(hop.from_provider.clone()).or_default();
                away.hops_away += 1;
                away.threads.insert(w.thread_id.to_string());
                health.entry(hop.to_provider.clone()).or_default().hops_onto += 1;
            }
            for a in &r.attempts {
                let NodeErrorSource::Llm {
                    status,
                    provider,
                    kind,
                    message,
                } = &a.error.source
                else {
                    continue;
                };
                let name = provider.clone().unwrap_or_else(|| "(unnamed)".to_string());
                let h = health.entry(name).or_default();
                h.failures += 1;
                if a.error.transience == crate::error::Transience::Transient {
                    h.transient += 1;
                }
                h.threads.insert(w.thread_id.to_string());
                let label = match status {
                    Some(s) => format!("{kind} (HTTP {s})"),
                    None => kind.clone(),
                };
                *h.kinds.entry(label.clone()).or_default() += 1;
                if kind == "CircuitOpen" && h.breaker_open.is_none_or(|(t, _)| t <= a.started_at) {
                    h.breaker_open = Some((a.started_at, a.error.retry_after));
                }
                if h.last.as_ref().is_none_or(|(t, _)| *t <= a.started_at) {
                    h.last = Some((a.started_at, format!("{label}: {message}")));
                }
            }
        }
    }
}

/// The provider-health page.
pub(crate) fn providers(
    health: &BTreeMap<String, ProviderHealth>,
    scanned: usize,
    now: SystemTime,
) -> String {
    let mut b = String::from("<h1>Provider health</h1>");
    let _ = write!(
        b,
        "<div class=\"note\">Circuit-breaker state is not recorded in the fleet: each worker \
         process keeps its breakers in memory. The breaker column shows the latest attempt a \
         breaker refused (a <code>CircuitOpen</code> error), when one was recorded; it may have \
         closed since. What the queue's rows do record is every failed \
         LLM attempt with its provider, status and transience; below, those of the latest {scanned} \
         run{} (and which providers served cached results). A fallback chain that failed as a \
         whole counts against its last provider; every fallback hop, those inside a call that \
         then succeeded included, counts in the hops column (away from the provider that \
         failed, onto the next).</div>",
        if scanned == 1 { "" } else { "s" }
    );
    if health.is_empty() {
        b.push_str("<p class=\"muted\">No LLM provider error recorded.</p>");
        return layout("Provider health", Nav::Providers, &b);
    }
    b.push_str(
        "<table><thead><tr><th>Provider</th><th>Failed attempts</th><th>Transient</th>\
         <th>Threads</th><th>By kind</th><th>Last failure</th><th>Breaker (as recorded)</th>\
         <th>Hops (away / onto)</th><th>Cache entries served</th></tr></thead><tbody>",
    );
    for (name, h) in health {
        let kinds: Vec<String> = h
            .kinds
            .iter()
            .map(|(k, n)| format!("{} × {n}", escape(k)))
            .collect();
        let last = h
            .last
            .as_ref()
            .map(|(t, m)| {
                format!(
                    "{}<br><span class=\"mono\">{}</span>",
                    when(*t, now),
                    escape(&clip(&redact_secrets(m), 300))
                )
            })
            .unwrap_or_default();
        let breaker = match h.breaker_open {
            Some((t, cool_down)) => format!(
                "<span class=\"err\">open</span> {}{}",
                when(t, now),
                match cool_down {
                    Some(d) if d < Duration::from_secs(86400 * 365) => {
                        format!(", cool-down {} left then", span(d))
                    }
                    _ => String::new(),
                }
            ),
            None => "<span class=\"muted\">no open breaker recorded</span>".to_string(),
        };
        let _ = write!(
            b,
            "<tr><td class=\"nw\"><b>{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{last}</td><td>{breaker}</td><td>{} / {}</td><td>{}</td></tr>",
            escape(name),
            h.failures,
            h.transient,
            h.threads.len(),
            kinds.join("<br>"),
            h.hops_away,
            h.hops_onto,
            h.cache_served
        );
    }
    b.push_str("</tbody></table>");
    layout("Provider health", Nav::Providers, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waypoint::{NodeStatus, WaypointStatus};

    #[test]
    fn providers_are_tallied_from_records_with_the_latest_open_breaker() {
        use crate::error::{NodeError, Transience};
        use crate::id::NodeId;
        use crate::waypoint::{AttemptRecord, NodeExecutionRecord};
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let failed = |secs: u64, kind: &str, status: Option<u16>, retry_after: Option<Duration>| {
            let source = NodeErrorSource::Llm {
                status,
                provider: Some("openai".into()),
                kind: kind.into(),
                message: "Bearer sk-live-0123456789abcdef refused".into(),
            };
            AttemptRecord {
                attempt: 1,
                started_at: t0 + Duration::from_secs(secs),
                duration_ms: 5,
                error: NodeError::new(NodeId::new("ask"), 1, Transience::Transient, source)
                    .with_retry_after(retry_after),
                spend: None,
            }
        };
        let mut w = Waypoint::new(
            "t1",
            1,
            WaypointStatus::Running,
            crate::state::Battlefield::new(),
        );
        w.records = vec![
            NodeExecutionRecord::new(NodeId::new("ask"), NodeStatus::Succeeded, 3, t0, 50)
                .with_attempts(vec![
                    failed(1, "ProviderError", Some(503), None),
                    failed(2, "CircuitOpen", None, Some(Duration::from_secs(30))),
                ]),
        ];
        // A progress waypoint repeating the record counts once.
        let history = vec![w.clone(), w];
        let mut health = BTreeMap::new();
        tally_providers(&history, &mut health);
        let h = &health["openai"];
        assert_eq!((h.failures, h.transient, h.threads.len()), (2, 2, 1));
        assert_eq!(
            h.breaker_open,
            Some((t0 + Duration::from_secs(2), Some(Duration::from_secs(30))))
        );
        let page = providers(&health, 1, t0 + Duration::from_secs(62));
        assert!(page.contains("<span class=\"err\">open</span>"), "{page}");
        assert!(page.contains("cool-down 30s left then"), "{page}");
        assert!(page.contains("ProviderError (HTTP 503) × 1"));
        assert!(!page.contains("sk-live-0123456789abcdef"), "{page}");
    }

    #[test]
    fn hops_inside_a_call_that_succeeded_count_per_provider() {
        use crate::error::Transience;
        use crate::id::NodeId;
        use crate::waypoint::{HopNote, NodeExecutionRecord};
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut w = Waypoint::new(
            "t1",
            1,
            WaypointStatus::Running,
            crate::state::Battlefield::new(),
        );
        w.records = vec![
            NodeExecutionRecord::new(NodeId::new("ask"), NodeStatus::Succeeded, 1, t0, 50)
                .with_hops(vec![HopNote::new(
                    1,
                    "openai",
                    "anthropic",
                    1,
                    Transience::Transient,
                    "ProviderError: overloaded",
                )]),
        ];
        let mut health = BTreeMap::new();
        tally_providers(&[w.clone(), w], &mut health);
        assert_eq!(
            (health["openai"].hops_away, health["openai"].hops_onto),
            (1, 0)
        );
        assert_eq!(health["anthropic"].hops_onto, 1);
        assert_eq!(health["openai"].failures, 0);
        let page = providers(&health, 1, t0);
        assert!(page.contains("<td>1 / 0</td>"), "{page}");
    }
}
