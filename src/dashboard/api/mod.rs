//! The JSON API behind the page. Reads are `GET`s; every action is a
//! `POST` (which the guard refuses in read-only mode and without the CSRF
//! header), its parameters in the query string:
//!
//! | endpoint | what |
//! | --- | --- |
//! | `GET overview` | a row per queue (with its settings), whole-table numbers |
//! | `GET workers` | the worker registry |
//! | `GET jobs?state=…` | a page of one state's jobs: `jobs.rs` |
//! | `GET search?id=PREFIX` | jobs whose id starts with a prefix |
//! | `GET jobs/{id}`, `POST jobs/{id}/{retry,cancel,delete}` | one job |
//! | `GET bulk?action=…&state=…`, `POST bulk/{action}?…` | bulk actions: `bulk.rs` |
//! | `GET workflows`, `GET workflows/{id}` | workflows and their graphs: `workflows.rs` |
//! | `GET periodic` | periodic schedules and their leader: `periodic.rs` |
//! | `GET stats?window=…` | the charts' rollups (`conveyor.stats`): `charts.rs` |
//! | `POST queues/{q}/{pause,resume,limit,rate}` | queue settings: `queues.rs` |
//!
//! Errors are `{"error": "..."}` with a fitting status: 400 for a malformed
//! parameter, 404 for what does not exist, 409 for an action the state does
//! not allow, 422 for a search or count stopped by its time limit.

mod bulk;
mod charts;
mod graph;
mod jobs;
mod periodic;
mod queues;
mod workflows;

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Value, json};

use super::AppState;
use crate::db::dashboard as sql;
use crate::error::Error;

pub(super) use bulk::{bulk_act, bulk_count};
pub(super) use charts::stats;
pub(super) use jobs::{id_search, job, job_action, jobs};
pub(super) use periodic::periodic;
pub(super) use queues::queue_action;
pub(super) use workflows::{workflow, workflows};

/// Finished jobs per state are counted up to this many in the overview.
const TOTALS_CAP: i64 = 10_000;
/// Rows per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 200;

/// An error answered as `{"error": message}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        if sql::timed_out(&e) {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "stopped after {} s: this reads every candidate row (a search) or \
                     rollup (a chart); narrow it (a queue, a task, a shorter time window)",
                    sql::STATEMENT_TIMEOUT_SECS
                ),
            );
        }
        let status = match &e {
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::NotMigrated(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => {
                tracing::error!(error = %e, "dashboard request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

/// Query parameters, or a 400 saying why they do not parse.
type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

fn read_params(params: Params) -> Result<HashMap<String, String>, ApiError> {
    params
        .map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

/// A non-empty, trimmed query parameter.
fn param<'a>(params: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// A name parameter (`queue`, `task`…) of at most `max` characters, or a
/// 400 saying so.
fn name(
    params: &HashMap<String, String>,
    key: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match param(params, key) {
        Some(v) if v.chars().count() > max => Err(ApiError::bad_request(format!(
            "a {key} name has at most {max} characters"
        ))),
        v => Ok(v.map(str::to_string)),
    }
}

/// A number parameter, or a 400 naming it.
fn number<T: std::str::FromStr>(
    params: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, ApiError> {
    param(params, name)
        .map(|text| {
            text.parse()
                .map_err(|_| ApiError::bad_request(format!("{name} `{text}` is not a number")))
        })
        .transpose()
}

/// `limit`, clamped to 1..=[`MAX_PAGE`] ([`DEFAULT_PAGE`] if absent).
fn page_limit(params: &HashMap<String, String>) -> Result<i64, ApiError> {
    Ok(number::<i64>(params, "limit")?.map_or(DEFAULT_PAGE, |n| n.clamp(1, MAX_PAGE)))
}

fn parse_uuid(text: &str, what: &str) -> Result<uuid::Uuid, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!("`{text}` is not a {what} id (expected a UUID)"))
    })
}

/// Unknown paths: a JSON 404 (the page itself is at the root).
pub(super) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such page or endpoint")
}

/// `GET api/overview`: a row per queue, whole-table numbers, and what the
/// page may show.
pub(super) async fn overview(State(s): State<AppState>) -> ApiResult {
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let (mut queues, totals, workers) = tokio::try_join!(
        sql::overview(pool, q),
        sql::totals(pool, q, TOTALS_CAP),
        crate::db::list_workers(pool, q),
    )?;
    let live: Vec<_> = workers.iter().filter(|w| w.dead_at.is_none()).collect();
    for queue in &mut queues {
        queue.live_workers = live
            .iter()
            .filter(|w| w.queues.contains(&queue.queue))
            .count() as i64;
    }
    Ok(Json(json!({
        "queues": queues,
        "totals": totals,
        "workers": { "live": live.len(), "dead": workers.len() - live.len() },
        "totals_cap": TOTALS_CAP,
        "read_only": s.config.read_only,
        "auth": s.config.requires_auth(),
        "now": Utc::now(),
    })))
}

/// `GET api/workers`: the worker registry, live workers first.
pub(super) async fn workers(State(s): State<AppState>) -> ApiResult {
    let workers = crate::db::list_workers(&s.client.inner.pool, s.client.inner.queries).await?;
    Ok(Json(json!({ "workers": workers, "now": Utc::now() })))
}
