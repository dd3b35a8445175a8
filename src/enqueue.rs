//! Enqueueing: one job or many, on the client's pool or in the caller's
//! transaction, plain or unique, jobs or workflows.
//!
//! Every job's id is fixed before anything is sent, so an enqueue that owns
//! its transaction can confirm its commit after a connection failure (see
//! [`crate::confirm`]). One in the caller's transaction cannot: the caller's
//! commit is the caller's to confirm.

use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::client::Client;
use crate::confirm::{self, ours, until_answered};
use crate::db::{self, InsertRow, Inserted};
use crate::db::{BULK_CHUNK, COPY_MIN};
use crate::error::{Error, Result};
use crate::handle::JobHandle;
use crate::job::JobId;
use crate::task::{NewJob, Unique};

/// A job ready to insert: checked, with its id fixed.
pub(crate) enum Prepared {
    Plain(InsertRow),
    Unique {
        spec: Value,
        id: JobId,
        /// The id was generated here, not given by the caller.
        fresh: bool,
        key: Option<String>,
        ttl_secs: Option<f64>,
    },
}

impl Prepared {
    fn new<O>(job: NewJob<O>) -> Result<Prepared> {
        let Some(unique) = job.unique.clone() else {
            return job.into_row().map(Prepared::Plain);
        };
        job.check()?;
        let id = job.id.unwrap_or_else(uuid::Uuid::now_v7);
        Ok(Prepared::Unique {
            spec: job.spec_with_id(id, None, None),
            id,
            fresh: job.id.is_none(),
            key: unique.key,
            ttl_secs: match unique.scope {
                Unique::For(ttl) => Some(ttl.as_secs_f64()),
                Unique::UntilFinished => None,
            },
        })
    }

    fn id(&self) -> JobId {
        match self {
            Prepared::Plain(row) => row.id,
            Prepared::Unique { id, .. } => *id,
        }
    }

    fn fresh(&self) -> bool {
        match self {
            Prepared::Plain(row) => row.fresh_id,
            Prepared::Unique { fresh, .. } => *fresh,
        }
    }
}

fn prepare<O>(jobs: Vec<NewJob<O>>) -> Result<Vec<Prepared>> {
    jobs.into_iter().map(Prepared::new).collect()
}

/// Inserts `jobs` on `conn`, in order; plain jobs in one statement per
/// [`BULK_CHUNK`] when none is unique, else one at a time (a unique job may
/// return an existing one).
async fn insert(
    client: &Client,
    conn: &mut PgConnection,
    jobs: &[Prepared],
    may_exist: bool,
) -> Result<Vec<Inserted>> {
    let q = client.inner.queries;
    let rows: Option<Vec<InsertRow>> = jobs
        .iter()
        .map(|job| match job {
            Prepared::Plain(row) => Some(row.clone()),
            Prepared::Unique { .. } => None,
        })
        .collect();
    if let Some(rows) = rows {
        return db::insert_all(conn, q, &rows, may_exist).await;
    }
    let mut found = Vec::with_capacity(jobs.len());
    for job in jobs {
        match job {
            Prepared::Plain(row) => {
                found.extend(db::insert_all(conn, q, std::slice::from_ref(row), may_exist).await?)
            }
            Prepared::Unique {
                spec,
                key,
                ttl_secs,
                fresh,
                ..
            } => found.push(
                db::enqueue_unique(
                    conn,
                    q,
                    spec,
                    key.as_deref(),
                    *ttl_secs,
                    may_exist || !fresh,
                )
                .await?,
            ),
        }
    }
    Ok(found)
}

impl Client {
    /// Enqueues one job in its own transaction; idle workers are woken by
    /// its commit, before this returns.
    ///
    /// Concurrent calls on one client (and its clones) share their commit:
    /// while another enqueue of this client is in flight, the job joins a
    /// transaction with the other calls waiting then (group commit), which
    /// is how many tasks enqueueing one job each get past the speed of one
    /// insert per transaction. Each call still returns once its own job is
    /// committed, and a call whose job PostgreSQL refuses is retried on its
    /// own, so it never fails another call's job.
    ///
    /// If the connection fails midway, the call tries again with the same
    /// job id (for up to [`crate::ClientBuilder::confirm_for`], 30 s by default):
    /// it returns `Ok` exactly
    /// when the job exists, or [`Error::Unconfirmed`] if the database stayed
    /// out of reach.
    pub async fn enqueue<O>(&self, job: NewJob<O>) -> Result<JobHandle<O>> {
        let job = Prepared::new(job)?;
        let mut handles = match job {
            Prepared::Plain(row) => self.insert_autocommit(vec![row]).await?,
            unique => self.insert_own_transaction(vec![unique]).await?,
        };
        handles
            .pop()
            .ok_or_else(|| Error::Database(sqlx::Error::RowNotFound))
    }

