//! The JSON API behind the page: `GET api/overview`, `GET api/jobs`,
//! `GET api/jobs/{id}`, `GET api/workers`, `POST api/jobs/{id}/{retry|cancel|delete}`,
//! `POST api/queues/{queue}/{pause|resume}`. Errors are
//! `{"error": "..."}` with a fitting status.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::AppState;
use crate::db::dashboard::{self as sql, Cursor, JobPage, JobSummary};
use crate::error::Error;
use crate::job::{Job, JobId, JobState};
use crate::records::WorkflowRun;

/// Finished jobs per state are counted up to this many in the overview.
const TOTALS_CAP: i64 = 10_000;
/// Rows per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 200;
/// Jobs of a workflow shown with a job's detail.
const WORKFLOW_JOBS: i64 = 100;

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
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
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

fn parse_id(text: &str) -> Result<JobId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("`{text}` is not a job id (expected a UUID)")))
}

/// A non-empty, trimmed query parameter.
fn param<'a>(params: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

fn parse_cursor(state: JobState, text: &str) -> Result<Cursor, ApiError> {
    let bad = || ApiError::bad_request(format!("`{text}` is not a page cursor"));
    if !state.is_final() {
        return text.parse().map(Cursor::Before).map_err(|_| bad());
    }
    let (micros, id) = text.split_once('_').ok_or_else(bad)?;
    let at = micros
        .parse()
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_micros)
        .ok_or_else(bad)?;
    Ok(Cursor::FinishedBefore(at, id.parse().map_err(|_| bad())?))
}

fn cursor_of(job: &JobSummary) -> String {
    match job.finished_at {
        Some(at) if job.state.parse().is_ok_and(JobState::is_final) => {
            format!("{}_{}", at.timestamp_micros(), job.id)
        }
        _ => job.id.to_string(),
    }
}

/// `GET api/jobs?state=S[&queue=Q][&task=T][&cursor=C][&limit=N]`: a page
/// of one state's jobs, newest first; `next` is the cursor of the page after.
pub(super) async fn jobs(
    State(s): State<AppState>,
    params: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let state: JobState = param(&params, "state")
        .ok_or_else(|| ApiError::bad_request("give a state: ?state=failure"))?
        .parse()
        .map_err(ApiError::bad_request)?;
    let limit = match param(&params, "limit") {
        Some(n) => n
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("limit `{n}` is not a number")))?
            .clamp(1, MAX_PAGE),
        None => DEFAULT_PAGE,
    };
    let cursor = param(&params, "cursor")
        .map(|c| parse_cursor(state, c))
        .transpose()?;
    let page = JobPage {
        state,
        queue: param(&params, "queue"),
        task: param(&params, "task"),
        cursor,
        limit: limit + 1,
    };
    let mut jobs = sql::list_jobs(&s.client.inner.pool, s.client.inner.queries, &page).await?;
    let next = if jobs.len() as i64 > limit {
        jobs.truncate(limit as usize);
        jobs.last().map(cursor_of)
    } else {
        None
    };
    Ok(Json(json!({ "state": state, "jobs": jobs, "next": next })))
}

fn workflow_json(w: &WorkflowRun) -> Value {
    json!({
        "id": w.id,
        "kind": w.kind,
        "state": w.state,
        "parent_id": w.parent_id,
        "total": w.total,
        "succeeded": w.succeeded,
        "failed": w.failed,
        "result_job_id": w.result_job_id,
        "error": w.error,
        "failed_job_id": w.failed_job_id,
        "created_at": w.created_at,
        "finished_at": w.finished_at,
    })
}

async fn fetch(s: &AppState, id: JobId) -> Result<Job, ApiError> {
    s.client
        .job(id)
        .await?
        .ok_or_else(|| ApiError::from(Error::NotFound(id)))
}

/// `GET api/jobs/{id}`: the whole job, its workflow (and the enclosing one)
/// with progress, and the workflow's jobs.
pub(super) async fn job(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let job = fetch(&s, parse_id(&id)?).await?;
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let (mut workflow, mut parent, mut members) = (Value::Null, Value::Null, Vec::new());
    if let Some(wid) = job.workflow_id
        && let Some(w) = crate::db::fetch_workflow(pool, q, wid).await?
    {
        if let Some(pid) = w.parent_id
            && let Some(p) = crate::db::fetch_workflow(pool, q, pid).await?
        {
            parent = workflow_json(&p);
        }
        members = sql::workflow_jobs(pool, q, wid, WORKFLOW_JOBS).await?;
        workflow = workflow_json(&w);
        // A workflow that failed before its last step never created its
        // result job: say so instead of linking to a job that is not there.
        let result_job = w.result_job_id.map(|id| vec![id]).unwrap_or_default();
        let exists = !crate::db::existing_ids(pool, q, &result_job)
            .await?
            .is_empty();
        workflow["result_job_exists"] = json!(exists);
    }
    Ok(Json(json!({
        "job": job.to_json(),
        "workflow": workflow,
        "parent_workflow": parent,
        "workflow_jobs": members,
    })))
}

/// `POST api/jobs/{id}/{retry|cancel|delete}`.
pub(super) async fn job_action(
    State(s): State<AppState>,
    Path((id, action)): Path<(String, String)>,
) -> ApiResult {
    let id = parse_id(&id)?;
    match action.as_str() {
        "retry" => {
            if s.client.requeue(&[id]).await? == 0 {
                let job = fetch(&s, id).await?;
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "only failed or cancelled jobs can be retried; this one is {}",
                        job.state
                    ),
                ));
            }
            Ok(Json(json!({ "id": id, "requeued": 1 })))
        }
        "cancel" => {
            let state = s.client.cancel(id).await?;
            Ok(Json(json!({ "id": id, "state": state })))
        }
        "delete" => {
            if s.client.delete_jobs(&[id]).await? == 0 {
                let job = fetch(&s, id).await?;
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("a {} job cannot be deleted: cancel it first", job.state),
                ));
            }
            Ok(Json(json!({ "id": id, "deleted": 1 })))
        }
        other => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown job action `{other}` (retry, cancel or delete)"),
        )),
    }
}

/// `POST api/queues/{queue}/{pause|resume}`.
pub(super) async fn queue_action(
    State(s): State<AppState>,
    Path((queue, action)): Path<(String, String)>,
) -> ApiResult {
    if queue.is_empty() || queue.chars().count() > 128 {
        return Err(ApiError::bad_request(
            "a queue name has 1 to 128 characters",
        ));
    }
    let paused = match action.as_str() {
        "pause" => {
            s.client.pause_queue(&queue).await?;
            true
        }
        "resume" => {
            s.client.resume_queue(&queue).await?;
            false
        }
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown queue action `{other}` (pause or resume)"),
            ));
        }
    };
    Ok(Json(json!({ "queue": queue, "paused": paused })))
}
