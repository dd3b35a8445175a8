//! Workflows for the dashboard: a page of top-level ones, one workflow with
//! the workflows nested in it, and their jobs with the specs of what follows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;

use super::jobs::JobSummary;
use super::{Queries, statement};
use crate::error::Result;
use crate::job::JobId;

/// A workflow as listed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct WorkflowSummary {
    pub id: uuid::Uuid,
    pub kind: String,
    pub state: String,
    pub total: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The task of its first job, for a name.
    pub first_task: Option<String>,
}

/// A row of `conveyor.workflows` with the specs a graph needs.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct WorkflowNode {
    pub id: uuid::Uuid,
    pub kind: String,
    pub state: String,
    pub parent_id: Option<uuid::Uuid>,
    pub total: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub result_job_id: Option<JobId>,
    pub error: Option<String>,
    pub failed_job_id: Option<JobId>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// A chord's callback spec.
    #[serde(skip)]
    pub on_complete: Option<Value>,
    /// Error callbacks' specs.
    #[serde(skip)]
    pub on_error: Value,
}

/// A job of a workflow graph, with its `on_success` specs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct GraphJob {
    #[sqlx(flatten)]
    pub job: JobSummary,
    pub workflow_id: Option<uuid::Uuid>,
    pub workflow_index: Option<i32>,
    pub on_success: Option<Value>,
}

/// A page of top-level workflows, newest first.
pub(crate) async fn list_workflows(
    pool: &PgPool,
    q: &Queries,
    state: Option<&str>,
    kind: Option<&str>,
    before: Option<uuid::Uuid>,
    limit: i64,
) -> Result<Vec<WorkflowSummary>> {
    Ok(
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_workflows.sql")))
            .persistent(false)
            .bind(state)
            .bind(kind)
            .bind(before)
            .bind(limit)
            .fetch_all(q.on(pool))
            .await?,
    )
}

/// The workflow `id` and the workflows nested in it, oldest first.
pub(crate) async fn workflow_tree(
    pool: &PgPool,
    q: &Queries,
    id: uuid::Uuid,
) -> Result<Vec<WorkflowNode>> {
    Ok(
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_workflow_tree.sql")))
            .bind(id)
            .fetch_all(q.on(pool))
            .await?,
    )
}

/// The jobs of `workflows` (at most `per_workflow` each) and the jobs
/// `also` (chords' callbacks); a job may come twice.
pub(crate) async fn graph_jobs(
    pool: &PgPool,
    q: &Queries,
    workflows: &[uuid::Uuid],
    per_workflow: i64,
    also: &[JobId],
) -> Result<Vec<GraphJob>> {
    let sql = statement(q, sql!("dashboard/dashboard_workflow_graph_jobs.sql"));
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .bind(workflows)
        .bind(per_workflow)
        .bind(also)
        .fetch_all(q.on(pool))
        .await?)
}
