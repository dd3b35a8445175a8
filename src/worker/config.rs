//! Worker settings from environment variables (machinery reads both code and
//! environment). Each variable overrides what the builder had.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::maintenance::pruner::Retention;
use crate::worker::WorkerBuilder;

fn secs(name: &str, value: &str) -> Result<Duration> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| Error::Config(format!("{name}={value}: expected a number of seconds")))
}

fn retain(name: &str, value: &str) -> Result<Option<Duration>> {
    if value.trim().eq_ignore_ascii_case("forever") {
        Ok(None)
    } else {
        secs(name, value).map(Some)
    }
}

fn number(name: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse()
        .map_err(|_| Error::Config(format!("{name}={value}: expected a whole number")))
}

/// Applies every variable `lookup` knows to `builder`.
pub(crate) fn apply(
    mut b: WorkerBuilder,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<WorkerBuilder> {
    if let Some(v) = lookup("CONVEYOR_QUEUES") {
        let items: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.iter().any(|item| item.contains('=')) {
            let mut weighted = Vec::new();
            for item in items {
                let (queue, weight) = item.split_once('=').ok_or_else(|| {
                    Error::Config(format!("CONVEYOR_QUEUES={v}: give every queue a weight"))
                })?;
                let weight: u32 = weight.trim().parse().map_err(|_| {
                    Error::Config(format!("CONVEYOR_QUEUES={v}: bad weight `{weight}`"))
                })?;
                weighted.push((queue.trim().to_string(), weight));
            }
            b = b.weighted_queues(weighted);
        } else {
            b = b.queues(items);
        }
    }
    if let Some(v) = lookup("CONVEYOR_CONCURRENCY") {
        b = b.concurrency(number("CONVEYOR_CONCURRENCY", &v)?);
    }
    if let Some(v) = lookup("CONVEYOR_MAX_CLAIM_BATCH") {
        b = b.max_claim_batch(number("CONVEYOR_MAX_CLAIM_BATCH", &v)?);
    }
    if let Some(v) = lookup("CONVEYOR_CLAIM_AHEAD") {
        b = b.claim_ahead(number("CONVEYOR_CLAIM_AHEAD", &v)?);
    }
    type Setter = fn(WorkerBuilder, Duration) -> WorkerBuilder;
    let durations: [(&str, Setter); 6] = [
        ("CONVEYOR_LEASE_SECS", WorkerBuilder::lease),
        (
            "CONVEYOR_SAFETY_INTERVAL_SECS",
            WorkerBuilder::safety_interval,
        ),
        (
            "CONVEYOR_DEFAULT_TIMEOUT_SECS",
            WorkerBuilder::default_timeout,
        ),
        ("CONVEYOR_CANCEL_GRACE_SECS", WorkerBuilder::cancel_grace),
        (
            "CONVEYOR_RESCUE_INTERVAL_SECS",
            WorkerBuilder::rescue_interval,
        ),
        (
            "CONVEYOR_PRUNE_INTERVAL_SECS",
            WorkerBuilder::prune_interval,
        ),
    ];
    for (name, set) in durations {
        if let Some(v) = lookup(name) {
            b = set(b, secs(name, &v)?);
        }
    }
    let mut retention: Retention = b.retention.clone();
    for (name, slot) in [
        ("CONVEYOR_RETAIN_SUCCESS_SECS", &mut retention.success),
        ("CONVEYOR_RETAIN_FAILURE_SECS", &mut retention.failure),
        ("CONVEYOR_RETAIN_CANCELLED_SECS", &mut retention.cancelled),
        ("CONVEYOR_RETAIN_STATS_SECS", &mut retention.stats),
    ] {
        if let Some(v) = lookup(name) {
            *slot = retain(name, &v)?;
        }
    }
    b = b.retention(retention);
    if let Some(v) = lookup("CONVEYOR_WORKER_ID") {
        b = b.id(v);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn builder() -> WorkerBuilder {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://localhost/unused")
            .expect("lazy pool");
        crate::Worker::builder(&crate::Client::new(pool))
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[tokio::test]
    async fn reads_every_setting() {
        let b = apply(
            builder(),
            vars(&[
                ("CONVEYOR_QUEUES", "critical=6, default=3,low=1"),
                ("CONVEYOR_CONCURRENCY", "50"),
                ("CONVEYOR_CLAIM_AHEAD", "0"),
                ("CONVEYOR_LEASE_SECS", "12.5"),
                ("CONVEYOR_SAFETY_INTERVAL_SECS", "90"),
                ("CONVEYOR_RETAIN_SUCCESS_SECS", "3600"),
                ("CONVEYOR_RETAIN_FAILURE_SECS", "forever"),
                ("CONVEYOR_WORKER_ID", "box-1"),
            ]),
        )
        .unwrap();
        assert_eq!(b.queues, ["critical", "default", "low"]);
        assert_eq!(b.weights, Some(vec![6, 3, 1]));
        assert_eq!(b.concurrency, 50);
        assert_eq!(b.claim_ahead, 0);
        assert_eq!(b.lease, Duration::from_millis(12_500));
        assert_eq!(b.safety_interval, Duration::from_secs(90));
        assert_eq!(b.retention.success, Some(Duration::from_secs(3600)));
        assert_eq!(b.retention.failure, None);
        assert_eq!(b.retention.cancelled, Retention::default().cancelled);
        assert_eq!(b.worker_id.as_deref(), Some("box-1"));

        let strict = apply(builder(), vars(&[("CONVEYOR_QUEUES", "a,b")])).unwrap();
        assert_eq!(
            (strict.queues, strict.weights),
            (vec!["a".to_string(), "b".into()], None)
        );
    }

    /// The table in `WorkerBuilder::from_env`'s doc lists exactly the
    /// variables `apply` reads.
    #[tokio::test]
    async fn the_variables_read_are_the_ones_documented() {
        let read = std::sync::Mutex::new(Vec::new());
        apply(builder(), |name| {
            read.lock().unwrap().push(name.to_string());
            None
        })
        .unwrap();
        let mut read = read.into_inner().unwrap();
        read.sort();
        read.dedup();
        let source = include_str!("mod.rs");
        let mut documented: Vec<String> = source
            .lines()
            .filter_map(|line| line.trim().strip_prefix("/// | `CONVEYOR_"))
            .filter_map(|rest| rest.split('`').next())
            .map(|name| format!("CONVEYOR_{name}"))
            .collect();
        documented.sort();
        assert_eq!(read, documented);
    }

    #[tokio::test]
    async fn a_bad_value_names_its_variable() {
        let err = apply(builder(), vars(&[("CONVEYOR_LEASE_SECS", "soon")])).unwrap_err();
        assert!(
            err.to_string().contains("CONVEYOR_LEASE_SECS=soon"),
            "{err}"
        );
        let err = apply(builder(), vars(&[("CONVEYOR_QUEUES", "a=6,b")])).unwrap_err();
        assert!(err.to_string().contains("CONVEYOR_QUEUES"), "{err}");
    }
}
