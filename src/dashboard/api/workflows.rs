//! Workflows: `GET api/workflows` (top-level ones, newest first, by state
//! and kind) and `GET api/workflows/{id}` (one, with its graph).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::Utc;
use serde_json::json;

use super::graph::{MEMBERS_SHOWN, Rows, error_callbacks, steps};
use super::{ApiError, ApiResult, Params, page_limit, param, parse_uuid, read_params, sql};
use crate::dashboard::AppState;
use crate::job::JobId;

/// `GET api/workflows[?state=running|success|failure][&kind=chain|group|chord]
/// [&cursor=ID][&limit=N]`: top-level workflows (not a chain's chord
/// steps), newest first; `next` is the cursor of the page after.
pub(crate) async fn workflows(State(s): State<AppState>, params: Params) -> ApiResult {
    let params = read_params(params)?;
    let state = param(&params, "state");
    if let Some(state) = state.filter(|s| !matches!(*s, "running" | "success" | "failure")) {
        return Err(ApiError::bad_request(format!(
            "unknown workflow state `{state}` (running, success or failure)"
        )));
    }
    let kind = param(&params, "kind");
    if let Some(kind) = kind.filter(|k| !matches!(*k, "chain" | "group" | "chord")) {
        return Err(ApiError::bad_request(format!(
            "unknown workflow kind `{kind}` (chain, group or chord)"
        )));
    }
    let cursor = param(&params, "cursor")
        .map(|c| parse_uuid(c, "workflow"))
        .transpose()?;
    let limit = page_limit(&params)?;
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let mut list = sql::list_workflows(pool, q, state, kind, cursor, limit + 1).await?;
    let next = if list.len() as i64 > limit {
        list.truncate(limit as usize);
        list.last().map(|w| w.id)
    } else {
        None
    };
    Ok(Json(
        json!({ "workflows": list, "next": next, "now": Utc::now() }),
    ))
}

/// `GET api/workflows/{id}`: the workflow and its graph. A chord that is a
/// chain's step answers with its chain's graph (`focus` names it).
pub(crate) async fn workflow(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = parse_uuid(&id, "workflow")?;
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let mut tree = sql::workflow_tree(pool, q, id).await?;
    let parent = tree.iter().find(|w| w.id == id).and_then(|w| w.parent_id);
    if let Some(parent) = parent {
        tree = sql::workflow_tree(pool, q, parent).await?;
    }
    let root_id = parent.unwrap_or(id);
    let Some(at) = tree.iter().position(|w| w.id == root_id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no workflow with id {id}"),
        ));
    };
    let root = tree.remove(at);
    let mut ids: Vec<uuid::Uuid> = vec![root.id];
    ids.extend(tree.iter().map(|w| w.id));
    let callbacks: Vec<JobId> = std::iter::once(&root)
        .chain(&tree)
        .filter(|w| w.kind == "chord")
        .filter_map(|w| w.result_job_id)
        .collect();
    let per_workflow = i64::try_from(MEMBERS_SHOWN).unwrap_or(100) + 1;
    let jobs = sql::graph_jobs(pool, q, &ids, per_workflow, &callbacks).await?;
    let rows = Rows {
        root: &root,
        children: &tree,
        jobs: &jobs,
    };
    let result_job_exists = root
        .result_job_id
        .is_some_and(|r| jobs.iter().any(|j| j.job.id == r));
    Ok(Json(json!({
        "workflow": root,
        "result_job_exists": result_job_exists,
        "on_error": error_callbacks(&root),
        "steps": steps(&rows),
        "focus": parent.map(|_| id),
        "now": Utc::now(),
    })))
}
