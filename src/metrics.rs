//! Prometheus metrics: the queue as the database sees it (jobs by queue and
//! state, queue size, latency, paused queues — the same for every process,
//! read at scrape time), and what this process's workers did (attempts
//! processed and failed, durations per task).
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

use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::job::JobState;

/// A registry of Conveyor's metrics. Cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    jobs: IntGaugeVec,
    size: IntGaugeVec,
    latency: GaugeVec,
    paused: IntGaugeVec,
    workers: IntGaugeVec,
    queue_workers: IntGaugeVec,
    processed: IntCounterVec,
    failed: IntCounterVec,
    duration: HistogramVec,
    leases_lost: IntCounterVec,
    restarts: IntCounterVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn metric_error(e: prometheus::Error) -> Error {
    Error::Config(format!("metrics: {e}"))
}

impl Metrics {
    /// A new registry with every Conveyor metric in it.
    pub fn new() -> Result<Metrics> {
        let registry = Registry::new();
        let jobs = IntGaugeVec::new(
            Opts::new("conveyor_jobs", "Jobs in the table, by queue and state"),
            &["queue", "state"],
        )
        .map_err(metric_error)?;
        let size = IntGaugeVec::new(
            Opts::new(
                "conveyor_queue_size",
                "Jobs waiting: scheduled, pending and retry",
            ),
            &["queue"],
        )
        .map_err(metric_error)?;
        let latency = GaugeVec::new(
            Opts::new(
                "conveyor_queue_latency_seconds",
                "Age of the oldest runnable (pending) job",
            ),
            &["queue"],
        )
        .map_err(metric_error)?;
        let paused = IntGaugeVec::new(
            Opts::new("conveyor_queue_paused", "1 if the queue is paused"),
            &["queue"],
        )
        .map_err(metric_error)?;
        let workers = IntGaugeVec::new(
            Opts::new(
                "conveyor_workers",
                "Worker processes in the registry, by state (live, dead)",
            ),
            &["state"],
        )
        .map_err(metric_error)?;
        let queue_workers = IntGaugeVec::new(
            Opts::new(
                "conveyor_queue_live_workers",
                "Live workers serving the queue (0 with jobs pending: nobody will run them)",
            ),
            &["queue"],
        )
        .map_err(metric_error)?;
        let processed = IntCounterVec::new(
            Opts::new(
                "conveyor_processed_total",
                "Attempts this process finished, whatever their outcome",
            ),
            &["queue", "task"],
        )
        .map_err(metric_error)?;
        let failed = IntCounterVec::new(
            Opts::new("conveyor_failed_total", "Attempts this process saw fail"),
            &["queue", "task"],
        )
        .map_err(metric_error)?;
        let duration = HistogramVec::new(
            HistogramOpts::new("conveyor_job_duration_seconds", "Time one attempt took").buckets(
                vec![0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0],
            ),
            &["task"],
        )
        .map_err(metric_error)?;
        let leases_lost = IntCounterVec::new(
            Opts::new(
                "conveyor_leases_lost_total",
                "Jobs whose lease this process lost before their outcome was written",
            ),
            &["queue", "task"],
        )
        .map_err(metric_error)?;
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
            Box::new(size.clone()),
            Box::new(latency.clone()),
            Box::new(paused.clone()),
            Box::new(workers.clone()),
            Box::new(queue_workers.clone()),
            Box::new(processed.clone()),
            Box::new(failed.clone()),
            Box::new(duration.clone()),
            Box::new(leases_lost.clone()),
            Box::new(restarts.clone()),
        ] {
            registry.register(collector).map_err(metric_error)?;
        }
        Ok(Metrics {
            registry,
            jobs,
            size,
            latency,
            paused,
            workers,
            queue_workers,
            processed,
            failed,
            duration,
            leases_lost,
            restarts,
        })
    }

    /// The underlying registry (to add your own metrics or merge).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Records one finished attempt (called by workers given these metrics).
    pub(crate) fn attempt(&self, queue: &str, task: &str, state: JobState, took: Duration) {
        self.processed.with_label_values(&[queue, task]).inc();
        if state != JobState::Success {
            self.failed.with_label_values(&[queue, task]).inc();
        }
        self.duration
            .with_label_values(&[task])
            .observe(took.as_secs_f64());
    }

    /// Counts a lease lost by a worker given these metrics.
    pub(crate) fn lease_lost(&self, queue: &str, task: &str) {
        self.leases_lost.with_label_values(&[queue, task]).inc();
    }

    /// Counts a worker background task restarted after a panic.
    pub(crate) fn task_restarted(&self, task: &str) {
        self.restarts.with_label_values(&[task]).inc();
    }

    /// Reads the queue's state from the database into the gauges.
    pub async fn refresh(&self, client: &Client) -> Result<()> {
        let (stats, workers) = tokio::try_join!(client.queue_stats(), client.workers())?;
        self.jobs.reset();
        self.size.reset();
        self.latency.reset();
        self.paused.reset();
        self.queue_workers.reset();
        let live: Vec<_> = workers.iter().filter(|w| w.dead_at.is_none()).collect();
        let live_count = i64::try_from(live.len()).unwrap_or(i64::MAX);
        self.workers.with_label_values(&["live"]).set(live_count);
        let dead = i64::try_from(workers.len() - live.len()).unwrap_or(i64::MAX);
        self.workers.with_label_values(&["dead"]).set(dead);
        for s in &stats {
            let q = s.queue.as_str();
            for (state, n) in [
                ("scheduled", s.scheduled),
                ("pending", s.pending),
                ("started", s.started),
                ("retry", s.retry),
                ("success", s.success),
                ("failure", s.failure),
                ("cancelled", s.cancelled),
            ] {
                self.jobs.with_label_values(&[q, state]).set(n);
            }
            self.size
                .with_label_values(&[q])
                .set(s.scheduled + s.pending + s.retry);
            self.latency
                .with_label_values(&[q])
                .set(s.oldest_pending_secs.unwrap_or(0.0));
            self.paused.with_label_values(&[q]).set(i64::from(s.paused));
            let serving = live
                .iter()
                .filter(|w| w.queues.iter().any(|x| x == q))
                .count();
            self.queue_workers
                .with_label_values(&[q])
                .set(i64::try_from(serving).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Refreshes and renders everything in Prometheus' text format.
    pub async fn render(&self, client: &Client) -> Result<String> {
        self.refresh(client).await?;
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
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
