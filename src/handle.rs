//! [`JobHandle`]: read a job's state and await its result.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::job::{Job, JobId, JobState};

/// How often a waiter looks at the row even without a notification: a
/// safety net only (notifications, and reconnections, wake it first).
const WAIT_RECHECK: Duration = Duration::from_secs(30);

/// A reference to one job, from enqueue or [`Client::handle`]. `O` is the
/// task's output type.
pub struct JobHandle<O = serde_json::Value> {
    client: Client,
    id: JobId,
    inserted: bool,
    output: PhantomData<fn() -> O>,
}

impl<O> Clone for JobHandle<O> {
    fn clone(&self) -> Self {
        JobHandle {
            client: self.client.clone(),
            id: self.id,
            inserted: self.inserted,
            output: PhantomData,
        }
    }
}

impl<O> std::fmt::Debug for JobHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("id", &self.id)
            .field("duplicate", &!self.inserted)
            .finish()
    }
}

impl<O> JobHandle<O> {
    pub(crate) fn new(client: Client, id: JobId, inserted: bool) -> Self {
        JobHandle {
            client,
            id,
            inserted,
            output: PhantomData,
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// True when enqueue found an existing job with the same id and inserted
    /// nothing (also true for handles made by [`Client::handle`]).
    pub fn is_duplicate(&self) -> bool {
        !self.inserted
    }

    /// The job's row as it is now.
    pub async fn job(&self) -> Result<Job> {
        self.client
            .job(self.id)
            .await?
            .ok_or(Error::NotFound(self.id))
    }

    /// The job's state as it is now.
    pub async fn state(&self) -> Result<JobState> {
        let inner = &self.client.inner;
        db::fetch_state(&inner.pool, inner.queries, self.id)
            .await?
            .ok_or(Error::NotFound(self.id))
    }

    /// Waits until the job is success, failure or cancelled, and returns its
    /// row; gives up with [`Error::WaitTimeout`] after `timeout`. Woken by
    /// LISTEN/NOTIFY, not by polling.
    pub async fn wait_job(&self, timeout: Duration) -> Result<Job> {
        wait_until(&self.client, self.id, timeout, || async {
            let job = self.job().await?;
            Ok(if job.state.is_final() {
                Ok(job)
            } else {
                Err(job.state.to_string())
            })
        })
        .await
    }
}

/// Re-reads with `check` whenever a `job_finished` notification names `id`
/// (or the listener reconnects), until it says the thing is final
/// (`Ok(Ok(value))`) or `timeout` passes. `Ok(Err(state))` means "not yet".
pub(crate) async fn wait_until<T, F, Fut>(
    client: &Client,
    id: JobId,
    timeout: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::result::Result<T, String>>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let subscription = client.inner.waiters.subscribe(id, deadline).await;
    loop {
        let notified = subscription.as_ref().map(|s| s.notify.notified());
        tokio::pin!(notified);
        if let Some(notified) = notified.as_mut().as_pin_mut() {
            notified.enable();
        }
        let state = match check().await? {
            Ok(done) => return Ok(done),
            Err(state) => state,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::WaitTimeout {
                id,
                state,
                waited: now - started,
            });
        }
        let recheck = deadline.min(now + WAIT_RECHECK);
        match notified.as_mut().as_pin_mut() {
            Some(notified) => {
                let _ = tokio::time::timeout_at(recheck, notified).await;
            }
            None => tokio::time::sleep_until(recheck).await,
        }
    }
}

impl<O: DeserializeOwned> JobHandle<O> {
    /// Waits for the job's final outcome (see [`JobHandle::wait_job`]) and
    /// returns its result, or [`Error::JobFailed`] / [`Error::JobCancelled`].
    pub async fn wait(&self, timeout: Duration) -> Result<O> {
        let job = self.wait_job(timeout).await?;
        match job.state {
            JobState::Success => {
                let value = job.result.unwrap_or(serde_json::Value::Null);
                serde_json::from_value(value).map_err(|source| Error::Json {
                    task: job.task,
                    source,
                })
            }
            JobState::Cancelled => Err(Error::JobCancelled(self.id)),
            _ => Err(Error::JobFailed {
                id: self.id,
                error: job.last_error.unwrap_or_default(),
            }),
        }
    }

    /// The result if the job succeeded, `None` while it has not.
    pub async fn result(&self) -> Result<Option<O>> {
        let job = self.job().await?;
        match (job.state, job.result) {
            (JobState::Success, value) => serde_json::from_value(value.unwrap_or_default())
                .map(Some)
                .map_err(|source| Error::Json {
                    task: job.task,
                    source,
                }),
            _ => Ok(None),
        }
    }
}

impl Client {
    /// A handle to an existing job, e.g. from an id kept elsewhere. `O` is the
    /// expected output type.
    pub fn handle<O>(&self, id: JobId) -> JobHandle<O> {
        JobHandle::new(self.clone(), id, false)
    }
}
