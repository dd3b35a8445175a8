//! How many jobs a worker claims ahead of its free slots.
//!
//! A worker that claims only for free slots pays a round trip per few jobs
//! when its jobs are short: at concurrency 10 it ran about a sixth as fast
//! as at concurrency 500. So it keeps a local buffer of claimed jobs (held
//! under their leases, renewed by the heartbeat) from which a freed slot
//! starts the next job at once. The buffer holds what the worker is expected
//! to start within [`HORIZON`] (or two claim round trips, when they take
//! longer: see [`Pace::claimed_in`]) at the pace it has been starting jobs,
//! or, while claims are that slow, at the pace its slots could start them
//! (slots over the mean time a job took: see [`Pace::finished_in`]) when
//! that is faster, capped by
//! [`crate::WorkerBuilder::claim_ahead`]: a worker whose jobs are slow
//! claims (almost) nothing ahead, so it never holds a small backlog that
//! idle workers could run. A job that still waits after [`MAX_WAIT`] (the
//! pace dropped) is given back. (The held jobs themselves, started and given
//! back, are in `slots.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How far ahead, in time at the current pace, a worker claims (at least).
pub(crate) const HORIZON: Duration = Duration::from_millis(50);

/// How far ahead a worker claims at most, however long its claims take
/// (less than [`MAX_WAIT`], so that held jobs are not given back).
pub(crate) const MAX_HORIZON: Duration = Duration::from_millis(250);

/// A job claimed ahead that has waited this long for a slot is given back
/// (pending again, its attempt not spent) for any worker to take.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(500);

/// Two test knobs on holding ahead: how long a held job waits for a slot
/// before it is given back ([`MAX_WAIT`] unless a test set another, with
/// `WorkerBuilder::give_back_held_after` or `WorkerHandle::give_back_held_after`)
/// and how many jobs are held ahead whatever the pace (0 unless a test set
/// another, with `hold_ahead_at_least`), so that a test sees jobs held
/// however slowly a loaded machine runs it.
#[derive(Clone, Debug)]
pub(crate) struct HoldLimit {
    wait: Arc<AtomicU64>,
    at_least: Arc<AtomicUsize>,
}

impl HoldLimit {
    pub(crate) fn new(wait: Duration, at_least: usize) -> HoldLimit {
        let limit = HoldLimit {
            wait: Arc::default(),
            at_least: Arc::new(AtomicUsize::new(at_least)),
        };
        limit.set(wait);
        limit
    }

    pub(crate) fn get(&self) -> Duration {
        Duration::from_nanos(self.wait.load(Ordering::Relaxed))
    }

    pub(crate) fn set(&self, wait: Duration) {
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.wait.store(nanos, Ordering::Relaxed);
    }

    /// Jobs held ahead whatever the pace (still capped by `claim_ahead`).
    pub(crate) fn at_least(&self) -> usize {
        self.at_least.load(Ordering::Relaxed)
    }

    pub(crate) fn set_at_least(&self, jobs: usize) {
        self.at_least.store(jobs, Ordering::Relaxed);
    }
}

/// The window over which the pace is measured.
const WINDOW: Duration = Duration::from_millis(100);

/// The pace at which a worker starts jobs: a moving average over windows.
#[derive(Clone, Debug)]
pub(crate) struct Pace {
    since: Instant,
    started: usize,
    /// Jobs started per second.
    rate: f64,
    /// How long a claim took lately (a moving average).
    round_trip: Duration,
    /// The worker's slots.
    slots: usize,
    /// How long a job took lately, from its start to its end (a moving
    /// average; none before the first job ended).
    job_time: Option<Duration>,
}

impl Pace {
    /// No jobs started yet by a worker of `slots`, measured from `now`.
    pub(crate) fn new(now: Instant, slots: usize) -> Pace {
        Pace {
            since: now,
            started: 0,
            rate: 0.0,
            round_trip: Duration::ZERO,
            slots,
            job_time: None,
        }
    }

    /// Counts a job that took `took` from its start to its end. A worker
    /// held back by its claims rather than by its jobs (a small process of
    /// a fleet, its jobs done in microseconds, its claims taking tens of
    /// milliseconds behind a busy PgBouncer) starts only what each claim
    /// brings, so its pace alone kept it to claims of a few jobs for ever:
    /// its slots' pace, slots over this mean, is what it can start within
    /// the horizon (docs/decisions/2026-11-28-hold-by-slots.md). Only when
    /// claims take longer than half the [`HORIZON`]: with fast claims the
    /// pace is set by the jobs, and holding more would only take jobs from
    /// other workers and blur the claim order (priorities, queue weights).
    pub(crate) fn finished_in(&mut self, took: Duration) {
        self.job_time = Some(match self.job_time {
            None => took,
            Some(mean) => (mean * 7 + took) / 8,
        });
    }

