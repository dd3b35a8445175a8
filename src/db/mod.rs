//! The only place SQL lives.
//!
//! Every statement is a `.sql` file beside this module, written against the
//! schema `conveyor`; [`Queries::for_schema`] rewrites the schema name once per
//! schema and keeps the texts for the life of the process. Each function here
//! runs one statement on whatever connection it is given (a pool, a pooled
//! connection, or the caller's transaction). One module per area:
//! `enqueue`, `claim`, `outcome` (what a claim's holder writes), `queues`,
//! `inspect`, `workflows`, `maintenance`, `migrations`; this file holds the
//! statement texts. PL/pgSQL functions live in `migrations/functions/`, one
//! file each (`migrations::FUNCTIONS`).

mod claim;
#[cfg(feature = "dashboard")]
pub(crate) mod dashboard;
mod enqueue;
mod exec;
mod inspect;
mod maintenance;
#[cfg(feature = "metrics")]
mod metrics;
mod migrations;
#[cfg(test)]
mod model_test;
mod outcome;
mod queues;
mod ring;
pub(crate) use ring::READY_BANKS;
mod workers;
mod workflows;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::job::JobState;

pub(crate) use claim::{Claim, Undecodable, claim, claim_statement, promote};
pub use enqueue::{BULK_CHUNK, COPY_MIN};
pub(crate) use enqueue::{
    InsertRow, Inserted, copy_jobs, defer_notify, enqueue_unique, existing_ids, insert_all, notify,
};
pub(crate) use exec::Target;
pub(crate) use inspect::{
    cancel, count_jobs, delete_jobs, enqueued_jobs, fetch_job, fetch_state, list_job_ids,
    list_jobs, queue_stats, requeue, stats,
};
#[cfg(feature = "dashboard")]
pub(crate) use maintenance::periodic_lock_name;
pub(crate) use maintenance::{
    AnnouncedSchedule, announce_periodic, backend_pid, create_history, drop_history, fold_stats,
    periodic_last_slots, periodic_record_slot, ping, prune, prune_leftovers, prune_stats, rescue,
    ring_blocker, rotate_ring, stats_unfolded, try_lead_periodic,
};
#[cfg(feature = "metrics")]
pub(crate) use metrics::{GaugeLimits, MetricsTotals, QueueCounts, metrics_queues, metrics_totals};
pub(crate) use migrations::{
    applied_migrations, apply_functions, create_schema, execute_in_transaction, lock_migrations,
};
pub(crate) use outcome::{
    Lease, OutcomeRow, after_finish, complete, count_leases_lost, heartbeat, recorded, release,
    wait_ms,
};
pub(crate) use queues::{QueueSetting, queue_limits, set_queue};
pub(crate) use workers::{
    Registration, beat_worker, deregister_worker, list_workers, mark_dead_workers, register_worker,
};
pub(crate) use workflows::{fetch_workflow, spawn, workflow_results};

/// The default schema.
pub(crate) const DEFAULT_SCHEMA: &str = "conveyor";

/// How every transaction Conveyor opens itself begins (one round trip): the
/// server ends the session if the transaction sits idle for 5 s. A process
/// cut off from the database mid-transaction, its TCP connection still open,
/// would otherwise hold its locks (the rescuer's advisory lock, a queue row
/// locked for a limited claim, a workflow's counter) until TCP keepalive
/// gives up, hours later, stopping that work for every other worker. Our
/// transactions run statement after statement with no user code between, so
/// a healthy one never idles that long; one ended this way rolls back and is
/// retried like any other failed write.
pub(crate) const BEGIN: &str = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '5s'";

// Statements that join the jobs table to arrays of many rows (outcomes,
// leases) run unprepared, `.persistent(false)`, so PostgreSQL plans them with
// the actual arrays at every call. A cached generic plan guesses the arrays'
// sizes and can pick a nested loop comparing every row with every row: it
// took 500 ms to record a batch of 1,000 outcomes instead of 15.

