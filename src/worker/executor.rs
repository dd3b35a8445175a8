//! Runs one claimed job: decodes nothing itself (the handler does), enforces
//! the timeout, catches panics, stops the handler if the lease is lost, and
//! turns what happened into an outcome for the completer.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::db::OutcomeRow;
use crate::job::{Job, JobState};
use crate::retry::{MAX_BACKOFF, fibonacci_backoff};
use crate::supervise::AbortOnDrop;
use crate::task::{Failure, TaskContext, TaskError};
use crate::worker::handler::Handler;
use crate::worker::health::Health;
use crate::worker::lease::Lease;

/// Per-job settings the worker passes down.
#[derive(Clone)]
pub(crate) struct Limits {
    pub worker_id: Arc<str>,
    pub default_timeout: Option<Duration>,
    pub cancel_grace: Duration,
    pub health: Arc<Health>,
}

enum Ended {
    Joined(Result<Result<serde_json::Value, TaskError>, tokio::task::JoinError>),
    TimedOut(Duration),
    /// Told to stop: cancellation asked for, or the lease lost.
    Stop,
}

pub(crate) async fn execute(
    job: Job,
    lease: Arc<Lease>,
    handler: Arc<dyn Handler>,
    limits: Limits,
    outcomes: crate::worker::completer::Outbox,
) {
    let span = tracing::info_span!(
        "conveyor.job",
        job.id = %job.id,
        job.task = %job.task,
        job.queue = %job.queue,
        job.attempt = job.attempt,
    );
    crate::trace::set_parent(&span, &job.headers);
    let ctx = TaskContext {
        id: job.id,
        task: job.task.clone(),
        queue: job.queue.clone(),
        attempt: u32::try_from(job.attempt).unwrap_or(0),
        max_retries: u32::try_from(job.max_retries).unwrap_or(0),
        headers: job.headers.clone(),
        worker_id: limits.worker_id.to_string(),
        lease_token: lease.token,
        cancel: lease.cancel.clone(),
        lease_lost: lease.lost.clone(),
    };
    let timeout = job.timeout.or(handler.timeout()).or(limits.default_timeout);
    // A limit too far away to represent (Duration::MAX) means no limit.
    let deadline = timeout.and_then(|limit| tokio::time::Instant::now().checked_add(limit));
    let call = handler.call(ctx, job.args.clone()).instrument(span.clone());
    let mut running = AbortOnDrop(tokio::spawn(call));
    let ended = tokio::select! {
        joined = &mut running.0 => Ended::Joined(joined),
        _ = sleep_until_some(deadline) => Ended::TimedOut(timeout.unwrap_or_default()),
        _ = lease.cancel.cancelled() => Ended::Stop,
        _ = lease.expired() => {
            // Not renewed in time (the database is out of reach): another
            // worker may take the job once the lease lapses there.
            lease.mark_lost();
            Ended::Stop
        }
    };
    let result = match ended {
        Ended::Joined(joined) => joined_result(joined),
        Ended::TimedOut(limit) => {
            running.0.abort();
            Err(TaskError::retry(format!(
                "timed out after {:.3}s",
                limit.as_secs_f64()
            )))
        }
        Ended::Stop => {
            // The handler was told (ctx.cancelled()); it may still finish.
            let finished = tokio::time::timeout(limits.cancel_grace, &mut running.0).await;
            match finished {
                Ok(Ok(Ok(value))) if !lease.is_lost() => Ok(value),
                _ => {
                    running.0.abort();
                    let outcome = OutcomeRow::cancelled(&job, lease.token);
                    span.in_scope(|| deliver(&job, &lease, outcome, &limits, &outcomes));
                    return;
                }
            }
        }
    };
    let outcome = span.in_scope(|| outcome_of(&job, lease.token, result));
    span.in_scope(|| deliver(&job, &lease, outcome, &limits, &outcomes));
}

/// Hands the outcome to the completer, unless the lease was lost: then it
/// is dropped (another attempt may be running), with a warning and a count.
fn deliver(
    job: &Job,
    lease: &Lease,
    outcome: OutcomeRow,
    limits: &Limits,
    outcomes: &crate::worker::completer::Outbox,
) {
    if lease.hand_over() {
        if outcome.state == JobState::Cancelled {
            tracing::info!("conveyor: job cancelled");
        }
        outcomes.send(outcome);
    } else {
        tracing::warn!(
            "conveyor: this worker lost the job's lease (the database no longer holds it for \
             this attempt); its outcome is not recorded"
        );
        limits.health.lease_lost(&job.queue, &job.task);
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn joined_result(
    joined: Result<Result<serde_json::Value, TaskError>, tokio::task::JoinError>,
) -> Result<serde_json::Value, TaskError> {
    match joined {
        Ok(result) => result,
        Err(error) if error.is_panic() => {
            let message = crate::supervise::panic_message(error.into_panic().as_ref());
            Err(TaskError::retry(format!("handler panicked: {message}")))
        }
        Err(_) => Err(TaskError::retry("handler task was aborted")),
    }
}

/// The state an attempt leads to, under the job's retry settings.
pub(crate) fn outcome_of(
    job: &Job,
    lease_token: i64,
    result: Result<serde_json::Value, TaskError>,
) -> OutcomeRow {
    let mut outcome = OutcomeRow {
        id: job.id,
        lease_token,
        queue: job.queue.clone(),
        task: job.task.clone(),
        state: JobState::Success,
        result: None,
        error: None,
        retry_in_secs: None,
        wait_ms: crate::db::wait_ms(job),
        follow_up: job.has_follow_up(),
    };
    let error = match result {
        Ok(mut value) => {
            scrub(&mut value);
            tracing::debug!("conveyor: job succeeded");
            outcome.result = Some(value);
            return outcome;
        }
        Err(error) => error,
    };
    let retries_left = job.attempt <= job.max_retries;
    let delay = match error.failure() {
        Failure::Fail => None,
        _ if !retries_left => None,
        Failure::RetryAfter(delay) => Some(delay.min(MAX_BACKOFF)),
        Failure::Retry => Some(fibonacci_backoff(
            u32::try_from(job.attempt).unwrap_or(1),
            job.retry_backoff_base,
        )),
    };
    match delay {
        Some(delay) => {
            tracing::info!(error = %error, retry_in = ?delay, "conveyor: attempt failed, will retry");
            outcome.state = JobState::Retry;
            outcome.retry_in_secs = Some(delay.as_secs_f64());
        }
        None => {
            tracing::warn!(error = %error, "conveyor: job failed");
            outcome.state = JobState::Failure;
        }
    }
    outcome.error = Some(error.message().replace('\0', "\u{FFFD}"));
    outcome
}

/// PostgreSQL cannot store NUL in text or jsonb: one NUL in a result would
/// make the whole outcome batch fail. Replace it (U+FFFD) in strings and keys.
fn scrub(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{FFFD}"),
        Value::Array(items) => items.iter_mut().for_each(scrub),
        Value::Object(map) if map.keys().any(|k| k.contains('\0')) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                scrub(&mut v);
                map.insert(k.replace('\0', "\u{FFFD}"), v);
            }
        }
        Value::Object(map) => map.values_mut().for_each(scrub),
        _ => {}
    }
}
