//! Running behind a connection pooler in transaction mode (PgBouncer's
//! `pool_mode = transaction`): [`Pooler`], the setting that makes Conveyor
//! safe there.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

/// How often idle workers and waiting handles look at the database when no
/// session URL is given (no `LISTEN`): see [`Pooler::poll_every`].
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// Conveyor's client pool reaches PostgreSQL through a pooler in
/// transaction mode (PgBouncer `pool_mode = transaction`), which hands a
/// server connection to a client for one transaction only. Set it with
/// [`crate::ClientBuilder::pooler`]; workers of the client follow it.
///
/// - Every statement of the library is sent unnamed and inside a
///   transaction (its own if it has none): a named (prepared) statement
///   lives on one server connection, and an unnamed one outside a
///   transaction can be bound to another client's parameters between
///   sqlx's two round trips. Your own statements on the same pool need the
///   same care: `.persistent(false)` inside `BEGIN … COMMIT`, or `raw_sql`.
/// - `LISTEN` needs a session: give a direct URL with
///   [`Pooler::session_url`] (one connection per client and per worker
///   listens there, plus the periodic leader's). Without one, idle workers
///   and waiting [`crate::JobHandle`]s poll every [`Pooler::poll_every`]
///   instead, and a running job learns of its cancellation at its next
///   lease renewal.
/// - The periodic leader's lock is held on the session connection if there
///   is one, else in a transaction it keeps open through the pooler (one
///   server connection for the leader; it writes nothing in it, so it holds
///   back no vacuum). [`crate::migrate`] is one transaction and safe either way.
///
/// ```no_run
/// # async fn demo() -> conveyor::Result<()> {
/// use conveyor::{Client, Pooler};
/// let pool = conveyor::pool_options().connect("postgres://app@pgbouncer:6432/app").await?;
/// let client = Client::builder(pool)
///     .pooler(Pooler::transaction_mode().session_url("postgres://app@db:5432/app"))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Pooler {
    pub(crate) session: Option<PgConnectOptions>,
    /// A session URL not parsed yet ([`crate::ClientBuilder::build`] does).
    pub(crate) session_url: Option<String>,
    pub(crate) poll_every: Duration,
}

impl Pooler {
    /// Behind a transaction-mode pooler, with no session URL (polling every
    /// second: see [`Pooler::poll_every`]).
    pub fn transaction_mode() -> Pooler {
        Pooler {
            session: None,
            session_url: None,
            poll_every: DEFAULT_POLL,
        }
    }

    /// A URL reaching PostgreSQL directly (or through a session-mode pool),
    /// for `LISTEN` and the periodic leader's lock. A URL that does not
    /// parse fails [`crate::ClientBuilder::build`].
    pub fn session_url(mut self, url: impl Into<String>) -> Pooler {
        self.session_url = Some(url.into());
        self.session = None;
        self
    }

    /// [`Pooler::session_url`] from connect options.
    pub fn session_options(mut self, options: PgConnectOptions) -> Pooler {
        self.session = Some(options);
        self.session_url = None;
        self
    }

    /// How often idle workers and waiting handles look at the database
    /// when there is no session URL (default 1 s; at least
    /// 10 ms). Each look is a claim per idle worker, so a shorter interval
    /// costs the database more statements while the queue is empty.
    pub fn poll_every(mut self, every: Duration) -> Pooler {
        self.poll_every = every.max(Duration::from_millis(10));
        self
    }
}
