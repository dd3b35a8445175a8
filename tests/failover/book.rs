//! What the test process saw, kept in its own memory (a table on the
//! cluster could fail over with it): every handler run with its fencing
//! token and times, and every enqueue's answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use conveyor::JobId;

#[derive(Clone, Debug)]
pub struct Run {
    pub job: JobId,
    pub token: i64,
    pub attempt: u32,
    pub start: Instant,
    /// When the handler returned or was dropped (aborted), and whether it
    /// returned `Ok`.
    pub end: Option<(Instant, bool)>,
}

#[derive(Default)]
pub struct Book {
    runs: Mutex<Vec<Run>>,
    /// Jobs of every enqueue that returned `Ok`.
    pub acknowledged: Mutex<HashSet<JobId>>,
    /// Jobs of enqueues that returned `Unconfirmed`, and other errors.
    pub unconfirmed: Mutex<HashSet<JobId>>,
    pub errors: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Book {
    /// Records a run's start; the guard records its end, also when the
    /// handler is aborted.
    pub fn start(self: &Arc<Self>, job: JobId, token: i64, attempt: u32) -> RunGuard {
        let mut runs = lock(&self.runs);
        runs.push(Run {
            job,
            token,
            attempt,
            start: Instant::now(),
            end: None,
        });
        RunGuard {
            book: self.clone(),
            index: runs.len() - 1,
            ok: false,
        }
    }

    pub fn runs(&self) -> Vec<Run> {
        lock(&self.runs).clone()
    }

    pub fn running(&self) -> usize {
        lock(&self.runs).iter().filter(|r| r.end.is_none()).count()
    }

    pub fn acknowledge(&self, ids: impl IntoIterator<Item = JobId>) {
        lock(&self.acknowledged).extend(ids);
    }

    pub fn acknowledged(&self) -> Vec<JobId> {
        lock(&self.acknowledged).iter().copied().collect()
    }

    pub fn unconfirmed(&self, ids: impl IntoIterator<Item = JobId>, error: String) {
        lock(&self.unconfirmed).extend(ids);
        lock(&self.errors).push(error);
    }

    pub fn error(&self, error: String) {
        lock(&self.errors).push(error);
    }

    pub fn errors(&self) -> Vec<String> {
        lock(&self.errors).clone()
    }
}

pub struct RunGuard {
    book: Arc<Book>,
    index: usize,
    pub ok: bool,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(run) = lock(&self.book.runs).get_mut(self.index) {
            run.end = Some((Instant::now(), self.ok));
        }
    }
}

/// Two runs of one job, in the order they started.
pub type Pair = (Run, Run);

/// Pairs of runs of one job that overlapped in time, and runs whose token
/// did not grow with their start (a later claim must hold a greater one).
pub fn overlaps(runs: &[Run]) -> (Vec<Pair>, Vec<Pair>) {
    let mut by_job: HashMap<JobId, Vec<&Run>> = HashMap::new();
    for run in runs {
        by_job.entry(run.job).or_default().push(run);
    }
    let (mut concurrent, mut unfenced) = (Vec::new(), Vec::new());
    for list in by_job.values_mut() {
        list.sort_by_key(|r| r.start);
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // A run without an end never stopped: it overlaps whatever follows.
            if a.end.is_none_or(|(end, _)| end > b.start) {
                concurrent.push((a.clone(), b.clone()));
            }
            if a.token >= b.token {
                unfenced.push((a.clone(), b.clone()));
            }
        }
    }
    (concurrent, unfenced)
}
