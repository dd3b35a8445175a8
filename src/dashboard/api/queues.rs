//! Queue settings: `POST api/queues/{queue}/{action}`, through the SQL
//! functions every worker reads (`conveyor.pause_queue`, `resume_queue`,
//! `set_queue_limit`, `set_queue_rate_limit`):
//!
//! - `pause`, `resume`;
//! - `limit?limit=N` (at most N started at once across all workers) or
//!   `limit?limit=none`;
//! - `rate?limit=N&period=SECS` (at most N starts per period) or
//!   `rate?limit=none`.

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;

use super::{ApiError, ApiResult, Params, param, read_params};
use crate::dashboard::AppState;

/// The longest rate period the schema accepts (`queues_timestamps_check`).
const MAX_PERIOD_SECS: f64 = 3_155_760_000.0;

/// `limit`: `none`, or a whole number from 1 to 2147483647.
fn limit(params: &HashMap<String, String>) -> Result<Option<u32>, ApiError> {
    let text = param(params, "limit")
        .ok_or_else(|| ApiError::bad_request("give limit: a number, or none to remove it"))?;
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=i32::MAX as u32).contains(n))
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "limit `{text}`: a whole number from 1 to 2147483647, or none"
            ))
        })
}

/// `period`: seconds, from 1 ms (the schema keeps microseconds) to 100 years.
fn period(params: &HashMap<String, String>) -> Result<Duration, ApiError> {
    let text = param(params, "period")
        .ok_or_else(|| ApiError::bad_request("give period: the rate limit's window, in seconds"))?;
    text.parse::<f64>()
        .ok()
        .filter(|s| (0.001..=MAX_PERIOD_SECS).contains(s))
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "period `{text}`: a number of seconds from 0.001 to 100 years"
            ))
        })
}

/// `POST api/queues/{queue}/{pause|resume|limit|rate}`.
pub(crate) async fn queue_action(
    State(s): State<AppState>,
    Path((queue, action)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    if queue.is_empty() || queue.chars().count() > 128 {
        return Err(ApiError::bad_request(
            "a queue name has 1 to 128 characters",
        ));
    }
    let params = read_params(params)?;
    let client = &s.client;
    match action.as_str() {
        "pause" => {
            client.pause_queue(&queue).await?;
            Ok(Json(json!({ "queue": queue, "paused": true })))
        }
        "resume" => {
            client.resume_queue(&queue).await?;
            Ok(Json(json!({ "queue": queue, "paused": false })))
        }
        "limit" => {
            let limit = limit(&params)?;
            client.set_queue_limit(&queue, limit).await?;
            Ok(Json(json!({ "queue": queue, "concurrency_limit": limit })))
        }
        "rate" => {
            let rate = match limit(&params)? {
                Some(n) => Some((n, period(&params)?)),
                None if param(&params, "period").is_some() => {
                    return Err(ApiError::bad_request(
                        "limit=none removes the rate limit: give no period with it",
                    ));
                }
                None => None,
            };
            client.set_queue_rate_limit(&queue, rate).await?;
            Ok(Json(json!({
                "queue": queue,
                "rate_limit": rate.map(|r| r.0),
                "rate_period_secs": rate.map(|r| r.1.as_secs_f64()),
            })))
        }
        other => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown queue action `{other}` (pause, resume, limit or rate)"),
        )),
    }
}