    /// Enqueues one job on `conn`, typically the caller's transaction
    /// (`&mut tx`): invisible to workers until it commits, gone if it rolls back.
    pub async fn enqueue_tx<O>(
        &self,
        conn: &mut PgConnection,
        job: NewJob<O>,
    ) -> Result<JobHandle<O>> {
        let mut handles = self.enqueue_many_tx(conn, vec![job]).await?;
        handles
            .pop()
            .ok_or_else(|| Error::Database(sqlx::Error::RowNotFound))
    }

    /// Enqueues many jobs atomically, in their own transaction; handles come
    /// back in input order. From 1,000 jobs that are all due now (no
    /// ETA or delay, not unique, no id of the caller's) the rows are
    /// streamed with COPY; otherwise
    /// one statement per 5,000 jobs. Like [`Client::enqueue`], it
    /// confirms its commit if the connection fails midway.
    pub async fn enqueue_many<O>(&self, jobs: Vec<NewJob<O>>) -> Result<Vec<JobHandle<O>>> {
        let jobs = prepare(jobs)?;
        if jobs
            .iter()
            .any(|job| matches!(job, Prepared::Unique { .. }))
        {
            return self.insert_own_transaction(jobs).await;
        }
        let rows: Vec<InsertRow> = jobs
            .into_iter()
            .filter_map(|job| match job {
                Prepared::Plain(row) => Some(row),
                Prepared::Unique { .. } => None,
            })
            .collect();
        // COPY cannot look for an id among finished jobs: only new ids.
        let due_now =
            |row: &InsertRow| row.run_at.is_none() && row.delay_secs.is_none() && row.fresh_id;
        if rows.len() >= COPY_MIN && rows.iter().all(due_now) {
            match self.copy_rows(&rows).await {
                Ok(true) => {
                    return Ok(rows
                        .iter()
                        .map(|row| JobHandle::new(self.clone(), row.id, true))
                        .collect());
                }
                // An id existed: insert instead, which finds the existing job.
                Ok(false) => {}
                // The COPY may have committed: inserting finds its jobs.
                Err(error) if error.is_transient() => {
                    tracing::warn!(%error, "conveyor: bulk enqueue interrupted; confirming it with the same job ids");
                    let found = confirm::insert(
                        &self.inner.pool,
                        self.inner.queries,
                        self.inner.confirm_for,
                        &rows,
                        true,
                    )
                    .await?;
                    return Ok(self.handles(found));
                }
                Err(error) => return Err(error),
            }
        }
        if rows.len() <= BULK_CHUNK {
            // One statement: its own transaction.
            return self.insert_autocommit(rows).await;
        }
        let found = confirm::insert(
            &self.inner.pool,
            self.inner.queries,
            self.inner.confirm_for,
            &rows,
            false,
        )
        .await?;
        Ok(self.handles(found))
    }

    /// Enqueues many jobs on `conn` (e.g. the caller's transaction).
    pub async fn enqueue_many_tx<O>(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob<O>>,
    ) -> Result<Vec<JobHandle<O>>> {
        let jobs = prepare(jobs)?;
        let found = insert(self, conn, &jobs, false).await?;
        Ok(self.handles(found))
    }

    /// Inserts `jobs` in a transaction of their own, confirming its commit.
    async fn insert_own_transaction<O>(&self, jobs: Vec<Prepared>) -> Result<Vec<JobHandle<O>>> {
        let ids = || jobs.iter().map(Prepared::id).collect();
        let answer = until_answered(
            &self.inner.pool,
            self.inner.confirm_for,
            ids,
            |mut conn, sent| {
                let jobs = &jobs;
                async move {
                    let mut tx = conn.begin_with(crate::db::BEGIN).await?;
                    let found = insert(self, &mut tx, jobs, sent).await?;
                    tx.commit().await?;
                    Ok(found)
                }
            },
        )
        .await?;
        let keys = jobs.iter().map(|job| (job.id(), job.fresh()));
        Ok(self.handles(ours(keys, answer.value, answer.resent)))
    }

