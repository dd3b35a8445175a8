//! `retry`, `cancel` and `delete`: on the jobs given by id, or on every job a
//! filter matches, in pages.
//!
//! Ids given one by one are each a promise that the job exists and is in a
//! state the action applies to: any that is not is named on stderr and the
//! command exits 1 (after acting on the others). A filter is counted first
//! (the count is what the confirmation shows), then walked newest first in
//! pages of [`PAGE`] ids, one state the action applies to at a time, each
//! page below the last id of the previous one: a job that changes state
//! (re-queued, or running and asked to stop) is never visited twice, and
//! none is skipped. Jobs in other states are left alone and counted.

use std::io::{BufRead, IsTerminal, Write};

use conveyor::{Client, JobFilter, JobId, JobState};
use serde_json::{Value, json};

use crate::args::Targets;
use crate::failure::{Failure, warn};
use crate::output;

/// Ids per page of a filter.
const PAGE: u64 = 1_000;

#[derive(Clone, Copy)]
pub(crate) enum Action {
    Retry,
    Cancel,
    Delete,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Retry => "re-queue",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Action::Retry => "re-queued",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    /// The JSON field of the count.
    fn key(self) -> &'static str {
        match self {
            Action::Retry => "requeued",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    /// The states the action applies to.
    fn applies_to(self) -> &'static [JobState] {
        use JobState::*;
        match self {
            Action::Retry => &[Failure, Cancelled],
            Action::Cancel => &[Scheduled, Pending, Retry, Started],
            Action::Delete => &[Scheduled, Pending, Retry, Success, Failure, Cancelled],
        }
    }

    /// Why a job in `state` (another than [`Action::applies_to`]) is left alone.
    fn refused(self, state: JobState) -> String {
        match self {
            Action::Retry => {
                format!("it is {state} (only failed or cancelled jobs can be re-queued)")
            }
            Action::Cancel => format!("it has already finished ({state})"),
            Action::Delete => {
                format!("it is {state}: running jobs cannot be deleted (cancel it first)")
            }
        }
    }

    /// The jobs a filter matches that the action leaves alone.
    fn others(self) -> &'static str {
        match self {
            Action::Retry => "not failed or cancelled",
            Action::Cancel => "already finished",
            Action::Delete => "running: cancel them first",
        }
    }
}

/// What was done.
#[derive(Default)]
struct Tally {
    done: u64,
    /// Running jobs asked to stop (`cancel`): they end cancelled once their
    /// handler returns.
    stopping: u64,
    /// Matched (or given) but left alone.
    skipped: u64,
}

/// What became of one job.
enum Outcome {
    Done,
    Stopping,
    Refused(String),
}

pub(crate) async fn run(
    client: &Client,
    targets: &Targets,
    action: Action,
    as_json: bool,
) -> Result<(), Failure> {
    let verb = action.verb();
    if !targets.ids.is_empty() && (targets.filter.narrows() || targets.filter.before.is_some()) {
        return Err(Failure::Usage(format!(
            "give job ids or a filter of jobs to {verb}, not both"
        )));
    }
    let (tally, problems) = if targets.ids.is_empty() {
        if !targets.filter.narrows() {
            return Err(Failure::Usage(format!(
                "give job ids, or a filter (--queue, --state, --task, --since, --until) of jobs to {verb}"
            )));
        }
        (by_filter(client, targets, action).await?, Vec::new())
    } else {
        by_ids(client, &targets.ids, action).await?
    };
    let mut value = json!({ action.key(): tally.done, "skipped": tally.skipped });
    if let (Action::Cancel, Value::Object(fields)) = (action, &mut value) {
        fields.insert("stopping".into(), json!(tally.stopping));
    }
    let mut human = format!("{} {} job(s)", action.done(), tally.done);
    if tally.stopping > 0 {
        human.push_str(&format!(
            "; {} running job(s) asked to stop",
            tally.stopping
        ));
    }
    if tally.skipped > 0 && problems.is_empty() {
        human.push_str(&format!(
            "; skipped {} job(s) ({})",
            tally.skipped,
            action.others()
        ));
    }
    if as_json || tally.done + tally.stopping > 0 || problems.is_empty() {
        output::print(as_json, &value, || human)?;
    }
    if problems.is_empty() {
        return Ok(());
    }
    for problem in &problems {
        warn(&format!("error: {problem}"));
    }
    Err(Failure::Reported)
}

/// Each id in turn; the refused ones come back as messages naming them.
async fn by_ids(
    client: &Client,
    ids: &[JobId],
    action: Action,
) -> Result<(Tally, Vec<String>), Failure> {
    let mut seen = std::collections::HashSet::new();
    let mut tally = Tally::default();
    let mut problems = Vec::new();
    for &id in ids.iter().filter(|id| seen.insert(**id)) {
        match one(client, id, action).await? {
            Outcome::Done => tally.done += 1,
            Outcome::Stopping => tally.stopping += 1,
            Outcome::Refused(why) => {
                tally.skipped += 1;
                problems.push(format!("cannot {} {id}: {why}", action.verb()));
            }
        }
    }
    Ok((tally, problems))
}

