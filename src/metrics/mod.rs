//! Prometheus metrics, the same for every process that serves them: the
//! queue as the database holds it (unfinished jobs by queue and state,
//! oldest pending job, paused queues, the worker registry), read at scrape
//! time (counted exactly up to a cap per queue and state, estimated from a
//! sample beyond it, flagged by `conveyor_jobs_estimated`, so a scrape's
//! cost is bounded whatever the backlog), and all-time totals by queue and
//! task (jobs enqueued, succeeded, failed, retried, rescued, cancelled;
//! leases workers lost; queue wait and run time histograms) read from the
//! outcome rollups, so they survive restarts and the pruning of jobs. A
//! scrape never reads the history of finished jobs
//! (docs/decisions/2026-11-25-metrics.md). One counter is this process's
//! own: its workers' background tasks restarted.
//!
//! ```no_run
//! # async fn demo(client: conveyor::Client) -> conveyor::Result<()> {
//! use conveyor::{Metrics, Worker};
//! let metrics = Metrics::new()?;
//! let worker = Worker::builder(&client).metrics(metrics.clone())
//!     .register_fn("noop", |_, args| async move { Ok(args) })
//!     .start()?;
//! // Mount on your own axum server, or serve it alone:
//! let app = metrics.router(client.clone());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await.map_err(|e| conveyor::Error::Config(e.to_string()))?;
//! # Ok(()) }
//! ```

mod rollups;

use std::sync::Arc;