    /// Bulk path of [`Client::enqueue_many`]: COPY in one transaction, then
    /// one job_ready notification per queue. False if some id already
    /// existed (nothing was written).
    async fn copy_rows(&self, rows: &[InsertRow]) -> Result<bool> {
        let q = self.inner.queries;
        let mut conn = self.inner.pool.acquire().await?;
        let mut tx = conn.begin_with(crate::db::BEGIN).await?;
        db::defer_notify(&mut tx, q).await?;
        match db::copy_jobs(&mut tx, q, rows).await {
            Ok(_) => {}
            Err(Error::Database(sqlx::Error::Database(e))) if e.is_unique_violation() => {
                tx.rollback().await?;
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        tx.commit().await?;
        drop(conn);
        let queues: std::collections::BTreeSet<&str> =
            rows.iter().map(|row| row.queue.as_str()).collect();
        let channel = q.job_ready_channel;
        let notes = queues
            .into_iter()
            .map(|queue| {
                let payload = serde_json::json!({"queue": queue, "scheduled": false});
                (channel, payload.to_string())
            })
            .collect();
        let _ = self.inner.notifier.send(notes).await;
        Ok(true)
    }

    /// Inserts at most [`BULK_CHUNK`] plain jobs in a transaction of their
    /// own. Alone, it runs at once, in one autocommit statement. With other
    /// inserts of this client in flight, it joins them in a shared
    /// transaction (see `group_commit.rs`). Either way the insert trigger
    /// wakes idle workers at commit, before this returns.
    async fn insert_autocommit<O>(&self, rows: Vec<InsertRow>) -> Result<Vec<JobHandle<O>>> {
        use std::sync::atomic::Ordering;
        struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let concurrent = self.inner.inserting.fetch_add(1, Ordering::Relaxed) > 0;
        let _in_flight = InFlight(&self.inner.inserting);
        let found = if concurrent {
            self.inner.group_commit.insert(rows).await?
        } else {
            confirm::insert(
                &self.inner.pool,
                self.inner.queries,
                self.inner.confirm_for,
                &rows,
                false,
            )
            .await?
        };
        Ok(self.handles(found))
    }

    /// Handles for inserted (or found) jobs, in order.
    fn handles<O>(&self, found: Vec<Inserted>) -> Vec<JobHandle<O>> {
        found
            .into_iter()
            .map(|found| JobHandle::new(self.clone(), found.id, found.inserted))
            .collect()
    }

    /// Enqueues a [`crate::Chain`], [`crate::Group`] or [`crate::Chord`]
    /// atomically: its first jobs and its `conveyor.workflows` rows commit
    /// together, in their own transaction. Like [`Client::enqueue`], it
    /// confirms its commit if the connection fails midway.
    pub async fn enqueue_workflow<W: crate::Workflow>(&self, workflow: W) -> Result<W::Handle> {
        let (spec, handle) = workflow.build(self)?;
        let ids = crate::workflow::job_ids(&spec)?;
        until_answered(
            &self.inner.pool,
            self.inner.confirm_for,
            || ids.clone(),
            |mut conn, resent| {
                let (spec, ids) = (&spec, &ids);
                async move {
                    let mut tx = conn.begin_with(crate::db::BEGIN).await?;
                    let taken = db::existing_ids(&mut *tx, self.inner.queries, ids).await?;
                    if resent && taken.len() == ids.len() {
                        // Our earlier try committed: the workflow is there.
                        return Ok(());
                    }
                    self.spawn_workflow(&mut tx, spec, &taken).await?;
                    tx.commit().await?;
                    Ok(())
                }
            },
        )
        .await?;
        Ok(handle)
    }

    /// Enqueues a workflow on `conn`, typically the caller's transaction: on
    /// rollback it leaves no rows at all. Fails with [`Error::InvalidJob`],
    /// enqueueing nothing, if a job of the workflow was given an id that is
    /// taken or that another of its jobs has.
    pub async fn enqueue_workflow_tx<W: crate::Workflow>(
        &self,
        conn: &mut PgConnection,
        workflow: W,
    ) -> Result<W::Handle> {
        let (spec, handle) = workflow.build(self)?;
        let ids = crate::workflow::job_ids(&spec)?;
        let taken = db::existing_ids(&mut *conn, self.inner.queries, &ids).await?;
        self.spawn_workflow(conn, &spec, &taken).await?;
        Ok(handle)
    }

    /// Materialises a workflow's spec, unless one of its job ids is `taken`:
    /// a member skipped because its id exists would leave the workflow
    /// running forever.
    async fn spawn_workflow(
        &self,
        conn: &mut PgConnection,
        spec: &Value,
        taken: &[JobId],
    ) -> Result<()> {
        if let Some(id) = taken.first() {
            return Err(Error::InvalidJob(format!(
                "job id {id} is taken: a workflow's jobs need new ids"
            )));
        }
        db::spawn(conn, self.inner.queries, spec).await
    }
}
