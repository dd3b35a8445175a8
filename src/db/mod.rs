//! The only place the library sends SQL from.
//!
//! Every statement is a `.sql` file of `sql/<area>/` at the repository's
//! top (read with `sql!`), written against the schema `conveyor`;
//! [`Queries::for_schema`] rewrites the schema name once per schema and
//! keeps the texts for the life of the process. Each function here runs one
//! statement on whatever connection it is given (a pool, a pooled
//! connection, or the caller's transaction). One module per area:
//! `enqueue`, `claim`, `outcome` (what a claim's holder writes), `queues`,
//! `inspect`, `workflows`, `maintenance`, `migrations`; this file holds the
//! statement texts. PL/pgSQL functions live in `sql/<area>/` too, one file
//! each, named after the function (`migrations::FUNCTIONS`); `sql/README.md`
//! tells them apart.

/// The text of a file of `sql/` (the repository's top), named by its path
/// there: `sql!("claim/claim.sql")`. Every statement file and function file
/// is read this way (`sql/README.md`).
macro_rules! sql {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $path))
    };
}

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

pub(crate) use claim::{Claim, Undecodable, claim, promote};
pub(crate) use enqueue::{BULK_CHUNK, COPY_MIN};
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
        let columns = sql!("inspect/job_columns.sql").trim();
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
            insert_jobs: load(sql!("enqueue/insert_jobs.sql")),
            insert_job: load(sql!("enqueue/insert_job.sql")),
            notify: load(sql!("enqueue/notify.sql")),
            copy_jobs: load(sql!("enqueue/copy_jobs.sql")),
            defer_notify: load(sql!("enqueue/defer_notify.sql")),
            fetch_job: load(sql!("inspect/fetch_job.sql")),
            fetch_job_anywhere: load(sql!("inspect/fetch_job_anywhere.sql")),
            fetch_state: load(sql!("inspect/fetch_state.sql")),
            fetch_state_anywhere: load(sql!("inspect/fetch_state_anywhere.sql")),
            promote: load(sql!("claim/promote.sql")),
            claim: load(sql!("claim/claim.sql")),
            complete: load(sql!("outcome/complete.sql")),
            heartbeat: load(sql!("lease/heartbeat.sql")),
            count_leases_lost: load(sql!("stats/count_leases_lost.sql")),
            recorded: load(sql!("outcome/recorded.sql")),
            release: load(sql!("lease/release.sql")),
            rescue: load(sql!("maintenance/rescue.sql")),
            settle_claims: load("SELECT conveyor_internal.settle_claims($1)"),
            settle_expired_claims: load("SELECT conveyor_internal.settle_expired_claims($1::int)"),
            rotate_ring: load(sql!("ring/call_rotate_ring.sql")),
            ring_blocker: load(sql!("ring/ring_blocker.sql")),
            after_finish: load(sql!("workflow/call_after_finish.sql")),
            spawn: load(sql!("workflow/call_spawn.sql")),
            existing_ids: load(sql!("enqueue/existing_ids.sql")),
            fetch_workflow: load(sql!("workflow/fetch_workflow.sql")),
            workflow_results: load(sql!("workflow/workflow_results.sql")),
            cancel: load(sql!("inspect/call_cancel.sql")),
            requeue: load(sql!("inspect/call_requeue.sql")),
            enqueue_unique: load(sql!("enqueue/call_enqueue_unique.sql")),
            lock_queue: load(sql!("claim/lock_queue.sql")),
            queue_limits: load(sql!("claim/queue_limits.sql")),
            count_starts: load(sql!("claim/count_starts.sql")),
            queue_settings: load(sql!("queues/queue_settings.sql")),
            list_jobs: load(sql!("inspect/list_jobs.sql")),
            worker_register: load(sql!("workers/worker_register.sql")),
            worker_beat: load(sql!("workers/worker_beat.sql")),
            worker_deregister: load(sql!("workers/worker_deregister.sql")),
            workers_mark_dead: load(sql!("workers/workers_mark_dead.sql")),
            workers_list: load(sql!("workers/workers_list.sql")),
            list_job_ids: load(
                &sql!("inspect/list_job_ids.sql")
                    .replace("{list_jobs}", sql!("inspect/list_jobs.sql")),
            ),
            count_jobs: load(sql!("inspect/count_jobs.sql")),
            queue_stats: load(sql!("inspect/queue_stats.sql")),
            #[cfg(feature = "metrics")]
            metrics_totals: load(sql!("metrics/metrics_totals.sql")),
            #[cfg(feature = "metrics")]
            metrics_queues: load(sql!("metrics/metrics_queues.sql")),
            #[cfg(feature = "metrics")]
            metrics_sample: load(sql!("metrics/metrics_sample.sql")),
            stats: load(sql!("stats/stats.sql")),
            delete_jobs: load(sql!("inspect/delete_jobs.sql")),
            delete_job: load(sql!("inspect/delete_job.sql")),
            enqueued_jobs: load(sql!("inspect/enqueued_jobs.sql")),
            prune: load(sql!("maintenance/prune.sql")),
            drop_history: load(sql!("maintenance/drop_history.sql")),
            create_history: load(sql!("maintenance/create_history.sql")),
            prune_leftovers: load(sql!("maintenance/prune_leftovers.sql")),
            prune_stats: load(sql!("stats/prune_stats.sql")),
            fold_stats: load(sql!("stats/fold_stats.sql")),
            stats_unfolded: load(sql!("stats/stats_unfolded.sql")),
            periodic_last_slots: load(sql!("periodic/periodic_last_slots.sql")),
            periodic_record_slot: load(sql!("periodic/periodic_record_slot.sql")),
            periodic_announce: load(sql!("periodic/periodic_announce.sql")),
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
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/sql"
        ))];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "sql") {
                    files.push(path);
                }
            }
        }
        for path in files {
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