use prometheus::{Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::records::WorkerInfo;

/// A registry of Conveyor's metrics. Cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    jobs: IntGaugeVec,
    estimated: IntGaugeVec,
    size: IntGaugeVec,
    latency: GaugeVec,
    paused: IntGaugeVec,
    workers: IntGaugeVec,
    queue_workers: IntGaugeVec,
    slots: IntGaugeVec,
    rollups: rollups::Rollups,
    restarts: IntCounterVec,
    /// How much a scrape may read to count the unfinished jobs.
    limits: db::GaugeLimits,
    /// Held from a refresh's reads to the rendering of what they read, so
    /// that two scrapes at once never serve an older read after a newer one
    /// (a counter would go down) or a mix of both.
    scraping: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn metric_error(e: prometheus::Error) -> Error {
    Error::Config(format!("metrics: {e}"))
}

fn int_gauges(name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec> {
    IntGaugeVec::new(Opts::new(name, help), labels).map_err(metric_error)
}

fn clamp(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// A new registry with every Conveyor metric in it.
    pub fn new() -> Result<Metrics> {
        let registry = Registry::new();
        let jobs = int_gauges(
            "conveyor_jobs",
            "Unfinished jobs by queue and state (scheduled, pending, started = in flight, retry); exact up to a cap, estimated beyond (conveyor_jobs_estimated)",
            &["queue", "state"],
        )?;
        let estimated = int_gauges(
            "conveyor_jobs_estimated",
            "1 if conveyor_jobs{queue,state} is an estimate (more jobs than a scrape counts exactly), 0 if exact",
            &["queue", "state"],
        )?;
        let size = int_gauges(
            "conveyor_queue_size",
            "Jobs waiting: scheduled, pending and retry (an estimate if any of them is)",
            &["queue"],
        )?;
        let latency = GaugeVec::new(
            Opts::new(
                "conveyor_queue_latency_seconds",
                "Age of the oldest pending job (due and not started), 0 if none",
            ),
            &["queue"],
        )
        .map_err(metric_error)?;
        let paused = int_gauges(
            "conveyor_queue_paused",
            "1 if the queue is paused",
            &["queue"],
        )?;
        let workers = int_gauges(
            "conveyor_workers",
            "Worker processes in the registry, by state (live, dead)",
            &["state"],
        )?;
        let queue_workers = int_gauges(
            "conveyor_queue_live_workers",
            "Live workers serving the queue (0 with jobs pending: nobody will run them)",
            &["queue"],
        )?;
        let slots = int_gauges(
            "conveyor_worker_slots",
            "Job slots of live workers at their last beat: busy (running a job) or idle",
            &["state"],
        )?;
        let rollups = rollups::Rollups::new()?;
        let restarts = IntCounterVec::new(
            Opts::new(
                "conveyor_worker_task_restarts_total",
                "Background tasks of this process's workers restarted after a panic",
            ),
            &["task"],
        )
        .map_err(metric_error)?;
        for collector in [
            Box::new(jobs.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(estimated.clone()),
            Box::new(size.clone()),
            Box::new(latency.clone()),
            Box::new(paused.clone()),
            Box::new(workers.clone()),
            Box::new(queue_workers.clone()),
            Box::new(slots.clone()),
            Box::new(rollups.clone()),
            Box::new(restarts.clone()),
        ] {
            registry.register(collector).map_err(metric_error)?;
        }
        Ok(Metrics {
            registry,
            jobs,
            estimated,
            size,
            latency,
            paused,
            workers,
            queue_workers,
            slots,
            rollups,
            restarts,
            limits: db::GaugeLimits::default(),
            scraping: Arc::default(),
        })
    }

    /// Counts a queue's unfinished jobs exactly up to `rows` per state (scheduled
    /// and retry count together, as they share an index), default 1,000.
    /// Beyond it, `conveyor_jobs{queue,state}` is an estimate from a sample
    /// of the table (see [`Metrics::sample_pages`]), at least the `rows`
    /// counted, and `conveyor_jobs_estimated{queue,state}` is 1. At least 1.
    pub fn exact_count_cap(mut self, rows: u32) -> Metrics {
        self.limits.cap = rows.max(1);
        self
    }

    /// Rows a scrape counts exactly at most over all queues, default 50,000:
    /// with many queues, each counts exactly up to this divided by three
    /// times the queues (and at least one row, so a queue with jobs never
    /// shows none).
    pub fn count_budget(mut self, rows: u32) -> Metrics {
        self.limits.budget = rows;
        self
    }

    /// About how many pages (8 kB) of `conveyor.jobs_unfinished` a scrape
    /// samples to estimate the counts over the cap, default 1,000. The
    /// sample is `TABLESAMPLE SYSTEM` with a fixed seed, scaled by the
    /// table's size on disk, so it needs no statistics (ANALYZE). A table
    /// smaller than this is read whole: the "estimate" is then exact.
    pub fn sample_pages(mut self, pages: u32) -> Metrics {
        self.limits.sample_pages = pages.max(1);
        self
    }

    /// The underlying registry (to add your own metrics or merge).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts a worker background task restarted after a panic.
    pub(crate) fn task_restarted(&self, task: &str) {
        self.restarts.with_label_values(&[task]).inc();
    }

    /// Reads the queue's state and the all-time totals from the database
    /// into the metrics (three reads, none of which reads finished jobs, and
    /// none more than a bounded number of unfinished ones: counts beyond
    /// [`Metrics::exact_count_cap`] are estimated).
    pub async fn refresh(&self, client: &Client) -> Result<()> {
        let _scraping = self.scraping.lock().await;
        self.read(client).await
    }

    async fn read(&self, client: &Client) -> Result<()> {
        let (pool, q) = (&client.inner.pool, client.inner.queries);
        let (queues, totals, workers) = tokio::try_join!(
            db::metrics_queues(pool, q, self.limits),
            db::metrics_totals(pool, q),
            client.workers()
        )?;
        self.set_queues(&queues, &workers);
        self.rollups.set(totals);
        Ok(())
    }

    fn set_queues(&self, queues: &[db::QueueCounts], workers: &[WorkerInfo]) {
        for gauges in [
            &self.jobs,
            &self.estimated,
            &self.size,
            &self.paused,
            &self.queue_workers,
        ] {
            gauges.reset();
        }
        self.latency.reset();
        let live: Vec<_> = workers.iter().filter(|w| w.dead_at.is_none()).collect();
        self.workers
            .with_label_values(&["live"])
            .set(clamp(live.len()));
        self.workers
            .with_label_values(&["dead"])
            .set(clamp(workers.len() - live.len()));
        let busy: i64 = live.iter().map(|w| i64::from(w.busy.max(0))).sum();
        let all: i64 = live.iter().map(|w| i64::from(w.concurrency.max(0))).sum();
        self.slots.with_label_values(&["busy"]).set(busy);
        self.slots
            .with_label_values(&["idle"])
            .set((all - busy).max(0));
        for s in queues {
            let q = s.queue.as_str();
            for (state, count) in [
                ("scheduled", s.scheduled),
                ("pending", s.pending),
                ("started", s.started),
                ("retry", s.retry),
            ] {
                self.jobs.with_label_values(&[q, state]).set(count.n);
                self.estimated
                    .with_label_values(&[q, state])
                    .set(i64::from(count.estimated));
            }
            self.size.with_label_values(&[q]).set(
                s.scheduled
                    .n
                    .saturating_add(s.pending.n)
                    .saturating_add(s.retry.n),
            );
            self.latency
                .with_label_values(&[q])
                .set(s.oldest_pending_secs);
            self.paused.with_label_values(&[q]).set(i64::from(s.paused));
            let serving = live
                .iter()
                .filter(|w| w.queues.iter().any(|x| x == q))
                .count();
            self.queue_workers
                .with_label_values(&[q])
                .set(clamp(serving));
        }
    }

    /// Refreshes and renders everything in Prometheus' text format.
    pub async fn render(&self, client: &Client) -> Result<String> {
        let families = {
            let _scraping = self.scraping.lock().await;
            self.read(client).await?;
            self.registry.gather()
        };
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .map_err(metric_error)?;
        String::from_utf8(out).map_err(|e| Error::Config(format!("metrics: {e}")))
    }

    /// An axum router serving `GET /metrics`, to mount in your own server or
    /// serve alone (`conveyor metrics --bind …` does).
    pub fn router(&self, client: Client) -> axum::Router {
        let metrics = self.clone();
        axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let (metrics, client) = (metrics.clone(), client.clone());
                async move {
                    match metrics.render(&client).await {
                        Ok(text) => (
                            axum::http::StatusCode::OK,
                            [("content-type", "text/plain; version=0.0.4")],
                            text,
                        ),
                        Err(error) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            [("content-type", "text/plain")],
                            format!("conveyor metrics unavailable: {error}\n"),
                        ),
                    }
                }
            }),
        )
    }
}
