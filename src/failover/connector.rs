//! Pools and sessions of a component's own (a worker's pool, `LISTEN`, the
//! periodic leader), opened on the server the client follows.

use std::sync::{Arc, Weak};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection, PgPool};

use super::{Primary, Shared, qualifies};
use crate::pooler::Pooler;

/// Removes its pool from the [`Primary`]'s list when dropped.
pub(crate) struct Registration {
    pub(super) shared: Weak<Shared>,
    pub(super) id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.lock().pools.retain(|(id, _)| *id != self.id);
        }
    }
}

/// A pool of a component's own, and what keeps it following the primary.
#[derive(Clone)]
pub(crate) struct OwnPool {
    pub(crate) pool: PgPool,
    _registration: Option<Arc<Registration>>,
}

/// Where a component opens connections of its own: the client pool's
/// connect options, or the [`Primary`] the client follows; sessions behind
/// a transaction-mode pooler go to its session URL if it has one.
#[derive(Clone)]
pub(crate) struct Connector {
    pool: PgPool,
    primary: Option<Primary>,
    pooler: Option<Pooler>,
}

/// Where `LISTEN` goes.
pub(crate) enum Listen {
    /// A session connection of this pool.
    Session(OwnPool),
    /// Nowhere (behind a pooler without a session URL): look at the
    /// database this often instead.
    Poll(std::time::Duration),
}

impl Connector {
    pub(crate) fn new(pool: PgPool, primary: Option<Primary>, pooler: Option<Pooler>) -> Connector {
        Connector {
            pool,
            primary,
            pooler,
        }
    }

    /// Where `LISTEN` goes: a session pool of `options`.
    pub(crate) fn listen(&self, options: PgPoolOptions) -> Listen {
        match &self.pooler {
            None => Listen::Session(self.pool(options)),
            Some(Pooler {
                session: Some(session),
                ..
            }) => Listen::Session(OwnPool {
                pool: options.connect_lazy_with(session.clone()),
                _registration: None,
            }),
            Some(Pooler {
                session: None,
                poll_every,
                ..
            }) => Listen::Poll(*poll_every),
        }
    }

    /// Whether sessions from [`Connector::connect`] go through a
    /// transaction-mode pooler (then only a transaction keeps its server
    /// connection: session state, locks included, must not outlive one).
    pub(crate) fn pooled_session(&self) -> bool {
        self.pooler.as_ref().is_some_and(|p| p.session.is_none())
    }

    /// A pool of `options`, following the primary if there is one; it stops
    /// following when the last clone of the returned value is dropped.
    pub(crate) fn pool(&self, options: PgPoolOptions) -> OwnPool {
        match &self.primary {
            Some(primary) => {
                let (pool, id) = primary.register(options);
                let registration = Registration {
                    shared: Arc::downgrade(&primary.shared),
                    id,
                };
                OwnPool {
                    pool,
                    _registration: Some(Arc::new(registration)),
                }
            }
            None => OwnPool {
                pool: options.connect_lazy_with((*self.pool.connect_options()).clone()),
                _registration: None,
            },
        }
    }

    /// One connection outside any pool, to the server followed (checked),
    /// and the switch count it belongs to (see [`Connector::switches`]).
    pub(crate) async fn connect(&self) -> sqlx::Result<(PgConnection, u64)> {
        if let Some(session) = self.pooler.as_ref().and_then(|p| p.session.as_ref()) {
            return Ok((session.connect().await?, 0));
        }
        let Some(primary) = &self.primary else {
            return Ok((self.pool.connect_options().connect().await?, 0));
        };
        let (options, switches): (PgConnectOptions, u64) = {
            let state = primary.shared.lock();
            let options = primary.shared.list.hosts[state.current].1.clone();
            (options, *primary.shared.switches.borrow())
        };
        let mut conn = options.connect().await?;
        if !qualifies(&mut conn, primary.shared.list.attrs).await? {
            primary.shared.suspect.notify_one();
            return Err(sqlx::Error::Configuration(
                "the followed server no longer qualifies".into(),
            ));
        }
        Ok((conn, switches))
    }

    /// Switches of the followed server so far (0 without a primary).
    pub(crate) fn switches(&self) -> u64 {
        self.primary.as_ref().map_or(0, Primary::switches)
    }

    /// Resolves at the next switch; never without a primary.
    pub(crate) fn switched(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let receiver = self.primary.as_ref().map(|p| p.shared.switches.subscribe());
        async move {
            if let Some(mut receiver) = receiver
                && receiver.changed().await.is_ok()
            {
                return;
            }
            std::future::pending().await
        }
    }
}
