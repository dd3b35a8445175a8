//! Queue settings: pause, concurrency and rate limits.

use super::Target;

use super::Queries;
use crate::error::Result;

/// A change of queue settings, as `conveyor.*_queue*` functions make it.
pub(crate) enum QueueSetting {
    Pause,
    Resume,
    Limit(Option<i32>),
    Rate(Option<(i32, f64)>),
}

pub(crate) async fn set_queue<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    queue: &str,
    setting: QueueSetting,
) -> Result<()> {
    let (verb, n, secs) = match setting {
        QueueSetting::Pause => ("pause", None, None),
        QueueSetting::Resume => ("resume", None, None),
        QueueSetting::Limit(n) => ("limit", n, None),
        QueueSetting::Rate(rate) => ("rate", rate.map(|r| r.0), rate.map(|r| r.1)),
    };
    sqlx::query(q.queue_settings)
        .bind(verb)
        .bind(queue)
        .bind(n)
        .bind(secs)
        .execute(q.on(exec))
        .await?;
    Ok(())
}

/// Which of `queues` have a concurrency or rate limit.
pub(crate) async fn queue_limits<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    queues: &[String],
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(q.queue_limits)
        .bind(queues)
        .fetch_all(q.on(exec))
        .await?)
}
