//! What a [`NewJob`] becomes when it is stored: the checks that run before
//! anything is sent (the same as `conveyor.jobs`' constraints), its JSON spec
//! (workflow members, chain steps, callbacks) and its insert row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::NewJob;
use super::new_job::Unique;
use crate::db::InsertRow;
use crate::error::{Error, Result};
use crate::job::JobId;

impl<O> NewJob<O> {
    /// The spec of this job as a callback; `pass_result` makes it receive
    /// the result (success callbacks) or a `JobFailure` (error callbacks).
    pub(crate) fn callback_spec(mut self, pass_result: bool) -> Result<Value> {
        self.check_follow_up()?;
        self.pass_result |= pass_result;
        let id = self.id.unwrap_or_else(uuid::Uuid::now_v7);
        Ok(self.spec_with_id(id, None, None))
    }

    pub(crate) fn spec_with_id(
        &self,
        id: JobId,
        workflow_id: Option<uuid::Uuid>,
        index: Option<i32>,
    ) -> Value {
        serde_json::json!({
            "kind": "job",
            "id": id,
            "task": self.task,
            "args": self.args.as_ref().ok(),
            "pass_result": self.pass_result,
            "queue": self.queue,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay_secs": self.delay.map(|d| d.as_secs_f64()),
            "max_retries": self.max_retries,
            "retry_backoff_base_secs": self.retry_backoff_base.as_secs_f64(),
            "timeout_secs": self.timeout.map(|d| d.as_secs_f64()),
            "headers": self.headers,
            "workflow_id": workflow_id,
            "workflow_index": index,
            "on_success": self.on_success,
            "on_error": self.on_error,
        })
    }

    /// [`NewJob::check`] for a job inserted from a spec: a callback, a chain
    /// step, a group or chord member or a chord's callback. Such a job cannot
    /// be unique (yet): refused, rather than silently enqueued without its
    /// key.
    pub(crate) fn check_follow_up(&self) -> Result<()> {
        self.check()?;
        if self.unique.is_some() {
            return Err(Error::InvalidJob(format!(
                "task `{}`: .unique() works on jobs enqueued directly, not on callbacks or \
                 workflow members and steps",
                self.task
            )));
        }
        Ok(())
    }

    /// Fails with [`Error::InvalidJob`] if the job cannot be stored as
    /// built: the checks of `conveyor.jobs`' constraints (task and queue
    /// names, time limits, times), made before anything is written, and the
    /// same for callbacks (checked when they were added), so a follow-up
    /// can never fail when its turn comes.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |why: String| Err(Error::InvalidJob(format!("task `{}`: {why}", self.task)));
        if let Err(e) = &self.args {
            return invalid(format!("cannot serialise args: {e}"));
        }
        if let Some(why) = &self.invalid {
            return Err(Error::InvalidJob(why.clone()));
        }
        for (what, name, longest) in [("task", &self.task, 255), ("queue", &self.queue, 128)] {
            if name.is_empty() || name.chars().count() > longest || name.contains('\0') {
                return invalid(format!(
                    "the {what} name must be 1 to {longest} characters, without NUL (got {name:?})"
                ));
            }
        }
        if i32::try_from(self.max_retries).is_err() {
            return invalid(format!("max_retries {} is too large", self.max_retries));
        }
        let durations = [
            ("retry_backoff_base", Some(self.retry_backoff_base)),
            ("delay", self.delay),
            ("timeout", self.timeout),
        ];
        for (what, duration) in durations {
            if duration.is_some_and(|d| d > LONGEST) {
                return invalid(format!("{what} is over 100 years"));
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return invalid("a timeout must be longer than zero".into());
        }
        if let Some(Unique::For(ttl)) = self.unique.as_ref().map(|u| u.scope)
            && (ttl.is_zero() || ttl > LONGEST)
        {
            return invalid(
                "a uniqueness TTL must be longer than zero and at most 100 years".into(),
            );
        }
        if let Some(at) = self.run_at
            && !(earliest_time()..latest_time()).contains(&at)
        {
            return invalid(format!("run_at {at} is not between years 1 and 9999"));
        }
        Ok(())
    }

    pub(crate) fn into_row(self) -> Result<InsertRow> {
        if let Err(source) = self.args {
            return Err(Error::Json {
                task: self.task,
                source,
            });
        }
        self.check()?;
        let task = self.task;
        let args = self.args.unwrap_or_default();
        let max_retries = i32::try_from(self.max_retries).unwrap_or(i32::MAX);
        Ok(InsertRow {
            id: self.id.unwrap_or_else(uuid::Uuid::now_v7),
            fresh_id: self.id.is_none(),
            queue: self.queue,
            task,
            args,
            headers: Value::Object(self.headers),
            priority: self.priority,
            run_at: self.run_at,
            delay_secs: self.delay.map(|d| d.as_secs_f64()),
            max_retries,
            backoff_base_secs: self.retry_backoff_base.as_secs_f64(),
            timeout_secs: self.timeout.map(|d| d.as_secs_f64()),
            on_success: (!self.on_success.is_empty()).then_some(Value::Array(self.on_success)),
            on_error: (!self.on_error.is_empty()).then_some(Value::Array(self.on_error)),
        })
    }
}

/// The longest delay, timeout, backoff unit or uniqueness TTL a job takes.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The range of times `conveyor.jobs` holds (the domain
/// `conveyor.finite_timestamptz`).
fn earliest_time() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_135_596_800, 0).unwrap_or_default() // 0001-01-01
}
fn latest_time() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_800, 0).unwrap_or_default() // 10000-01-01
}
