//! Charts: `GET api/stats?window=1h|24h|7d[&queue=Q][&task=T]`, the
//! per-minute rollups of `conveyor.stats` summed into the window's buckets,
//! with queue-wait and run-time percentiles from their histograms. It reads
//! the rollups only, never `conveyor.jobs`: a chart shows the same counts
//! after the jobs are pruned, until the rollups' own retention (30 days by
//! default) removes them.
//!
//! The answer is columnar, as a chart library wants it: `at` (each
//! bucket's start, Unix seconds) and one array per series in `series`, a
//! value per bucket (0, or `null` for a percentile of a bucket that timed
//! nothing); `totals` sums the whole window.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, Params, name, param, read_params};
use crate::dashboard::AppState;
use crate::db::dashboard::{self as sql, ChartQuery};
use crate::records::{Histogram, StatsPoint};

/// A chart's time window: its name in `?window=`, bucket width and count
/// (60 to 170 points, what a chart a page wide draws legibly).
struct Window {
    name: &'static str,
    step_minutes: i32,
    buckets: i32,
}

const WINDOWS: [Window; 3] = [
    Window {
        name: "1h",
        step_minutes: 1,
        buckets: 60,
    },
    Window {
        name: "24h",
        step_minutes: 10,
        buckets: 144,
    },
    Window {
        name: "7d",
        step_minutes: 60,
        buckets: 168,
    },
];

/// The percentiles drawn, as (name, quantile).
const PERCENTILES: [(&str, f64); 3] = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)];

fn window(params: &HashMap<String, String>) -> Result<&'static Window, ApiError> {
    let text = param(params, "window").unwrap_or("1h");
    WINDOWS
        .iter()
        .find(|w| w.name == text)
        .ok_or_else(|| ApiError::bad_request(format!("window `{text}`: one of 1h, 24h or 7d")))
}

/// Counts summed without overflowing (a row written by hand may hold
/// anything the column's type does).
fn add(total: &mut Histogram, more: &Histogram) {
    if total.counts.len() < more.counts.len() {
        total.counts.resize(more.counts.len(), 0);
    }
    for (a, b) in total.counts.iter_mut().zip(&more.counts) {
        *a = a.saturating_add(*b);
    }
}

/// `{count, p50, p95, p99}` of a histogram (percentiles `null` when it
/// counts nothing).
fn summary(h: &Histogram) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("count".into(), json!(h.total()));
    for (label, q) in PERCENTILES {
        out.insert(label.into(), json!(h.quantile_ms(q)));
    }
    Value::Object(out)
}

/// The window's buckets, every one of them (empty ones as zeros): their
/// starts and a column per series; and the totals.
fn columns(
    window: &sql::ChartWindow,
    step_minutes: i32,
    points: &[StatsPoint],
) -> (Vec<i64>, Value, Value) {
    let step = chrono::Duration::minutes(i64::from(step_minutes));
    let by_start: HashMap<i64, &StatsPoint> =
        points.iter().map(|p| (p.at.timestamp(), p)).collect();
    let empty = StatsPoint::default();
    let mut at = Vec::new();
    let mut counts: [Vec<i64>; 5] = Default::default();
    let mut percentiles: Vec<Vec<Option<f64>>> = vec![Vec::new(); 2 * PERCENTILES.len()];
    let mut start = window.since;
    while start < window.until {
        let p = by_start.get(&start.timestamp()).copied().unwrap_or(&empty);
        at.push(start.timestamp());
        for (column, n) in
            counts
                .iter_mut()
                .zip([p.succeeded, p.failed, p.retried, p.rescued, p.cancelled])
        {
            column.push(n);
        }
        for (i, (_, q)) in PERCENTILES.iter().enumerate() {
            percentiles[i].push(p.wait_ms.quantile_ms(*q));
            percentiles[PERCENTILES.len() + i].push(p.run_ms.quantile_ms(*q));
        }
        start += step;
    }
    let mut series = serde_json::Map::new();
    let names = ["succeeded", "failed", "retried", "rescued", "cancelled"];
    for (name, column) in names.iter().zip(&counts) {
        series.insert((*name).into(), json!(column));
    }
    for (i, (label, _)) in PERCENTILES.iter().enumerate() {
        series.insert(format!("wait_{label}_ms"), json!(percentiles[i]));
        series.insert(
            format!("run_{label}_ms"),
            json!(percentiles[PERCENTILES.len() + i]),
        );
    }
    // Totals from every point read (not only those on the grid).
    let (mut wait, mut run) = (Histogram::default(), Histogram::default());
    let mut sums = [0i64; 5];
    for p in points {
        for (sum, n) in
            sums.iter_mut()
                .zip([p.succeeded, p.failed, p.retried, p.rescued, p.cancelled])
        {
            *sum = sum.saturating_add(n);
        }
        add(&mut wait, &p.wait_ms);
        add(&mut run, &p.run_ms);
    }
    let mut totals = serde_json::Map::new();
    for (name, sum) in names.iter().zip(sums) {
        totals.insert((*name).into(), json!(sum));
    }
    totals.insert("wait_ms".into(), summary(&wait));
    totals.insert("run_ms".into(), summary(&run));
    (at, Value::Object(series), Value::Object(totals))
}

/// `GET api/stats?window=1h|24h|7d[&queue=Q][&task=T]` (see the module).
pub(crate) async fn stats(State(s): State<AppState>, params: Params) -> ApiResult {
    let params = read_params(params)?;
    let window = window(&params)?;
    let queue = name(&params, "queue", 128)?;
    let task = name(&params, "task", 255)?;
    let query = ChartQuery {
        step_minutes: window.step_minutes,
        buckets: window.buckets,
        queue: queue.as_deref(),
        task: task.as_deref(),
    };
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let (range, points) = sql::chart(pool, q, &query).await?;
    let (at, series, totals) = columns(&range, window.step_minutes, &points);
    Ok(Json(json!({
        "window": window.name,
        "step_secs": window.step_minutes * 60,
        "since": range.since,
        "until": range.until,
        "now": range.now,
        "queue": queue,
        "task": task,
        "queues": range.queues,
        "tasks": range.tasks,
        "at": at,
        "series": series,
        "totals": totals,
        "buckets_ms": Histogram::BOUNDS_MS,
    })))
}
