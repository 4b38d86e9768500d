//! The console's pages as HTML text: one layout, one file per page.
//! Every value goes through [`escape`] (and every error text through
//! [`redact_secrets`] first); links carry values through [`url_encode`].

mod list;
mod pinned;
mod providers;
mod thread;

pub(crate) use list::{Filters, RunRow, runs};
pub(crate) use pinned::pinned;
pub(crate) use providers::{providers, tally_providers};
pub(crate) use thread::{RunView, run};

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::escape::{escape, url_encode};
use crate::error::redact_secrets;
use crate::worker::RunState;

const STYLE: &str = "
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d232b;background:#f5f6f8}
header{background:#1f2937;color:#fff;padding:10px 24px;display:flex;gap:28px;align-items:center}
header b{font-size:16px;letter-spacing:.3px}
header a{color:#cbd5e1;text-decoration:none;padding:4px 2px}
header a.on{color:#fff;border-bottom:2px solid #60a5fa}
main{padding:18px 24px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px;word-break:break-all}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d8dde4;table-layout:auto}
th,td{text-align:left;padding:6px 9px;border-bottom:1px solid #e5e8ed;vertical-align:top}
th{background:#eef1f5;font-weight:600;white-space:nowrap}
td.nw{white-space:nowrap}
td.wrap{word-break:break-word;max-width:560px;min-width:240px}
td.id{word-break:break-all;max-width:280px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.s{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;white-space:nowrap}
.s-completed{background:#dcfce7;color:#166534}.s-failed{background:#fee2e2;color:#991b1b}
.s-awaiting_input{background:#fef9c3;color:#854d0e}.s-quarantined{background:#ede9fe;color:#5b21b6}
.s-queued{background:#e0f2fe;color:#075985}.s-running{background:#dbeafe;color:#1e40af}
.s-cancelled{background:#e5e7eb;color:#374151}
.muted{color:#6b7280}.err{color:#991b1b}
form.filters{display:flex;gap:12px;align-items:end;margin-bottom:14px;flex-wrap:wrap}
label{display:flex;flex-direction:column;font-size:12px;color:#4b5563;gap:3px}
select,input[type=text],textarea{font:inherit;padding:5px 7px;border:1px solid #c4cad3;border-radius:4px;background:#fff}
textarea{width:100%;max-width:640px;min-height:70px;font-family:ui-monospace,monospace}
button{font:inherit;padding:5px 14px;border-radius:4px;border:1px solid #2563eb;background:#2563eb;color:#fff;cursor:pointer}
button.danger{background:#fff;color:#b91c1c;border-color:#b91c1c}
.actions{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start;background:#fff;border:1px solid #d8dde4;padding:12px;margin:8px 0}
.actions form{margin:0}
.note{background:#fff7ed;border:1px solid #fed7aa;padding:8px 12px;margin:10px 0}
.flash{background:#ecfdf5;border:1px solid #a7f3d0;padding:8px 12px;margin:0 0 12px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;background:#fff;border:1px solid #d8dde4;padding:12px;margin:0}
dt{color:#4b5563}dd{margin:0;word-break:break-all}
iframe{width:100%;height:460px;border:1px solid #d8dde4;background:#fff}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
";

/// Which page the navigation marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Runs,
    Pinned,
    Providers,
    None,
}

/// The page around `body`.
pub(crate) fn layout(title: &str, nav: Nav, body: &str) -> String {
    let link = |href: &str, label: &str, this: Nav| {
        let on = if nav == this { " class=\"on\"" } else { "" };
        format!("<a href=\"{href}\"{on}>{label}</a>")
    };
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · Aegis console</title><style>{STYLE}</style></head><body>\
         <header><b>Aegis console</b>{}{}{}</header><main>{body}</main></body></html>",
        escape(title),
        link("/", "Runs", Nav::Runs),
        link("/pinned", "Pinned fingerprints", Nav::Pinned),
        link("/providers", "Provider health", Nav::Providers),
    )
}

/// A page that says one thing (an action's failure, a missing run).
pub(crate) fn message(title: &str, text: &str) -> String {
    layout(
        title,
        Nav::None,
        &format!(
            "<h1>{}</h1><p class=\"err\">{}</p><p><a href=\"/\">All runs</a></p>",
            escape(title),
            escape(&redact_secrets(text))
        ),
    )
}

fn state_badge(state: RunState) -> String {
    format!("<span class=\"s s-{0}\">{0}</span>", state.as_str())
}

fn run_link(thread_id: &str) -> String {
    format!(
        "<a href=\"/run?id={}\">{}</a>",
        url_encode(thread_id),
        escape(thread_id)
    )
}

/// At most `max` characters of `s`, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A span for people: `45s`, `12m`, `3h`, `2d`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn when(t: SystemTime, now: SystemTime) -> String {
    let ago = now
        .duration_since(t)
        .map(|d| format!("{} ago", span(d)))
        .unwrap_or_else(|_| "just now".to_string());
    format!(
        "<span title=\"{}\">{ago}</span>",
        escape(&httpdate::fmt_http_date(t))
    )
}

fn short_fp(fp: &str) -> String {
    format!(
        "<code title=\"{}\">{}</code>",
        escape(fp),
        escape(&clip(fp, 14))
    )
}

fn option(value: &str, label: &str, selected: bool) -> String {
    format!(
        "<option value=\"{}\"{}>{}</option>",
        escape(value),
        if selected { " selected" } else { "" },
        escape(label)
    )
}

/// A hidden form field.
fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        escape(value)
    )
}

fn action_form(path: &str, thread: &str, csrf: &str, inner: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{path}\">{}{}{inner}</form>",
        hidden("thread", thread),
        hidden("csrf", csrf)
    )
}

/// The sign-in page of a console with a token.
pub(crate) fn login(csrf: &str, failed: bool) -> String {
    let mut b = String::from("<h1>Sign in</h1>");
    if failed {
        b.push_str("<p class=\"err\">That is not this console's token.</p>");
    }
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/login\">{}<label>Bearer token\
         <input type=\"text\" name=\"token\" autocomplete=\"off\"></label>\
         <p><button type=\"submit\">Sign in</button></p></form>",
        hidden("csrf", csrf)
    );
    layout("Sign in", Nav::None, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(span(Duration::from_secs(45)), "45s");
        assert_eq!(span(Duration::from_secs(600)), "10m");
        assert_eq!(span(Duration::from_secs(7200)), "2h");
        assert_eq!(span(Duration::from_secs(3 * 86400)), "3d");
    }
}
