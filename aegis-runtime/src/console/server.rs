//! The routes: pages on GET, actions on POST, each behind [`guard`].

use axum::Router;
use axum::extract::{DefaultBodyLimit, Form, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use super::MAX_BODY_BYTES;
use super::age::{age_matches, parse_age};
use super::app::App;
use super::escape::url_encode;
use super::guard::{self, TOKEN_COOKIE, same_secret};
use super::pages::{self, Filters, RunRow, RunView};
use super::redacted::redacted;
use crate::graph::ParleyResponse;
use crate::render::Timeline;
use crate::waypoint::{Waypoint, WaypointStatus};
use crate::worker::{PinnedRun, RunState, RunStatus, WorkerError};

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/run", get(run))
        .route("/run/timeline", get(timeline))
        .route("/pinned", get(pinned))
        .route("/providers", get(providers))
        .route("/run/answer", post(answer))
        .route("/run/cancel", post(cancel))
        .route("/run/requeue", post(requeue))
        .route("/run/retry", post(retry))
        .route("/login", get(login_page).post(login))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// The console's pages load nothing from elsewhere and run no script;
/// only its own pages may frame them (the run page frames its timeline).
const PAGE_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
     frame-src 'self'; form-action 'self'; frame-ancestors 'self'; base-uri 'none'";

fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: with no referrer at all a browser
    // sends `Origin: null` on a form POST, which the guard refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn failure(status: StatusCode, title: &str, e: &dyn std::fmt::Display) -> Response {
    html(status, pages::message(title, &e.to_string()))
}

async fn not_found() -> Response {
    html(
        StatusCode::NOT_FOUND,
        pages::message("Not found", "No such page."),
    )
}

/// An empty form or query field is an unset filter.
fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

#[derive(Deserialize)]
struct RunsQuery {
    state: Option<String>,
    graph: Option<String>,
    age: Option<String>,
}

/// The questions a waypoint waits on: (node, prompt).
fn parleys(latest: Option<&Waypoint>) -> Vec<(String, String)> {
    match latest.map(|w| &w.status) {
        Some(WaypointStatus::AwaitingInput { requests }) => requests
            .iter()
            .map(|(node, request)| (node.to_string(), request.prompt.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

impl App {
    /// The stranded runs (pinned to a fingerprint no live worker runs), by
    /// thread.
    async fn stranded(&self) -> Result<HashMap<String, PinnedRun>, WorkerError> {
        Ok(self
            .client
            .pinned(self.max_runs)
            .await?
            .into_iter()
            .map(|p| (p.thread_id.clone(), p))
            .collect())
    }

    async fn row(&self, status: RunStatus, stranded: &HashMap<String, PinnedRun>) -> RunRow {
        let (latest, unreadable) = match self.client.latest(&status.thread_id).await {
            Ok(latest) => (latest, None),
            Err(e) => (None, Some(e.to_string())),
        };
        RunRow {
            last_activity: latest.as_ref().map(|w| w.created_at),
            parleys: parleys(latest.as_ref()),
            stranded: stranded.get(&status.thread_id).cloned(),
            unreadable,
            status,
        }
    }

    /// The graph names of the latest runs, for the filter.
    async fn graphs(&self) -> Result<Vec<String>, WorkerError> {
        let mut names: Vec<String> = self
            .client
            .runs(None, None, self.max_runs)
            .await?
            .into_iter()
            .map(|s| s.graph_name)
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}

async fn runs(State(app): State<Arc<App>>, Query(q): Query<RunsQuery>) -> Response {
    let state = match non_empty(&q.state) {
        None => None,
        Some(name) => match RunState::parse(name) {
            Some(s) => Some(s),
            None => {
                return html(
                    StatusCode::BAD_REQUEST,
                    pages::message("Bad filter", &format!("unknown state `{name}`")),
                );
            }
        },
    };
    let age_text = non_empty(&q.age);
    let age = match age_text {
        None => None,
        Some(text) => match parse_age(text) {
            Some(a) => Some(a),
            None => {
                return html(
                    StatusCode::BAD_REQUEST,
                    pages::message("Bad filter", &format!("unknown age `{text}`")),
                );
            }
        },
    };
    let graph = non_empty(&q.graph);
    let listed = app.client.runs(state, graph, app.max_runs).await;
    let (statuses, stranded, graphs) = match (listed, app.stranded().await, app.graphs().await) {
        (Ok(s), Ok(p), Ok(g)) => (s, p, g),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot read the queue",
                &e,
            );
        }
    };
    let now = SystemTime::now();
    let mut rows = Vec::with_capacity(statuses.len());
    for status in statuses {
        let row = app.row(status, &stranded).await;
        if age_matches(age, row.last_activity, now) {
            rows.push(row);
        }
    }
    let filters = Filters {
        state,
        graph,
        age: age_text,
    };
    html(
        StatusCode::OK,
        pages::runs(&rows, &filters, &graphs, app.max_runs, now),
    )
}

#[derive(Deserialize)]
struct RunQuery {
    id: String,
    done: Option<String>,
}

async fn run(State(app): State<Arc<App>>, Query(q): Query<RunQuery>) -> Response {
    let status = match app.client.status(&q.id).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return html(
                StatusCode::NOT_FOUND,
                pages::message(
                    "No such run",
                    &format!("thread `{}` was never submitted", q.id),
                ),
            );
        }
        Err(e) => return failure(StatusCode::INTERNAL_SERVER_ERROR, "Cannot read the run", &e),
    };
    let stranded = match app.stranded().await {
        Ok(s) => s,
        Err(e) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot read the queue",
                &e,
            );
        }
    };
    let claims = match app.client.attempts(&q.id).await {
        Ok(c) => c,
        Err(e) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot read the claims",
                &e,
            );
        }
    };
    let mut row = app.row(status, &stranded).await;
    // An unreadable history (a quarantined thread's) leaves the tables
    // out; the page says why.
    let history = match app.client.history(&q.id).await {
        Ok(history) => redacted(history),
        Err(e) => {
            row.unreadable.get_or_insert_with(|| e.to_string());
            Vec::new()
        }
    };
    let flash = non_empty(&q.done).map(|d| match d {
        "answer" => "Answer delivered: the next worker to claim the thread resumes it.",
        "cancel" => "Cancellation requested.",
        "requeue" => "Released: the run is back in the queue.",
        "retry" => "Backoff lifted: the next claim takes the run.",
        _ => "Done.",
    });
    let view = RunView {
        row: &row,
        claims: &claims,
        history: &history,
        csrf: &app.csrf,
        flash,
    };
    html(StatusCode::OK, pages::run(&view, SystemTime::now()))
}

