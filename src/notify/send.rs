//! The [`Notifier`]: notifications sent right after the library's own
//! commits, batched.

use std::sync::Arc;
use std::time::Duration;

use backoff::ExponentialBackoff;
use sqlx::PgPool;

use crate::db::Queries;

/// Notifications to send, and who to tell once they are sent.
type Outbox = (
    Vec<(&'static str, String)>,
    tokio::sync::oneshot::Sender<()>,
);

/// Sends notifications after their transaction committed, from a background
/// task, in one statement per batch (duplicates merged), so concurrent
/// callers share a statement. Used where the library owns the commit
/// (bulk enqueues by COPY, recorded outcomes): a NOTIFY inside a writing
/// transaction would make commits queue behind each other (see
/// `conveyor_internal.notify_job_ready()`).
///
/// A failing statement is retried with backoff for up to 10 s; if the
/// process dies before sending, idle workers find the jobs at their next
/// wake-up (at most their safety interval).
pub(crate) struct Notifier {
    pool: PgPool,
    queries: &'static Queries,
    sender: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Outbox>>,
}

impl Notifier {
    pub(crate) fn new(pool: PgPool, queries: &'static Queries) -> Self {
        Notifier {
            pool,
            queries,
            sender: std::sync::OnceLock::new(),
        }
    }

    /// Queues notifications and returns a receiver that completes once they
    /// were sent (or given up on). Must be called within a tokio runtime: the
    /// sending task starts on first use and ends with the client.
    pub(crate) fn send(
        &self,
        notes: Vec<(&'static str, String)>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (done, sent) = tokio::sync::oneshot::channel();
        if notes.is_empty() {
            let _ = done.send(());
            return sent;
        }
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let (pool, queries) = (self.pool.clone(), self.queries);
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            tokio::spawn(crate::supervise::supervise(
                "notifier",
                move || send_loop(pool.clone(), queries, rx.clone()),
                |_| {},
            ));
            tx
        });
        // Fails only if the task has ended; the receiver then reports at once.
        let _ = sender.send((notes, done));
        sent
    }
}

async fn send_loop(
    pool: PgPool,
    queries: &'static Queries,
    outbox: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Outbox>>>,
) {
    let mut outbox = outbox.lock().await;
    let mut batch: Vec<Outbox> = Vec::new();
    while outbox.recv_many(&mut batch, 256).await > 0 {
        let mut notes: Vec<(&'static str, String)> =
            batch.iter_mut().flat_map(|(n, _)| n.drain(..)).collect();
        notes.sort_unstable();
        notes.dedup();
        let policy = ExponentialBackoff {
            initial_interval: Duration::from_millis(20),
            max_interval: Duration::from_secs(1),
            max_elapsed_time: Some(Duration::from_secs(10)),
            ..ExponentialBackoff::default()
        };
        let sent = backoff::future::retry(policy, || async {
            crate::db::notify(&pool, queries, &notes)
                .await
                .map_err(backoff::Error::transient)
        })
        .await;
        if let Err(error) = sent {
            tracing::warn!(
                %error,
                notifications = notes.len(),
                "conveyor: could not send notifications; idle workers find the jobs at their next wake-up"
            );
        }
        for (_, done) in batch.drain(..) {
            let _ = done.send(());
        }
    }
}