async fn one(client: &Client, id: JobId, action: Action) -> Result<Outcome, Failure> {
    // Act first, then ask why nothing happened: no window between a check
    // and the action. `cancel` returns the state, but not whether it changed.
    let acted = match action {
        Action::Retry => client.requeue(&[id]).await? == 1,
        Action::Delete => client.delete_jobs(&[id]).await? == 1,
        Action::Cancel => match state_of(client, id).await? {
            Some(state) if state.is_final() => false,
            None => false,
            Some(_) => return cancel(client, id).await,
        },
    };
    if acted {
        return Ok(Outcome::Done);
    }
    Ok(Outcome::Refused(match state_of(client, id).await? {
        None => "no job has this id".to_string(),
        Some(state) if action.applies_to().contains(&state) => {
            format!("its state changed meanwhile (now {state}); try again")
        }
        Some(state) => action.refused(state),
    }))
}

async fn cancel(client: &Client, id: JobId) -> Result<Outcome, Failure> {
    match client.cancel(id).await {
        Ok(JobState::Cancelled) => Ok(Outcome::Done),
        Ok(JobState::Started) => Ok(Outcome::Stopping),
        Ok(state) => Ok(Outcome::Refused(Action::Cancel.refused(state))),
        Err(conveyor::Error::NotFound(_)) => Ok(Outcome::Refused("no job has this id".into())),
        Err(e) => Err(e.into()),
    }
}

async fn state_of(client: &Client, id: JobId) -> Result<Option<JobState>, Failure> {
    match client.handle::<Value>(id).state().await {
        Ok(state) => Ok(Some(state)),
        Err(conveyor::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn by_filter(client: &Client, targets: &Targets, action: Action) -> Result<Tally, Failure> {
    let filter = targets.filter.job_filter(1);
    // One pass per state the action applies to (the filter's own, if any).
    let mut passes = Vec::new();
    let mut eligible = 0;
    for &state in action.applies_to() {
        if filter.state.is_some_and(|s| s != state) {
            continue;
        }
        let pass = JobFilter {
            state: Some(state),
            ..filter.clone()
        };
        let n = client.count_jobs(&pass).await?;
        if n > 0 {
            eligible += n;
            passes.push(pass);
        }
    }
    let matched = if filter.state.is_some() && !passes.is_empty() {
        eligible
    } else {
        client.count_jobs(&filter).await?
    };
    let planned = targets.limit.map_or(eligible, |cap| eligible.min(cap));
    let mut tally = Tally {
        skipped: matched.saturating_sub(eligible),
        ..Tally::default()
    };
    if planned > 0 && !targets.yes {
        confirm(action, planned, tally.skipped)?;
    }
    let mut progress = Progress::new(action, planned);
    let mut left = planned;
    for mut page in passes {
        while left > 0 {
            let size = left.min(PAGE);
            page.limit = i64::try_from(size).unwrap_or(1);
            let ids = client.list_job_ids(&page).await?;
            let Some(&last) = ids.last() else { break };
            page.before_id = Some(last);
            let listed = u64::try_from(ids.len()).unwrap_or(u64::MAX);
            left = left.saturating_sub(listed);
            let acted = act_on_page(client, &ids, action, &mut tally).await?;
            tally.skipped += listed.saturating_sub(acted);
            progress.show(tally.done + tally.stopping);
            if listed < size {
                break;
            }
        }
    }
    progress.finish();
    Ok(tally)
}

/// Acts on one page; returns on how many jobs it did.
async fn act_on_page(
    client: &Client,
    ids: &[JobId],
    action: Action,
    tally: &mut Tally,
) -> Result<u64, Failure> {
    let before = tally.done + tally.stopping;
    match action {
        Action::Retry => tally.done += client.requeue(ids).await?,
        Action::Delete => tally.done += client.delete_jobs(ids).await?,
        Action::Cancel => {
            for &id in ids {
                match cancel(client, id).await? {
                    Outcome::Done => tally.done += 1,
                    Outcome::Stopping => tally.stopping += 1,
                    Outcome::Refused(_) => {}
                }
            }
        }
    }
    Ok(tally.done + tally.stopping - before)
}

/// Asks on the terminal; without one, refuses (`--yes` is needed).
fn confirm(action: Action, planned: u64, others: u64) -> Result<(), Failure> {
    let verb = action.verb();
    if !std::io::stdin().is_terminal() {
        return Err(Failure::msg(format!(
            "refusing to {verb} {planned} job(s) matched by a filter without --yes"
        )));
    }
    let note = if others > 0 {
        format!(
            " ({others} other matching job(s) left alone: {})",
            action.others()
        )
    } else {
        String::new()
    };
    let mut stderr = std::io::stderr().lock();
    write!(stderr, "{verb} {planned} job(s)?{note} [y/N] ")?;
    stderr.flush()?;
    drop(stderr);
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Failure::msg("not confirmed: nothing done"))
    }
}

/// `re-queued 3000 of 12000…` on stderr, when it is a terminal and the run
/// takes more than one page.
struct Progress {
    action: Action,
    total: u64,
    on: bool,
}

impl Progress {
    fn new(action: Action, total: u64) -> Progress {
        let on = total > PAGE && std::io::stderr().is_terminal();
        Progress { action, total, on }
    }

    fn show(&mut self, done: u64) {
        if self.on {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r{} {done} of {}…", self.action.done(), self.total);
            let _ = stderr.flush();
        }
    }

    fn finish(&mut self) {
        if self.on {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}
