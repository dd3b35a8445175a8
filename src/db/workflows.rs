//! Workflows: materialising specs, reading runs and member results.

use super::Target;
use serde_json::Value;
use sqlx::PgConnection;

use super::Queries;
use crate::error::Result;

/// Materialises a workflow spec.
pub(crate) async fn spawn(conn: &mut PgConnection, q: &Queries, spec: &Value) -> Result<()> {
    sqlx::query(q.spawn)
        .bind(spec)
        .execute(q.on(&mut *conn))
        .await?;
    Ok(())
}

pub(crate) async fn fetch_workflow<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    id: uuid::Uuid,
) -> Result<Option<crate::records::WorkflowRun>> {
    Ok(sqlx::query_as(q.fetch_workflow)
        .bind(id)
        .fetch_optional(q.on(exec))
        .await?)
}

/// Member results of a group or chord, in member order.
pub(crate) async fn workflow_results<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    id: uuid::Uuid,
) -> Result<Vec<Value>> {
    Ok(sqlx::query_scalar(q.workflow_results)
        .bind(id)
        .fetch_all(q.on(exec))
        .await?)
}
