//! A model-based test of the job state machine against the real database:
//! seeded random sequences of what clients, workers, the rescuer and
//! operators do (enqueue, claims by several workers, lease renewals, fresh
//! and stale outcomes, lease expiry and rescue, re-queue, cancel, release,
//! shutdown, promotion), each applied to the database through the
//! statements the library runs and to a reference model here; after every
//! step the two must agree. A failure names its seed and step; replay it
//! with `CONVEYOR_MODEL_SEED=<seed> cargo test --lib state_machine`.
//! The steps themselves (what each actor does, to the database and to the
//! model) are in `actions.rs`.

mod actions;

use std::collections::{BTreeMap, HashSet};

use serde_json::json;
use sqlx::Row;

use crate::db::{self, Claim, Lease, OutcomeRow};
use crate::job::{JobId, JobState};
use crate::testing::TestDatabase;
use crate::{Client, NewJob};

/// Steps per seed, and seeds per run.
const STEPS: usize = 2_500;
const SEEDS: usize = 3;
const WORKERS: usize = 3;
const TASK: &str = "model";

/// splitmix64: small, seedable, good enough to pick steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// What the model knows of one job.
#[derive(Clone, Debug, PartialEq)]
struct Job {
    state: JobState,
    attempt: i32,
    max_retries: i32,
    token: Option<i64>,
    /// After a claim ended without its worker (rescue, release): the job
    /// holds a fresh token above this one, the lost claim's (a job pending
    /// on disk counts as held by any claim (`conveyor.claims`) with a
    /// higher token that lists it, so the lost one must not).
    token_above: Option<i64>,
    cancel_requested: bool,
    has_result: bool,
    errors: usize,
    /// While started: which worker identity holds it.
    worker: Option<String>,
    /// While started: its lease was made to look expired.
    expired: bool,
}

/// The model: every job, and the claims each worker believes it holds
/// (stale ones included, until the worker tries them).
struct Model {
    jobs: BTreeMap<JobId, Job>,
    claims: Vec<Vec<Lease>>,
    /// Each worker slot's current identity (a shut-down worker is replaced).
    names: Vec<String>,
    highest_token: i64,
}

impl Model {
    fn ids_in(&self, states: &[JobState]) -> Vec<JobId> {
        self.jobs
            .iter()
            .filter(|(_, j)| states.contains(&j.state))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `lease` is the live claim on its job.
    fn live(&self, lease: &Lease) -> bool {
        self.jobs
            .get(&lease.0)
            .is_some_and(|j| j.state == JobState::Started && j.token == Some(lease.1))
    }
}

struct Run {
    client: Client,
    model: Model,
    rng: Rng,
    seed: u64,
    step: usize,
    /// What happened, to show that the run went where it matters.
    seen: BTreeMap<&'static str, usize>,
    /// The ready ring's current bank, as the last rotation returned it.
    bank: usize,
    /// A session holding the ring's slots of one bank in an open
    /// transaction (as a pg_dump does), if any.
    holder: Option<sqlx::PgConnection>,
}

impl Run {
    fn q(&self) -> &'static db::Queries {
        self.client.inner.queries
    }

