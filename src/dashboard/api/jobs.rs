//! Job lists and searches (`GET api/jobs`, `GET api/search`), one job
//! (`GET api/jobs/{id}`) and its actions (`POST api/jobs/{id}/{action}`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{ApiError, ApiResult, Params, page_limit, param, parse_uuid, read_params, sql};
use crate::dashboard::AppState;
use crate::db::dashboard::{Cursor, JobPage, JobSummary, Search};
use crate::error::Error;
use crate::job::{Job, JobId, JobState};
use crate::records::WorkflowRun;

/// Jobs of a workflow shown with a job's detail.
const WORKFLOW_JOBS: i64 = 100;
/// A search in args or error text covers jobs finished this recently,
/// unless it says otherwise.
const DEFAULT_WINDOW_SECS: f64 = 86_400.0;
/// The longest window: 100 years.
const MAX_WINDOW_SECS: f64 = 3_155_760_000.0;
/// Jobs an id-prefix search shows.
const PREFIX_MATCHES: i64 = 20;

/// Which jobs: a state, optionally a queue and task, and a [`Search`]. The
/// job lists and the bulk actions read it from the same parameters:
/// `state`, `queue`, `task`, `args` (JSON the args contain), `error` (text
/// the last error contains) and `finished_within` (seconds; final states).
pub(super) struct Filter {
    pub state: JobState,
    pub queue: Option<String>,
    pub task: Option<String>,
    pub search: Search,
}

impl Filter {
    pub(super) fn parse(params: &HashMap<String, String>) -> Result<Filter, ApiError> {
        let state: JobState = param(params, "state")
            .ok_or_else(|| ApiError::bad_request("give a state: ?state=failure"))?
            .parse()
            .map_err(ApiError::bad_request)?;
        let name = |key: &str, max: usize| super::name(params, key, max);
        let args = param(params, "args")
            .map(|text| {
                serde_json::from_str::<Value>(text).map_err(|e| {
                    ApiError::bad_request(format!("args: not JSON ({e}); e.g. {{\"user\": 7}}"))
                })
            })
            .transpose()?;
        let error = name("error", 1_000)?;
        let window = super::number::<f64>(params, "finished_within")?;
        if window.is_some_and(|w| !(w > 0.0 && w <= MAX_WINDOW_SECS)) {
            return Err(ApiError::bad_request(
                "finished_within: a number of seconds above 0, at most 100 years",
            ));
        }
        let mut search = Search {
            args,
            error,
            finished_within_secs: window.filter(|_| state.is_final()),
        };
        if state.is_final() && search.reads_rows() && search.finished_within_secs.is_none() {
            search.finished_within_secs = Some(DEFAULT_WINDOW_SECS);
        }
        Ok(Filter {
            state,
            queue: name("queue", 128)?,
            task: name("task", 255)?,
            search,
        })
    }

    /// A page of this filter's jobs.
    pub(super) fn page(&self, cursor: Option<Cursor>, limit: i64) -> JobPage<'_> {
        JobPage {
            state: self.state,
            queue: self.queue.as_deref(),
            task: self.task.as_deref(),
            search: &self.search,
            cursor,
            limit,
        }
    }

    /// What the search covers, for the page to say.
    fn describe(&self) -> Value {
        json!({
            "args": self.search.args,
            "error": self.search.error,
            "finished_within_secs": self.search.finished_within_secs,
            "reads_rows": self.search.reads_rows(),
            "timeout_secs": sql::STATEMENT_TIMEOUT_SECS,
        })
    }
}

fn parse_id(text: &str) -> Result<JobId, ApiError> {
    parse_uuid(text, "job")
}

pub(super) fn parse_cursor(state: JobState, text: &str) -> Result<Cursor, ApiError> {
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

pub(super) fn cursor_of(job: &JobSummary) -> String {
    match job.finished_at {
        Some(at) if job.state.parse().is_ok_and(JobState::is_final) => {
            format!("{}_{}", at.timestamp_micros(), job.id)
        }
        _ => job.id.to_string(),
    }
}

/// `GET api/jobs?state=S[&queue=Q][&task=T][&args=JSON][&error=TEXT]
/// [&finished_within=SECS][&cursor=C][&limit=N]`: a page of one state's
/// jobs, newest first; `next` is the cursor of the page after. With `args`
/// or `error` it is a search: each candidate row is read (finished jobs
/// within the window only), under a statement timeout.
pub(crate) async fn jobs(State(s): State<AppState>, params: Params) -> ApiResult {
    let params = read_params(params)?;
    let filter = Filter::parse(&params)?;
    let limit = page_limit(&params)?;
    let cursor = param(&params, "cursor")
        .map(|c| parse_cursor(filter.state, c))
        .transpose()?;
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let mut jobs = sql::list_jobs(pool, q, &filter.page(cursor, limit + 1)).await?;
    let next = if jobs.len() as i64 > limit {
        jobs.truncate(limit as usize);
        jobs.last().map(cursor_of)
    } else {
        None
    };
    Ok(Json(json!({
        "state": filter.state,
        "jobs": jobs,
        "next": next,
        "search": filter.describe(),
    })))
}

/// `GET api/search?id=PREFIX`: jobs whose id starts with these hex digits
/// (dashes ignored), in id order; `more` if there are others.
pub(crate) async fn id_search(State(s): State<AppState>, params: Params) -> ApiResult {
    let params = read_params(params)?;
    let given = param(&params, "id").unwrap_or_default();
    let hex: String = given
        .chars()
        .filter(|c| *c != '-')
        .collect::<String>()
        .to_ascii_lowercase();
    if hex.is_empty() || hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request(format!(
            "`{given}` is not the start of a job id: give 1 to 32 hex digits (0-9, a-f)"
        )));
    }
    let pad = |digit: &str| {
        let text = format!("{hex}{}", digit.repeat(32 - hex.len()));
        uuid::Uuid::parse_str(&text).map_err(|e| ApiError::bad_request(e.to_string()))
    };
    let (low, high) = (pad("0")?, pad("f")?);
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let mut jobs = sql::jobs_by_id_range(pool, q, low, high, PREFIX_MATCHES + 1).await?;
    let more = jobs.len() as i64 > PREFIX_MATCHES;
    jobs.truncate(PREFIX_MATCHES as usize);
    Ok(Json(json!({ "prefix": hex, "jobs": jobs, "more": more })))
}

pub(super) fn workflow_json(w: &WorkflowRun) -> Value {
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
pub(crate) async fn job(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
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
pub(crate) async fn job_action(
    State(s): State<AppState>,
    Path((id, action)): Path<(String, String)>,
) -> ApiResult {
    let id = parse_id(&id)?;
    match action.as_str() {
        "retry" => {
            if s.client.requeue(&[id]).await? == 0 {
                let job = fetch(&s, id).await?;
                return Err(ApiError::conflict(format!(
                    "only failed or cancelled jobs can be retried; this one is {}",
                    job.state
                )));
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
                return Err(ApiError::conflict(format!(
                    "a {} job cannot be deleted: cancel it first",
                    job.state
                )));
            }
            Ok(Json(json!({ "id": id, "deleted": 1 })))
        }
        other => Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            format!("unknown job action `{other}` (retry, cancel or delete)"),
        )),
    }
}
