//! The steps of the model-based test: each does one thing to the database,
//! through the statements the library runs, and the same to the model.

use super::*;

impl Run {
    pub(super) async fn enqueue(&mut self) {
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
                    token_above: None,
                    cancel_requested: false,
                    has_result: false,
                    errors: 0,
                    worker: None,
                    expired: false,
                },
            );
        }
    }

    pub(super) async fn claim(&mut self, w: usize) {
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
            job.token_above = None;
            job.worker = Some(name.clone());
            job.expired = false;
            assert_eq!(c.job.attempt, job.attempt, "{at}: attempt");
            self.model.claims[w].push((c.job.id, c.lease_token));
        }
    }

    pub(super) async fn heartbeat(&mut self, w: usize) {
        let leases = self.model.claims[w].clone();
        if leases.is_empty() {
            return;
        }
        let renewed = db::heartbeat(&self.client.inner.pool, self.q(), &leases, 60.0)
            .await
            .unwrap();
        // (Nothing else runs meanwhile, so no row is locked: none is busy.)
        assert!(
            renewed.iter().all(|r| !r.busy),
            "{}: busy leases with nothing else running",
            self.at()
        );
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

    pub(super) async fn outcome(&mut self, w: usize) {
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
            wait_ms: None,
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

    pub(super) async fn expire(&mut self) {
        let started = self.model.ids_in(&[JobState::Started]);
        let Some(&id) = self.rng.pick(&started) else {
            return;
        };
        if self.rng.below(2) == 0 {
            // One job, through the view (its claim settled first).
            sqlx::query(
                "UPDATE conveyor.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            )
            .bind(id)
            .execute(&self.client.inner.pool)
            .await
            .unwrap();
            self.model.jobs.get_mut(&id).unwrap().expired = true;
            return;
        }
        // The whole claim: its row's lease, and the leases of its jobs that
        // were settled into rows of their own.
        let token = self.model.jobs[&id]
            .token
            .expect("a started job has a token");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "UPDATE conveyor.claims SET lease_expires_at = now() - interval '1 second'
             WHERE lease_token = {token};
             UPDATE conveyor.job_rows SET lease_expires_at = now() - interval '1 second'
             WHERE state = 'started' AND lease_token = {token};"
        )))
        .execute(&self.client.inner.pool)
        .await
        .unwrap();
        for job in self.model.jobs.values_mut() {
            if job.state == JobState::Started && job.token == Some(token) {
                job.expired = true;
            }
        }
    }

    pub(super) async fn rescue(&mut self) {
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
                job.token_above = job.token.take();
                job.errors += 1;
                job.worker = None;
                job.expired = false;
            }
        }
        assert_eq!(rescued, expected, "{}: rescued", self.at());
        *self.seen.entry("rescued").or_default() += expected as usize;
    }

    pub(super) async fn requeue(&mut self) {
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

    pub(super) async fn cancel(&mut self) {
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
    pub(super) async fn release(&mut self, w: usize, replace: bool) {
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
            job.token_above = job.token.take();
            job.worker = None;
            job.expired = false;
        }
        assert_eq!(released, expected, "{}: released", self.at());
        if replace {
            self.model.names[w] = format!("{name}'");
        }
    }

    pub(super) async fn promote(&mut self) {
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
}

impl Run {
    /// Opens a transaction that locks the current bank's slot tables, as a
    /// pg_dump does for its whole run, or ends the one open.
    pub(super) async fn hold_ring(&mut self) {
        use sqlx::Connection;
        if let Some(mut holder) = self.holder.take() {
            sqlx::raw_sql("ROLLBACK")
                .execute(&mut holder)
                .await
                .unwrap();
            return;
        }
        let mut holder =
            sqlx::PgConnection::connect_with(&self.client.inner.pool.connect_options())
                .await
                .unwrap();
        let tables: Vec<String> = (0..8)
            .map(|k| format!("conveyor.ready_{}", self.bank * 8 + k))
            .collect();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; LOCK TABLE {} IN ACCESS SHARE MODE",
            tables.join(", ")
        )))
        .execute(&mut holder)
        .await
        .unwrap();
        *self.seen.entry("ring held").or_default() += 1;
        self.holder = Some(holder);
    }

    /// One pass of the ring's upkeep, counting any lock as a long
    /// transaction's and dropping left banks at once: while the current
    /// bank is held, the ring moves to another, and every runnable row
    /// ends up in the current bank.
    pub(super) async fn rotate_ring(&mut self) {
        let at = self.at();
        let (bank, held, stuck): (i16, Option<bool>, Option<bool>) = sqlx::query_as(
            "SELECT current_bank, held, stuck FROM conveyor_internal.rotate_ring(
                 hold_age => '0', retire_after => '0')",
        )
        .fetch_one(&self.client.inner.pool)
        .await
        .unwrap();
        assert_eq!(held, Some(self.holder.is_some()), "{at}: held");
        assert_eq!(stuck, Some(false), "{at}: a free bank was there");
        let bank = bank as usize;
        if bank != self.bank {
            *self.seen.entry("ring bank switches").or_default() += 1;
        }
        self.bank = bank;
        let elsewhere: i64 =
            sqlx::query_scalar("SELECT count(*) FROM conveyor.ready WHERE slot / 8 <> $1")
                .bind(bank as i16)
                .fetch_one(&self.client.inner.pool)
                .await
                .unwrap();
        assert_eq!(elsewhere, 0, "{at}: ring rows outside the current bank");
    }
}