/// Statement texts for one schema.
#[derive(Debug)]
pub(crate) struct Queries {
    pub schema: &'static str,
    /// Whether statements go through a transaction-mode pooler: each then
    /// runs unnamed and inside a transaction (see [`Queries::on`]).
    pub pooled: bool,
    /// Channel on which inserts and retries announce work: payload = queue name.
    pub job_ready_channel: &'static str,
    /// Channel on which outcomes announce finished jobs: payload = ids, comma-separated.
    pub job_finished_channel: &'static str,
    /// Takes, for the session, the shared advisory lock that says someone
    /// listens on `job_finished_channel` (see notify.sql).
    pub finished_listener_lock: &'static str,
    /// Channel telling workers to cancel a running job: payload = its id.
    pub job_cancel_channel: &'static str,
    /// Channel announcing changed queue settings: payload = queue name.
    pub queue_changed_channel: &'static str,
    /// Channel announcing that the ready ring moved to another bank of
    /// slots: payload = the bank (`conveyor_internal.rotate_ring()`).
    pub ring_channel: &'static str,
    insert_jobs: &'static str,
    insert_job: &'static str,
    notify: &'static str,
    copy_jobs: &'static str,
    defer_notify: &'static str,
    fetch_job: &'static str,
    fetch_job_anywhere: &'static str,
    fetch_state: &'static str,
    fetch_state_anywhere: &'static str,
    promote: &'static str,
    claim: &'static str,
    claim_statement: &'static str,
    complete: &'static str,
    heartbeat: &'static str,
    count_leases_lost: &'static str,
    recorded: &'static str,
    release: &'static str,
    rescue: &'static str,
    settle_claims: &'static str,
    settle_expired_claims: &'static str,
    rotate_ring: &'static str,
    ring_blocker: &'static str,
    after_finish: &'static str,
    spawn: &'static str,
    existing_ids: &'static str,
    fetch_workflow: &'static str,
    workflow_results: &'static str,
    cancel: &'static str,
    requeue: &'static str,
    enqueue_unique: &'static str,
    lock_queue: &'static str,
    queue_limits: &'static str,
    count_starts: &'static str,
    queue_settings: &'static str,
    list_jobs: &'static str,
    worker_register: &'static str,
    worker_beat: &'static str,
    worker_deregister: &'static str,
    workers_mark_dead: &'static str,
    workers_list: &'static str,
    list_job_ids: &'static str,
    count_jobs: &'static str,
    queue_stats: &'static str,
    #[cfg(feature = "metrics")]
    metrics_totals: &'static str,
    #[cfg(feature = "metrics")]
    metrics_queues: &'static str,
    #[cfg(feature = "metrics")]
    metrics_sample: &'static str,
    stats: &'static str,
    delete_jobs: &'static str,
    delete_job: &'static str,
    enqueued_jobs: &'static str,
    prune: &'static str,
    drop_history: &'static str,
    create_history: &'static str,
    prune_leftovers: &'static str,
    prune_stats: &'static str,
    fold_stats: &'static str,
    stats_unfolded: &'static str,
    periodic_last_slots: &'static str,
    periodic_record_slot: &'static str,
    periodic_announce: &'static str,
    create_schema: &'static str,
    migrations_table: &'static str,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Checks a schema name: lower-case letters, digits and `_`, not starting with a digit.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 48
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "schema name `{schema}` must be 1-48 characters of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

/// Rewrites `conveyor.` to `<schema>.` and `conveyor_internal.` to
/// `<schema>_internal.` in a statement written for the default schema.
pub(crate) fn in_schema(sql: &str, schema: &str) -> String {
    if schema == DEFAULT_SCHEMA {
        sql.to_string()
    } else {
        sql.replace("conveyor_internal.", &format!("{schema}_internal."))
            .replace("conveyor.", &format!("{schema}."))
    }
}

impl Queries {
    /// The statements for `schema` (validated by the caller), built once per process.
    pub(crate) fn for_schema(schema: &str) -> &'static Queries {
        Queries::for_schema_pooled(schema, false)
    }

    /// [`Queries::for_schema`], for a connection direct to PostgreSQL
    /// (`pooled` false) or through a transaction-mode pooler.
    pub(crate) fn for_schema_pooled(schema: &str, pooled: bool) -> &'static Queries {
        type Cache = HashMap<(String, bool), &'static Queries>;
        static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let mut cache = cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(queries) = cache.get(&(schema.to_string(), pooled)) {
            return queries;
        }
        let columns = include_str!("job_columns.sql").trim();
        let load = |sql: &str| {
            let sql = sql.replace("{job_columns}", columns);
            leak(in_schema(&sql, schema))
        };

