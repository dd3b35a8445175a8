//! Background tasks that come back: a task that panics is logged, reported
//! and started again, never silently gone.

use std::future::Future;
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;
use tokio::task::JoinHandle;

/// Backoff between reconnection attempts: 50 ms doubling to 5 s, forever.
pub(crate) fn reconnect_backoff() -> ExponentialBackoff {
    ExponentialBackoff {
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_secs(5),
        max_elapsed_time: None,
        ..ExponentialBackoff::default()
    }
}

/// Aborts its task when dropped (a plain `JoinHandle` detaches instead).
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Called by a background task at the top of each round: a test hook that
/// panics when a panic was injected into the task (see
/// `WorkerHandle::inject_panic`), and does nothing otherwise.
pub(crate) type Checkpoint = std::sync::Arc<dyn Fn() + Send + Sync>;

/// A run that lasted this long resets the restart backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Runs `make()`'s future as a task of its own and returns its output. If
/// it panics, logs an error, calls `on_panic` with the message, waits a
/// little (50 ms, doubling to 5 s while it keeps panicking) and starts a new
/// one from `make`; state that must outlive a restart lives in what `make`
/// captures. Dropping the returned future aborts the task.
pub(crate) async fn supervise<T, F, Fut>(
    name: &'static str,
    mut make: F,
    mut on_panic: impl FnMut(&str),
) -> T
where
    T: Send + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let mut backoff = reconnect_backoff();
    loop {
        let started = tokio::time::Instant::now();
        let mut task = AbortOnDrop(tokio::spawn(make()));
        match (&mut task.0).await {
            Ok(output) => return output,
            Err(error) if error.is_panic() => {
                let message = panic_message(error.into_panic().as_ref());
                tracing::error!(
                    task = name,
                    panic = %message,
                    "conveyor: a background task panicked; restarting it"
                );
                on_panic(&message);
                if started.elapsed() >= HEALTHY_RUN {
                    backoff.reset();
                }
                let wait = backoff.next_backoff().unwrap_or(Duration::from_secs(5));
                tokio::time::sleep(wait).await;
            }
            // Cancelled: the runtime is shutting down, and this future with it.
            Err(_) => std::future::pending::<()>().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_panicking_task_is_restarted_until_it_ends() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut panics = Vec::new();
        let r = runs.clone();
        let out = supervise(
            "test",
            move || {
                let runs = r.clone();
                async move {
                    if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                        panic!("boom {}", runs.load(Ordering::SeqCst));
                    }
                    "done"
                }
            },
            |message| panics.push(message.to_string()),
        )
        .await;
        assert_eq!(out, "done");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(panics, ["boom 1", "boom 2"]);
    }
}
