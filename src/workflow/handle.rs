//! Handles to enqueued workflows: progress, and awaiting the result.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::handle::{JobHandle, wait_until};
use crate::job::JobId;
use crate::records::{WorkflowRun, WorkflowState};

async fn run(client: &Client, id: uuid::Uuid) -> Result<WorkflowRun> {
    let inner = &client.inner;
    db::fetch_workflow(&inner.pool, inner.queries, id)
        .await?
        .ok_or(Error::NotFound(id))
}

/// Waits for the workflow to leave `running`; a failure becomes [`Error::JobFailed`].
async fn wait_final(client: &Client, id: uuid::Uuid, timeout: Duration) -> Result<WorkflowRun> {
    let done = wait_until(client, id, timeout, || async {
        let run = run(client, id).await?;
        Ok(match run.state {
            WorkflowState::Running => Err("running".to_string()),
            _ => Ok(run),
        })
    })
    .await?;
    match done.state {
        WorkflowState::Failure => Err(Error::JobFailed {
            id: done.failed_job_id.unwrap_or(id),
            error: done.error.unwrap_or_default(),
        }),
        _ => Ok(done),
    }
}

/// A handle to a chain or chord: its progress, and its result (the last
/// step's, or the callback's).
pub struct WorkflowHandle<O = Value> {
    client: Client,
    id: uuid::Uuid,
    result_job_id: JobId,
    output: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for WorkflowHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("id", &self.id)
            .field("result_job_id", &self.result_job_id)
            .finish()
    }
}

impl<O> WorkflowHandle<O> {
    pub(crate) fn new(client: Client, id: uuid::Uuid, result_job_id: JobId) -> Self {
        WorkflowHandle {
            client,
            id,
            result_job_id,
            output: PhantomData,
        }
    }

    /// The workflow's id (`conveyor.workflows.id`, `conveyor.jobs.workflow_id`).
    pub fn id(&self) -> uuid::Uuid {
        self.id
    }

    /// The id of the job whose result is the workflow's (it exists once that
    /// step or callback has been enqueued).
    pub fn result_job_id(&self) -> JobId {
        self.result_job_id
    }

    /// The workflow's row: state and counters.
    pub async fn progress(&self) -> Result<WorkflowRun> {
        run(&self.client, self.id).await
    }
}

impl<O: DeserializeOwned> WorkflowHandle<O> {
    /// Waits until the workflow succeeds (and returns its result) or fails
    /// ([`Error::JobFailed`] with the failing job's id and error).
    pub async fn wait(&self, timeout: Duration) -> Result<O> {
        wait_final(&self.client, self.id, timeout).await?;
        let result: Option<O> = self.client.handle::<O>(self.result_job_id).result().await?;
        result.ok_or(Error::NotFound(self.result_job_id))
    }
}

/// A handle to a group: progress, members, and all results in member order.
pub struct GroupHandle<M = Value> {
    client: Client,
    id: uuid::Uuid,
    members: Vec<JobId>,
    output: PhantomData<fn() -> M>,
}

impl<M> std::fmt::Debug for GroupHandle<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupHandle")
            .field("id", &self.id)
            .field("members", &self.members.len())
            .finish()
    }
}

impl<M> GroupHandle<M> {
    pub(crate) fn new(client: Client, id: uuid::Uuid, members: Vec<JobId>) -> Self {
        GroupHandle {
            client,
            id,
            members,
            output: PhantomData,
        }
    }

    /// The group's id.
    pub fn id(&self) -> uuid::Uuid {
        self.id
    }

    /// Handles to the members, in member order.
    pub fn members(&self) -> Vec<JobHandle<M>> {
        self.members
            .iter()
            .map(|id| self.client.handle(*id))
            .collect()
    }

    /// The group's row: how many members succeeded and failed so far.
    pub async fn progress(&self) -> Result<WorkflowRun> {
        run(&self.client, self.id).await
    }
}

impl<M: DeserializeOwned> GroupHandle<M> {
    /// Waits until every member succeeded and returns their results in member
    /// order, or until one failed for good ([`Error::JobFailed`]).
    pub async fn wait(&self, timeout: Duration) -> Result<Vec<M>> {
        wait_final(&self.client, self.id, timeout).await?;
        let inner = &self.client.inner;
        db::workflow_results(&inner.pool, inner.queries, self.id)
            .await?
            .into_iter()
            .map(|value| {
                serde_json::from_value(value).map_err(|source| Error::Json {
                    task: "group member".into(),
                    source,
                })
            })
            .collect()
    }
}
