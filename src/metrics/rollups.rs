//! The counters and histograms read from the rollups' all-time totals
//! (`conveyor.stats_totals` plus the rows not folded yet),
//! served as Prometheus counters and histograms by queue and task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Counter, Histogram, LabelPair, Metric, MetricFamily, MetricType};

use crate::db::MetricsTotals;
use crate::error::Result;
use crate::records::Histogram as Buckets;

/// Counter families: name, help, and the column they read.
type Column = fn(&MetricsTotals) -> i64;
const COUNTERS: [(&str, &str, Column); 7] = [
    (
        "conveyor_jobs_enqueued_total",
        "Jobs that entered the queue (new ones, and failed or cancelled ones re-queued), from the rollups",
        |t| t.enqueued,
    ),
    (
        "conveyor_jobs_succeeded_total",
        "Attempts that succeeded (processed), from the rollups",
        |t| t.succeeded,
    ),
    (
        "conveyor_jobs_failed_total",
        "Jobs that failed for good (no retry left), from the rollups",
        |t| t.failed,
    ),
    (
        "conveyor_jobs_retried_total",
        "Attempts that failed and were scheduled for a retry, from the rollups",
        |t| t.retried,
    ),
    (
        "conveyor_jobs_rescued_total",
        "Attempts whose lease was lost (expired) and that the rescuer recovered, from the rollups",
        |t| t.rescued,
    ),
    (
        "conveyor_jobs_cancelled_total",
        "Jobs that ended cancelled, from the rollups",
        |t| t.cancelled,
    ),
    (
        "conveyor_leases_lost_total",
        "Attempts whose worker lost the lease before its outcome was written (the outcome was not recorded), as workers counted them, from the rollups",
        |t| t.leases_lost,
    ),
];

/// Histogram families: name, help, and the counts and sum (ms) they read.
type Hist = fn(&MetricsTotals) -> (&[i64], f64);
const HISTOGRAMS: [(&str, &str, Hist); 2] = [
    (
        "conveyor_job_queue_wait_seconds",
        "Time from due (run_at) to start of the attempts workers ended, from the rollups",
        |t| (&t.wait_ms, t.wait_ms_sum),
    ),
    (
        "conveyor_job_run_seconds",
        "Run time (start to outcome) of the attempts workers ended, from the rollups",
        |t| (&t.run_ms, t.run_ms_sum),
    ),
];

/// The latest totals read, as a collector of the registry.
#[derive(Clone)]
pub(super) struct Rollups {
    descs: Vec<Desc>,
    rows: Arc<Mutex<Vec<MetricsTotals>>>,
}

impl Rollups {
    pub(super) fn new() -> Result<Rollups> {
        let names = COUNTERS
            .iter()
            .map(|(n, h, _)| (n, h))
            .chain(HISTOGRAMS.iter().map(|(n, h, _)| (n, h)));
        let mut descs = Vec::new();
        for (name, help) in names {
            let labels = vec!["queue".to_string(), "task".to_string()];
            let desc = Desc::new(name.to_string(), help.to_string(), labels, HashMap::new())
                .map_err(super::metric_error)?;
            descs.push(desc);
        }
        Ok(Rollups {
            descs,
            rows: Arc::default(),
        })
    }

    /// Replaces the totals served.
    pub(super) fn set(&self, rows: Vec<MetricsTotals>) {
        *self.rows.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }
}

fn labels(t: &MetricsTotals) -> Vec<LabelPair> {
    [("queue", &t.queue), ("task", &t.task)]
        .into_iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.clone());
            pair
        })
        .collect()
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_string());
    family.set_help(help.to_string());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

/// Prometheus buckets from the rollups' 19 counts: bucket `i` (0-based)
/// holds durations below `BOUNDS_MS[i]`, so its cumulative count is the
/// `le` of that bound (a duration exactly on a bound is counted in the next
/// bucket up: `le` is "less than" here, a difference of one bound's edge);
/// the last, open bucket is only in `+Inf` (the count). A negative count
/// (written by hand) counts as 0.
fn histogram(counts: &[i64], sum_ms: f64) -> Histogram {
    let mut cumulative = 0u64;
    let mut buckets = Vec::with_capacity(Buckets::BOUNDS_MS.len());
    for (i, bound) in Buckets::BOUNDS_MS.iter().enumerate() {
        let n = counts.get(i).copied().unwrap_or(0).max(0);
        cumulative = cumulative.saturating_add(n.unsigned_abs());
        let mut bucket = Bucket::default();
        bucket.set_upper_bound(bound / 1000.0);
        bucket.set_cumulative_count(cumulative);
        buckets.push(bucket);
    }
    let rest = counts.iter().skip(Buckets::BOUNDS_MS.len());
    let total = rest.fold(cumulative, |a, n| {
        a.saturating_add((*n).max(0).unsigned_abs())
    });
    let mut h = Histogram::default();
    h.set_bucket(buckets);
    h.set_sample_count(total);
    h.set_sample_sum(sum_ms / 1000.0);
    h
}

impl Collector for Rollups {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (name, help, column) in COUNTERS {
            let metrics = rows
                .iter()
                .map(|t| {
                    let mut counter = Counter::default();
                    counter.set_value(column(t).max(0) as f64);
                    let mut m = Metric::default();
                    m.set_label(labels(t));
                    m.set_counter(counter);
                    m
                })
                .collect();
            out.push(family(name, help, MetricType::COUNTER, metrics));
        }
        for (name, help, column) in HISTOGRAMS {
            let metrics = rows
                .iter()
                .map(|t| {
                    let (counts, sum) = column(t);
                    let mut m = Metric::default();
                    m.set_label(labels(t));
                    m.set_histogram(histogram(counts, sum));
                    m
                })
                .collect();
            out.push(family(name, help, MetricType::HISTOGRAM, metrics));
        }
        out
    }
}