    fn at(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    /// The database and the model must agree on every job.
    async fn compare(&self) {
        let rows = sqlx::query(
            "SELECT id, state, attempt, lease_token, cancel_requested_at IS NOT NULL AS cancel,
                    result IS NOT NULL AS has_result, jsonb_array_length(errors)::int AS errors,
                    worker_id, lease_expires_at IS NOT NULL AS leased,
                    finished_at IS NOT NULL AS finished
             FROM conveyor.jobs",
        )
        .fetch_all(&self.client.inner.pool)
        .await
        .unwrap();
        let at = self.at();
        assert_eq!(
            rows.len(),
            self.model.jobs.len(),
            "{at}: jobs lost or added"
        );
        for row in rows {
            let id: JobId = row.get("id");
            let job = &self.model.jobs[&id];
            let state: String = row.get("state");
            let state: JobState = state.parse().unwrap();
            let token: Option<i64> = row.get("lease_token");
            let errors: i32 = row.get("errors");
            let seen = (
                state,
                row.get::<i32, _>("attempt"),
                row.get::<bool, _>("cancel"),
                row.get::<bool, _>("has_result"),
                errors as usize,
            );
            let want = (
                job.state,
                job.attempt,
                job.cancel_requested,
                job.has_result,
                job.errors,
            );
            assert_eq!(
                seen, want,
                "{at}: job {id} (state, attempt, cancel, result, errors)"
            );
            let started = state == JobState::Started;
            assert_eq!(
                row.get::<bool, _>("leased"),
                started,
                "{at}: lease iff started"
            );
            assert_eq!(
                row.get::<Option<String>, _>("worker_id"),
                job.worker,
                "{at}: worker_id"
            );
            assert_eq!(
                row.get::<bool, _>("finished"),
                state.is_final(),
                "{at}: finished_at iff final"
            );
            // Set by a claim, kept with the outcome its worker wrote,
            // replaced by a fresh one when the claim ended without its worker.
            match (job.token, job.token_above) {
                (None, Some(lost)) => assert!(
                    token.is_some_and(|t| t > lost),
                    "{at}: job {id} lease_token {token:?} not above the lost claim's {lost}"
                ),
                _ => assert_eq!(token, job.token, "{at}: job {id} lease_token"),
            }
        }
        // The ready ring holds exactly the pending jobs, each once, with the
        // claim-order columns of its job (steps run one at a time, so no
        // claim can leave a stale ring row behind).
        let ring: Vec<(JobId, bool)> = sqlx::query_as(
            "SELECT r.job_id, j.id IS NOT NULL AND j.state = 'pending'
                    AND (j.queue, j.task, j.priority, j.run_at) = (r.queue, r.task, r.priority, r.run_at)
             FROM conveyor.ready r LEFT JOIN conveyor.jobs j ON j.id = r.job_id
             ORDER BY 1",
        )
        .fetch_all(&self.client.inner.pool)
        .await
        .unwrap();
        let mut pending = self.model.ids_in(&[JobState::Pending]);
        pending.sort();
        let in_ring: Vec<JobId> = ring.iter().map(|(id, _)| *id).collect();
        assert_eq!(in_ring, pending, "{at}: ready ring = pending jobs");
        assert!(
            ring.iter().all(|(_, same)| *same),
            "{at}: ring rows match their jobs"
        );
        // At most one live claim per job, across every worker.
        let mut live = HashSet::new();
        for lease in self.model.claims.iter().flatten() {
            if self.model.live(lease) {
                assert!(live.insert(lease.0), "{at}: two live claims on {}", lease.0);
            }
        }
    }

    /// Deletes finished jobs once there are many (keeps the run small).
    async fn forget_finished(&mut self) {
        let done = self
            .model
            .ids_in(&[JobState::Success, JobState::Failure, JobState::Cancelled]);
        if done.len() < 30 {
            return;
        }
        let n = self.client.delete_jobs(&done).await.unwrap();
        assert_eq!(n as usize, done.len(), "{}: deleted", self.at());
        for id in done {
            self.model.jobs.remove(&id);
        }
    }

    async fn step(&mut self) {
        let w = self.rng.below(WORKERS);
        // Few unfinished jobs at a time, so that jobs come back to the
        // workers that lost them.
        let unfinished = self
            .model
            .jobs
            .values()
            .filter(|j| !j.state.is_final())
            .count();
        match self.rng.below(100) {
            0..=14 if unfinished < 6 => self.enqueue().await,
            0..=14 => self.forget_finished().await,
            15..=34 => self.claim(w).await,
            35..=44 => self.heartbeat(w).await,
            45..=69 => self.outcome(w).await,
            70..=76 => self.expire().await,
            77..=81 => self.rescue().await,
            82..=86 => self.requeue().await,
            87..=91 => self.cancel().await,
            92..=93 => self.release(w, false).await,
            94..=95 => self.release(w, true).await,
            96 => self.hold_ring().await,
            97 => self.rotate_ring().await,
            _ => self.promote().await,
        }
    }
}

#[tokio::test]
async fn state_machine_agrees_with_its_model() {
    let seeds: Vec<u64> = match std::env::var("CONVEYOR_MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("CONVEYOR_MODEL_SEED is a number")],
        Err(_) => (0..SEEDS)
            .map(|_| uuid::Uuid::new_v4().as_u64_pair().0)
            .collect(),
    };
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    for seed in seeds.iter().copied() {
        eprintln!("state machine model: seed {seed} (replay: CONVEYOR_MODEL_SEED={seed})");
        let db = TestDatabase::new().await.expect("test database");
        let mut run = Run {
            client: db.client().clone(),
            model: Model {
                jobs: BTreeMap::new(),
                claims: vec![Vec::new(); WORKERS],
                names: (0..WORKERS).map(|w| format!("worker-{w}")).collect(),
                highest_token: 0,
            },
            rng: Rng(seed),
            seed,
            step: 0,
            seen: BTreeMap::new(),
            bank: 0,
            holder: None,
        };
        for step in 0..STEPS {
            run.step = step;
            run.step().await;
            run.compare().await;
        }
        eprintln!("  {} jobs; {:?}", run.model.jobs.len(), run.seen);
        for (what, n) in run.seen {
            *seen.entry(what).or_default() += n;
        }
    }
    for what in [
        "ring bank switches",
        "stale outcomes on a job running elsewhere",
        "stale renewals refused",
        "rescued",
        "re-queued",
    ] {
        assert!(
            seen.get(what).is_some_and(|n| *n > 0),
            "seeds {seeds:?}: no {what}: the run missed what it tests"
        );
    }
}
