//! How the CLI prints: JSON for scripts, tables for people.

use std::io::Write;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use conveyor::{Job, QueueStats, WorkerInfo};
use serde_json::Value;

use crate::failure::Failure;

/// Prints `value` as JSON, or `human()`. A reader that stopped early
/// (`| head`) ends the command quietly ([`Failure::BrokenPipe`]); `println!`
/// would panic.
pub fn print(as_json: bool, value: &Value, human: impl FnOnce() -> String) -> Result<(), Failure> {
    let text = if as_json {
        serde_json::to_string_pretty(value)?
    } else {
        human()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()?;
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY).set_header(header);
    table
}

pub fn stats_table(stats: &[QueueStats]) -> String {
    let mut t = table(&[
        "queue",
        "scheduled",
        "pending",
        "started",
        "retry",
        "success",
        "failure",
        "cancelled",
        "oldest pending",
        "ok/1m",
        "failed/1m",
        "ok/1h",
        "failed/1h",
        "paused",
    ]);
    for s in stats {
        t.add_row(vec![
            s.queue.clone(),
            s.scheduled.to_string(),
            s.pending.to_string(),
            s.started.to_string(),
            s.retry.to_string(),
            s.success.to_string(),
            s.failure.to_string(),
            s.cancelled.to_string(),
            s.oldest_pending_secs
                .map(|a| format!("{a:.1}s"))
                .unwrap_or_default(),
            s.processed_1m.to_string(),
            s.failed_1m.to_string(),
            s.processed_1h.to_string(),
            s.failed_1h.to_string(),
            if s.paused { "yes" } else { "" }.to_string(),
        ]);
    }
    t.to_string()
}

pub fn workers_table(workers: &[WorkerInfo]) -> String {
    let mut t = table(&[
        "id",
        "host",
        "pid",
        "version",
        "queues",
        "busy",
        "started",
        "last beat",
        "state",
    ]);
    for w in workers {
        t.add_row(vec![
            w.id.clone(),
            w.host.clone(),
            w.pid.to_string(),
            w.version.clone(),
            w.queues.join(","),
            format!("{}/{}", w.busy, w.concurrency),
            w.started_at.format("%F %T").to_string(),
            w.last_beat_at.format("%F %T").to_string(),
            match w.dead_at {
                Some(at) => format!("dead since {}", at.format("%F %T")),
                None => "live".to_string(),
            },
        ]);
    }
    t.to_string()
}

pub fn jobs_table(jobs: &[Job]) -> String {
    let mut t = table(&[
        "id",
        "queue",
        "task",
        "state",
        "attempt",
        "created",
        "last error",
    ]);
    for j in jobs {
        t.add_row(vec![
            j.id.to_string(),
            j.queue.clone(),
            j.task.clone(),
            j.state.to_string(),
            format!("{}/{}", j.attempt, i64::from(j.max_retries) + 1),
            j.created_at.format("%F %T").to_string(),
            j.last_error.clone().unwrap_or_default(),
        ]);
    }
    t.to_string()
}

pub fn job_detail(job: &Job) -> String {
    let mut out = Vec::new();
    let when =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    out.push(format!("job       {}", job.id));
    out.push(format!(
        "task      {} (queue {}, priority {})",
        job.task, job.queue, job.priority
    ));
    out.push(format!(
        "state     {} (attempt {} of {})",
        job.state,
        job.attempt,
        i64::from(job.max_retries) + 1
    ));
    out.push(format!("args      {}", job.args));
    if let Some(result) = &job.result {
        out.push(format!("result    {result}"));
    }
    out.push("timeline".to_string());
    out.push(format!("  created   {}", job.created_at.to_rfc3339()));
    out.push(format!("  run at    {}", job.run_at.to_rfc3339()));
    out.push(format!("  started   {}", when(job.started_at)));
    out.push(format!("  finished  {}", when(job.finished_at)));
    if !job.errors.is_empty() {
        out.push("errors".to_string());
        for e in &job.errors {
            out.push(format!(
                "  attempt {} at {}: {}",
                e.attempt,
                e.at.to_rfc3339(),
                e.error
            ));
        }
    }
    if let Some(workflow) = job.workflow_id {
        let position = job
            .workflow_index
            .map_or("callback".to_string(), |i| format!("position {i}"));
        out.push(format!("workflow  {workflow} ({position})"));
    }
    out.join("\n")
}