async fn timeline(State(app): State<Arc<App>>, Query(q): Query<RunQuery>) -> Response {
    match app.client.history(&q.id).await {
        // Scaled to the frame the run page gives it, not scrolled.
        Ok(history) => html(
            StatusCode::OK,
            Timeline::new(&redacted(history)).to_html().replacen(
                "</head>",
                "<style>svg{max-width:100%;height:auto}</style></head>",
                1,
            ),
        ),
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Cannot read the waypoints",
            &e,
        ),
    }
}

async fn pinned(State(app): State<Arc<App>>) -> Response {
    let statuses = match app.client.runs(None, None, app.max_runs).await {
        Ok(s) => s,
        Err(e) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot read the queue",
                &e,
            );
        }
    };
    match app.client.pinned(app.max_runs).await {
        Ok(stranded) => html(StatusCode::OK, pages::pinned(&statuses, &stranded)),
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Cannot read the queue",
            &e,
        ),
    }
}

async fn providers(State(app): State<Arc<App>>) -> Response {
    let scan = (app.max_runs / 2).max(1);
    let statuses = match app.client.runs(None, None, scan).await {
        Ok(s) => s,
        Err(e) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot read the queue",
                &e,
            );
        }
    };
    let mut health = BTreeMap::new();
    for s in &statuses {
        if let Ok(history) = app.client.history(&s.thread_id).await {
            pages::tally_providers(&history, &mut health);
        }
    }
    html(
        StatusCode::OK,
        pages::providers(&health, statuses.len(), SystemTime::now()),
    )
}

#[derive(Deserialize)]
struct ActionForm {
    thread: String,
    csrf: String,
    #[serde(default)]
    answer: String,
}

/// Checks the form token, runs `act`, and sends the browser back to the
/// run's page (303) or shows why it could not (409).
async fn act<F, Fut>(app: &App, form: &ActionForm, done: &str, act: F) -> Response
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), WorkerError>>,
{
    if !same_secret(form.csrf.as_bytes(), app.csrf.as_bytes()) {
        return html(
            StatusCode::FORBIDDEN,
            pages::message(
                "Form refused",
                "this form was not issued by this console (reload the page and try again)",
            ),
        );
    }
    match act().await {
        Ok(()) => Redirect::to(&format!("/run?id={}&done={done}", url_encode(&form.thread)))
            .into_response(),
        Err(e) => failure(StatusCode::CONFLICT, "The action failed", &e),
    }
}

/// An answer as typed: JSON when it parses as JSON, else the text as a
/// JSON string.
fn answer_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim())
        .unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

async fn answer(State(app): State<Arc<App>>, Form(form): Form<ActionForm>) -> Response {
    let response = ParleyResponse::new(answer_value(&form.answer));
    act(&app, &form, "answer", || {
        app.client.answer(&form.thread, response)
    })
    .await
}

async fn cancel(State(app): State<Arc<App>>, Form(form): Form<ActionForm>) -> Response {
    act(&app, &form, "cancel", || app.client.cancel(&form.thread)).await
}

async fn requeue(State(app): State<Arc<App>>, Form(form): Form<ActionForm>) -> Response {
    act(&app, &form, "requeue", || app.client.requeue(&form.thread)).await
}

async fn retry(State(app): State<Arc<App>>, Form(form): Form<ActionForm>) -> Response {
    act(&app, &form, "retry", || app.client.retry_now(&form.thread)).await
}

async fn login_page(State(app): State<Arc<App>>) -> Response {
    html(StatusCode::OK, pages::login(&app.csrf, false))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    csrf: String,
}

async fn login(State(app): State<Arc<App>>, Form(form): Form<LoginForm>) -> Response {
    let Some(token) = &app.token else {
        return Redirect::to("/").into_response();
    };
    let ok = same_secret(form.csrf.as_bytes(), app.csrf.as_bytes())
        && same_secret(form.token.trim().as_bytes(), token.as_bytes());
    if !ok {
        return html(StatusCode::UNAUTHORIZED, pages::login(&app.csrf, true));
    }
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{TOKEN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        form.token.trim()
    )) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_json_or_text() {
        assert_eq!(
            answer_value(" {\"ok\": true} "),
            serde_json::json!({"ok": true})
        );
        assert_eq!(answer_value("yes please"), serde_json::json!("yes please"));
    }
}