    /// Counts a claim that took `took`, from sending it to its rows. A
    /// worker holds what it starts in two round trips when that is longer
    /// than [`HORIZON`], so that its slots do not sit idle while the next
    /// claim is on its way: in a fleet of small worker processes on a busy
    /// server a claim took about 100 ms, and holding 50 ms of work kept
    /// each process to claims of a few jobs (docs/decisions/2026-11-28-fleets.md).
    pub(crate) fn claimed_in(&mut self, took: Duration) {
        self.round_trip = (self.round_trip * 3 + took) / 4;
    }

    /// Counts jobs started.
    pub(crate) fn started(&mut self, jobs: usize) {
        self.started += jobs;
    }

    /// How many jobs to hold claimed ahead at `now`, at most `max`.
    pub(crate) fn target(&mut self, max: usize, now: Instant) -> usize {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= WINDOW {
            let rate = self.started as f64 / elapsed.as_secs_f64();
            self.rate = (self.rate + rate) / 2.0;
            self.since = now;
            self.started = 0;
        }
        // Rounded down: a worker starting fewer than one job per HORIZON
        // holds nothing ahead. (A float-to-int `as` saturates; NaN gives 0.)
        let horizon = (self.round_trip * 2).clamp(HORIZON, MAX_HORIZON);
        // When claims are slow, what the slots could start at the mean time
        // a job took (a zero mean gives infinity, capped below). When they
        // are fast the pace is the jobs' own, and claims stay small.
        let slots_rate = match self.job_time {
            Some(took) if self.round_trip * 2 > HORIZON => self.slots as f64 / took.as_secs_f64(),
            _ => 0.0,
        };
        let ahead = (self.rate.max(slots_rate) * horizon.as_secs_f64()).floor();
        (ahead as usize).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_follows_the_pace_and_its_cap() {
        let mut now = Instant::now();
        let mut pace = Pace::new(now, 4);
        assert_eq!(pace.target(1_000, now), 0, "nothing started yet");
        // 2,000 jobs in 100 ms: 20,000/s; the average starts from zero.
        pace.started(2_000);
        now += WINDOW;
        assert_eq!(pace.target(10_000, now), 500); // 10,000/s x 50 ms
        pace.started(2_000);
        now += WINDOW;
        assert_eq!(pace.target(10_000, now), 750); // 15,000/s
        assert_eq!(pace.target(100, now), 100, "capped");
        // Slow jobs: one start a second soon holds nothing ahead.
        for _ in 0..20 {
            pace.started(1);
            now += Duration::from_secs(1);
            pace.target(1_000, now);
        }
        assert_eq!(pace.target(1_000, now), 0);
    }

    /// A worker of 4 slots whose claims bring 4 jobs every 100 ms: 40
    /// starts a second, 2 in 50 ms; and the time it reached that pace.
    fn forty_starts_a_second() -> (Pace, Instant) {
        let mut now = Instant::now();
        let mut pace = Pace::new(now, 4);
        for _ in 0..10 {
            pace.started(4);
            now += WINDOW;
            pace.target(1_000, now);
        }
        (pace, now)
    }

    #[test]
    fn slow_claims_hold_two_round_trips_of_work_up_to_the_cap() {
        let (mut pace, now) = forty_starts_a_second();
        assert_eq!(pace.target(1_000, now), 1, "fast claims: 50 ms");
        for _ in 0..20 {
            pace.claimed_in(Duration::from_millis(100));
        }
        // Two round trips of just under 100 ms (the average approaches it).
        assert_eq!(pace.target(1_000, now), 7);
        for _ in 0..20 {
            pace.claimed_in(Duration::from_secs(2));
        }
        assert_eq!(pace.target(1_000, now), 9, "capped at 250 ms");
        assert_eq!(pace.target(5, now), 5, "and by claim_ahead");
    }

    #[test]
    fn a_worker_held_back_by_its_claims_holds_what_its_slots_can_start() {
        let (mut pace, now) = forty_starts_a_second();
        assert_eq!(pace.target(1_000, now), 1, "no job has ended yet");
        // Each job took 1 ms: 4 slots could start 4,000 a second.
        for _ in 0..20 {
            pace.finished_in(Duration::from_millis(1));
        }
        assert_eq!(
            pace.target(1_000, now),
            1,
            "claims are fast: the pace rules"
        );
        // Claims of 100 ms: two round trips, 200 ms at 4,000 a second.
        for _ in 0..40 {
            pace.claimed_in(Duration::from_millis(100));
        }
        assert_eq!(pace.target(1_000, now), 799);
        assert_eq!(pace.target(50, now), 50, "capped by claim_ahead");
        // Jobs of no time at all: as many as claim_ahead allows.
        for _ in 0..200 {
            pace.finished_in(Duration::ZERO);
        }
        assert_eq!(pace.target(1_000, now), 1_000);
        // Slow jobs (a second each): the slots start 4 a second, and the
        // worker is back to its pace (40 a second, two round trips).
        for _ in 0..200 {
            pace.finished_in(Duration::from_secs(1));
        }
        assert_eq!(pace.target(1_000, now), 7);
    }
}