        let queries: &'static Queries = Box::leak(Box::new(Queries {
            schema: leak(schema.to_string()),
            pooled,
            job_ready_channel: leak(format!("{schema}.job_ready")),
            job_finished_channel: leak(format!("{schema}.job_finished")),
            finished_listener_lock: leak(format!(
                "SELECT pg_advisory_lock_shared(hashtextextended('{schema}.job_finished', 0))"
            )),
            job_cancel_channel: leak(format!("{schema}.job_cancel")),
            queue_changed_channel: leak(format!("{schema}.queue_changed")),
            ring_channel: leak(format!("{schema}.ring")),
            insert_jobs: load(include_str!("insert_jobs.sql")),
            insert_job: load(include_str!("insert_job.sql")),
            notify: load(include_str!("notify.sql")),
            copy_jobs: load(include_str!("copy_jobs.sql")),
            defer_notify: load(include_str!("defer_notify.sql")),
            fetch_job: load(include_str!("fetch_job.sql")),
            fetch_job_anywhere: load(include_str!("fetch_job_anywhere.sql")),
            fetch_state: load(include_str!("fetch_state.sql")),
            fetch_state_anywhere: load(include_str!("fetch_state_anywhere.sql")),
            promote: load(include_str!("promote.sql")),
            claim: load(include_str!("claim.sql")),
            claim_statement: load("SELECT conveyor_internal.claim_statement($1::integer)"),
            complete: load(include_str!("complete.sql")),
            heartbeat: load(include_str!("heartbeat.sql")),
            count_leases_lost: load(include_str!("count_leases_lost.sql")),
            recorded: load(include_str!("recorded.sql")),
            release: load(include_str!("release.sql")),
            rescue: load(include_str!("rescue.sql")),
            settle_claims: load("SELECT conveyor_internal.settle_claims($1)"),
            settle_expired_claims: load("SELECT conveyor_internal.settle_expired_claims($1::int)"),
            rotate_ring: load(include_str!("rotate_ring.sql")),
            ring_blocker: load(include_str!("ring_blocker.sql")),
            after_finish: load(include_str!("after_finish.sql")),
            spawn: load(include_str!("spawn.sql")),
            existing_ids: load(include_str!("existing_ids.sql")),
            fetch_workflow: load(include_str!("fetch_workflow.sql")),
            workflow_results: load(include_str!("workflow_results.sql")),
            cancel: load(include_str!("cancel.sql")),
            requeue: load(include_str!("requeue.sql")),
            enqueue_unique: load(include_str!("enqueue_unique.sql")),
            lock_queue: load(include_str!("lock_queue.sql")),
            queue_limits: load(include_str!("queue_limits.sql")),
            count_starts: load(include_str!("count_starts.sql")),
            queue_settings: load(include_str!("queue_settings.sql")),
            list_jobs: load(include_str!("list_jobs.sql")),
            worker_register: load(include_str!("worker_register.sql")),
            worker_beat: load(include_str!("worker_beat.sql")),
            worker_deregister: load(include_str!("worker_deregister.sql")),
            workers_mark_dead: load(include_str!("workers_mark_dead.sql")),
            workers_list: load(include_str!("workers_list.sql")),
            list_job_ids: load(
                &include_str!("list_job_ids.sql")
                    .replace("{list_jobs}", include_str!("list_jobs.sql")),
            ),
            count_jobs: load(include_str!("count_jobs.sql")),
            queue_stats: load(include_str!("queue_stats.sql")),
            #[cfg(feature = "metrics")]
            metrics_totals: load(include_str!("metrics_totals.sql")),
            #[cfg(feature = "metrics")]
            metrics_queues: load(include_str!("metrics_queues.sql")),
            #[cfg(feature = "metrics")]
            metrics_sample: load(include_str!("metrics_sample.sql")),
            stats: load(include_str!("stats.sql")),
            delete_jobs: load(include_str!("delete_jobs.sql")),
            delete_job: load(include_str!("delete_job.sql")),
            enqueued_jobs: load(include_str!("enqueued_jobs.sql")),
            prune: load(include_str!("prune.sql")),
            drop_history: load(include_str!("drop_history.sql")),
            create_history: load(include_str!("create_history.sql")),
            prune_leftovers: load(include_str!("prune_leftovers.sql")),
            prune_stats: load(include_str!("prune_stats.sql")),
            fold_stats: load(include_str!("fold_stats.sql")),
            stats_unfolded: load(include_str!("stats_unfolded.sql")),
            periodic_last_slots: load(include_str!("periodic_last_slots.sql")),
            periodic_record_slot: load(include_str!("periodic_record_slot.sql")),
            periodic_announce: load(include_str!("periodic_announce.sql")),
            create_schema: leak(format!(
                "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE SCHEMA IF NOT EXISTS {schema}_internal"
            )),
            migrations_table: leak(format!("{schema}.schema_history")),
        }));
        cache.insert((schema.to_string(), pooled), queries);
        queries
    }

    /// Name of refinery's history table (schema-qualified).
    pub(crate) fn migrations_table(&self) -> &'static str {
        self.migrations_table
    }
}

fn parse_state(s: &str) -> Result<JobState> {
    s.parse().map_err(|e: String| {
        Error::Database(sqlx::Error::ColumnDecode {
            index: "state".into(),
            source: e.into(),
        })
    })
}

#[cfg(test)]
mod template_test {
    /// A placeholder (`{job_columns}`, `{list_jobs}`, …) in a comment of
    /// a statement file is replaced too, and a replacement of several lines
    /// then ends the comment early: the statement breaks.
    #[test]
    fn no_statement_names_a_placeholder_in_a_comment() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/db");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "sql") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                let Some((_, comment)) = line.split_once("--") else {
                    continue;
                };
                let named = comment.split('{').skip(1).any(|rest| {
                    rest.split_once('}').is_some_and(|(name, _)| {
                        !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    })
                });
                assert!(
                    !named,
                    "{}: placeholder in a comment: {line}",
                    path.display()
                );
            }
        }
    }
}
