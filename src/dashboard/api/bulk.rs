//! Bulk actions on everything a list's filter matches (the parameters of
//! `GET api/jobs`, see [`Filter`]):
//!
//! - `GET api/bulk?action=retry|cancel|delete&state=…` counts the matching
//!   jobs (up to [`COUNT_CAP`], under a statement timeout): the page shows
//!   the count and asks for confirmation;
//! - `POST api/bulk/{action}?state=…&max=N[&cursor=C]` acts on one page of
//!   at most [`PAGE`] of them (and at most `max`, what is left of the
//!   confirmed count), in the list's order, and answers how many it acted
//!   on, how many it skipped (they changed state meanwhile, or a re-queue
//!   would break a unique key), and `next`: the cursor to send for the next
//!   page, `null` when none is left. Never one statement over everything:
//!   the page's script calls again until `next` is null, showing progress.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;

use super::jobs::{Filter, cursor_of, parse_cursor};
use super::{ApiError, ApiResult, Params, number, param, read_params, sql};
use crate::dashboard::AppState;
use crate::job::{JobId, JobState};

/// Jobs acted on per request.
const PAGE: i64 = 1_000;
/// Matching jobs are counted up to this many (shown as "1,000,000+").
const COUNT_CAP: i64 = 1_000_000;

#[derive(Clone, Copy)]
enum Action {
    Retry,
    Cancel,
    Delete,
}

impl Action {
    fn parse(name: &str) -> Option<Action> {
        match name {
            "retry" => Some(Action::Retry),
            "cancel" => Some(Action::Cancel),
            "delete" => Some(Action::Delete),
            _ => None,
        }
    }

    /// A 409 if the action does not apply to jobs in `state`.
    fn check(self, state: JobState) -> Result<(), ApiError> {
        let refused = match self {
            Action::Retry if !matches!(state, JobState::Failure | JobState::Cancelled) => {
                "only failed or cancelled jobs can be retried"
            }
            Action::Cancel if state.is_final() => "finished jobs cannot be cancelled",
            Action::Delete if state == JobState::Started => {
                "running jobs cannot be deleted: cancel them first"
            }
            _ => return Ok(()),
        };
        Err(ApiError::conflict(format!("{refused} (these are {state})")))
    }
}

fn unknown(name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unknown bulk action `{name}` (retry, cancel or delete)"
    ))
}

/// `GET api/bulk?action=A&state=S[&queue…]`: how many jobs the action would
/// visit.
pub(crate) async fn bulk_count(State(s): State<AppState>, params: Params) -> ApiResult {
    let params = read_params(params)?;
    let name = param(&params, "action").unwrap_or_default();
    let action = Action::parse(name).ok_or_else(|| unknown(name))?;
    let filter = Filter::parse(&params)?;
    action.check(filter.state)?;
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let matched = sql::count_jobs(pool, q, &filter.page(None, 0), COUNT_CAP).await?;
    Ok(Json(json!({
        "action": name,
        "state": filter.state,
        "matched": matched,
        "capped": matched >= COUNT_CAP,
        "page_size": PAGE,
    })))
}

/// `POST api/bulk/{action}?state=S[&queue…]&max=N[&cursor=C]`: one page.
pub(crate) async fn bulk_act(
    State(s): State<AppState>,
    Path(name): Path<String>,
    params: Params,
) -> ApiResult {
    let action = Action::parse(&name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, unknown(&name).message))?;
    let params = read_params(params)?;
    let filter = Filter::parse(&params)?;
    action.check(filter.state)?;
    let max = number::<i64>(&params, "max")?
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            ApiError::bad_request("give max: how many jobs (at most) this run may act on")
        })?;
    let cursor = param(&params, "cursor")
        .map(|c| parse_cursor(filter.state, c))
        .transpose()?;
    let size = max.min(PAGE);
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let jobs = sql::list_jobs(pool, q, &filter.page(cursor, size)).await?;
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let (mut acted, mut stopping) = (0u64, 0u64);
    match action {
        Action::Retry => acted = s.client.requeue(&ids).await?,
        Action::Delete => acted = s.client.delete_jobs(&ids).await?,
        Action::Cancel => {
            for (_, state) in sql::cancel_jobs(pool, q, &ids).await? {
                match state.as_deref() {
                    Some("cancelled") => acted += 1,
                    Some("started") => stopping += 1,
                    _ => {}
                }
            }
        }
    }
    let listed = ids.len() as u64;
    let next = (listed == size as u64)
        .then(|| jobs.last().map(cursor_of))
        .flatten();
    Ok(Json(json!({
        "action": name,
        "listed": listed,
        "acted": acted,
        "stopping": stopping,
        "skipped": listed.saturating_sub(acted + stopping),
        "next": next,
    })))
}
