//! A model-based test of the job state machine against the real database:
//! seeded random sequences of what clients, workers, the rescuer and
//! operators do (enqueue, claims by several workers, lease renewals, fresh
//! and stale outcomes, lease expiry and rescue, re-queue, cancel, release,
//! shutdown, promotion), each applied to the database through the
//! statements the library runs and to a reference model here; after every
//! step the two must agree. A failure names its seed and step; replay it
//! with `CONVEYOR_MODEL_SEED=<seed> cargo test --lib state_machine`.

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
}

impl Run {
    fn q(&self) -> &'static db::Queries {
        self.client.inner.queries
    }

    fn at(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    async fn enqueue(&mut self) {
        let n = 1 + self.rng.below(3);
        let max_retries = self.rng.below(3) as u32;
        let jobs = (0..n)
            .map(|i| NewJob::new(TASK, json!(i)).max_retries(max_retries))
            .collect();
        for handle in self.client.enqueue_many(jobs).await.unwrap() {
            self.model.jobs.insert(
                handle.id(),
                Job {
                    state: JobState::Pending,
                    attempt: 0,
                    max_retries: max_retries as i32,
                    token: None,
                    cancel_requested: false,
                    has_result: false,
                    errors: 0,
                    worker: None,
                    expired: false,
                },
            );
        }
    }

    async fn claim(&mut self, w: usize) {
        let limit = 1 + self.rng.below(3);
        let pending = self.model.ids_in(&[JobState::Pending]);
        let name = self.model.names[w].clone();
        let tasks = [TASK.to_string()];
        let claim = Claim {
            queue: "default",
            tasks: &tasks,
            limit: limit as i64,
            lease_secs: 60.0,
            worker_id: &name,
            limited: false,
        };
        let claimed = db::claim(&self.client.inner.pool, self.q(), &claim)
            .await
            .unwrap();
        let at = self.at();
        assert!(claimed.undecodable.is_empty(), "{at}");
        assert_eq!(
            claimed.jobs.len(),
            limit.min(pending.len()),
            "{at}: claimed"
        );
        let before = self.model.highest_token;
        // One token per claim statement, new each time.
        let tokens: HashSet<i64> = claimed.jobs.iter().map(|c| c.lease_token).collect();
        assert!(tokens.len() <= 1, "{at}: one statement, several tokens");
        for c in claimed.jobs {
            assert!(
                pending.contains(&c.job.id),
                "{at}: claimed a job not pending"
            );
            assert!(
                c.lease_token > before,
                "{at}: token {} is not new (highest before: {before})",
                c.lease_token
            );
            self.model.highest_token = self.model.highest_token.max(c.lease_token);
            let job = self.model.jobs.get_mut(&c.job.id).unwrap();
            job.state = JobState::Started;
            job.attempt += 1;
            job.token = Some(c.lease_token);
            job.worker = Some(name.clone());
            job.expired = false;
            assert_eq!(c.job.attempt, job.attempt, "{at}: attempt");
            self.model.claims[w].push((c.job.id, c.lease_token));
        }
    }

    async fn heartbeat(&mut self, w: usize) {
        let leases = self.model.claims[w].clone();
        if leases.is_empty() {
            return;
        }
        let renewed = db::heartbeat(&self.client.inner.pool, self.q(), &leases, 60.0)
            .await
            .unwrap();
        let renewed: HashSet<Lease> = renewed.into_iter().map(|r| r.lease).collect();
        *self.seen.entry("stale renewals refused").or_default() += leases.len() - renewed.len();
        let expected: HashSet<Lease> = leases
            .iter()
            .copied()
            .filter(|l| self.model.live(l))
            .collect();
        assert_eq!(renewed, expected, "{}: renewed leases", self.at());
        for lease in &renewed {
            self.model.jobs.get_mut(&lease.0).unwrap().expired = false;
        }
    }

    async fn outcome(&mut self, w: usize) {
        let Some(&lease) = self.rng.pick(&self.model.claims[w]) else {
            return;
        };
        self.model.claims[w].retain(|l| *l != lease);
        let state = [
            JobState::Success,
            JobState::Retry,
            JobState::Failure,
            JobState::Cancelled,
        ][self.rng.below(4)];
        let outcome = OutcomeRow {
            id: lease.0,
            lease_token: lease.1,
            queue: "default".into(),
            task: TASK.into(),
            state,
            result: (state == JobState::Success).then(|| json!("done")),
            error: (state != JobState::Success).then(|| "boom".to_string()),
            retry_in_secs: (state == JobState::Retry).then_some(0.0),
            follow_up: false,
        };
        let live = self.model.live(&lease);
        *self
            .seen
            .entry(if live {
                "fresh outcomes"
            } else {
                "stale outcomes refused"
            })
            .or_default() += 1;
        let running = self.model.jobs.get(&lease.0).map(|j| j.state) == Some(JobState::Started);
        if !live && running {
            *self
                .seen
                .entry("stale outcomes on a job running elsewhere")
                .or_default() += 1;
        }
        let completed = db::complete(&self.client.inner.pool, self.q(), &[outcome])
            .await
            .unwrap();
        let at = self.at();
        assert_eq!(
            completed.updated.len(),
            usize::from(live),
            "{at}: stale outcome {}",
            if live { "refused" } else { "accepted" }
        );
        if live {
            let job = self.model.jobs.get_mut(&lease.0).unwrap();
            job.state = match state {
                JobState::Retry if job.cancel_requested => JobState::Cancelled,
                state => state,
            };
            job.has_result |= state == JobState::Success;
            job.errors += usize::from(state != JobState::Success);
            job.worker = None;
            job.expired = false;
        }
    }

    async fn expire(&mut self) {
        let started = self.model.ids_in(&[JobState::Started]);
        let Some(&id) = self.rng.pick(&started) else {
            return;
        };
        sqlx::query(
            "UPDATE conveyor.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
        )
        .bind(id)
        .execute(&self.client.inner.pool)
        .await
        .unwrap();
        self.model.jobs.get_mut(&id).unwrap().expired = true;
    }

    async fn rescue(&mut self) {
        let rescued = db::rescue(&self.client.inner.pool, self.q(), 200)
            .await
            .unwrap()
            .unwrap_or_default();
        let mut expected = 0;
        for job in self.model.jobs.values_mut() {
            if job.state == JobState::Started && job.expired {
                expected += 1;
                job.state = if job.cancel_requested {
                    JobState::Cancelled
                } else if job.attempt <= job.max_retries {
                    JobState::Pending
                } else {
                    JobState::Failure
                };
                job.token = None;
                job.errors += 1;
                job.worker = None;
                job.expired = false;
            }
        }
        assert_eq!(rescued, expected, "{}: rescued", self.at());
        *self.seen.entry("rescued").or_default() += expected as usize;
    }

    async fn requeue(&mut self) {
        let ids: Vec<JobId> = self
            .model
            .jobs
            .keys()
            .copied()
            .filter(|_| self.rng.below(4) == 0)
            .collect();
        let n = self.client.requeue(&ids).await.unwrap();
        let mut expected = 0;
        for id in &ids {
            let job = self.model.jobs.get_mut(id).unwrap();
            if matches!(job.state, JobState::Failure | JobState::Cancelled) {
                expected += 1;
                job.state = JobState::Pending;
                job.attempt = 0;
                job.cancel_requested = false;
                job.has_result = false;
            }
        }
        assert_eq!(n, expected, "{}: re-queued", self.at());
        *self.seen.entry("re-queued").or_default() += expected as usize;
    }

    async fn cancel(&mut self) {
        let ids: Vec<JobId> = self.model.jobs.keys().copied().collect();
        let Some(&id) = self.rng.pick(&ids) else {
            return;
        };
        let state = self.client.cancel(id).await.unwrap();
        let at = self.at();
        let job = self.model.jobs.get_mut(&id).unwrap();
        match job.state {
            JobState::Pending | JobState::Scheduled | JobState::Retry => {
                job.state = JobState::Cancelled;
                job.cancel_requested = true;
            }
            JobState::Started => job.cancel_requested = true,
            _ => {}
        }
        assert_eq!(state, job.state, "{at}: cancel");
    }

    /// Releases some claims of worker `w` (the handlers a shutdown had to
    /// abort), or all of them with `replace`, which then gives the slot a
    /// new identity, as a new process would have.
    async fn release(&mut self, w: usize, replace: bool) {
        let all = std::mem::take(&mut self.model.claims[w]);
        let (leases, kept): (Vec<Lease>, Vec<Lease>) = all
            .into_iter()
            .partition(|_| replace || self.rng.below(2) == 0);
        self.model.claims[w] = kept;
        let name = self.model.names[w].clone();
        let released = db::release(&self.client.inner.pool, self.q(), &leases, &name)
            .await
            .unwrap();
        let mut expected = 0;
        for lease in &leases {
            if !self.model.live(lease) {
                continue;
            }
            let job = self.model.jobs.get_mut(&lease.0).unwrap();
            if job.worker.as_deref() != Some(&name) {
                continue;
            }
            expected += 1;
            if job.cancel_requested {
                job.state = JobState::Cancelled;
            } else {
                job.state = JobState::Pending;
                job.attempt = (job.attempt - 1).max(0);
            }
            job.token = None;
            job.worker = None;
            job.expired = false;
        }
        assert_eq!(released, expected, "{}: released", self.at());
        if replace {
            self.model.names[w] = format!("{name}'");
        }
    }

    async fn promote(&mut self) {
        let promoted = db::promote(
            &self.client.inner.pool,
            self.q(),
            &["default".to_string()],
            1_000,
        )
        .await
        .unwrap();
        let mut expected = 0;
        for job in self.model.jobs.values_mut() {
            if job.state == JobState::Retry {
                expected += 1;
                job.state = JobState::Pending;
            }
        }
        assert_eq!(promoted.promoted, expected, "{}: promoted", self.at());
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
            // cleared when the claim ended without its worker.
            assert_eq!(token, job.token, "{at}: job {id} lease_token");
        }
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
            92..=94 => self.release(w, false).await,
            95..=96 => self.release(w, true).await,
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
