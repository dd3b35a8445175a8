//! Following the primary across failovers: libpq-style host lists with
//! `target_session_attrs` on top of sqlx, which has no multi-host
//! connection strings.
//!
//! A [`Primary`] keeps one probe connection to the server it follows and
//! checks it every [`CHECK_EVERY`]; when that server is gone or no longer
//! takes writes, it walks the host list in order (as libpq does for every
//! connection) until a server qualifies, then points every pool that
//! follows it there (`Pool::set_connect_options`). Those pools check each
//! new connection (`after_connect`, see `hooks`) and close, when next
//! taken, every connection opened before the switch (`before_acquire`), so
//! nothing is sent to a dead or demoted server again. While no server
//! qualifies, new connections go to the first that answers and wait there
//! for it to qualify (the standby being promoted). Sessions held outside a
//! pool (`LISTEN`, the periodic leader's lock) watch the switch count.

mod connector;
mod hooks;
mod hosts;
mod watcher;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::{Notify, watch};

use crate::error::Result;
pub(crate) use connector::{Connector, Listen, OwnPool};
use hooks::qualifies;
pub(crate) use hosts::{Attrs, HostList, parse};

/// How often a [`Primary`] checks that the server it follows still qualifies.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one host may take to accept a connection or answer the check,
/// unless the URL sets libpq's `connect_timeout`.
const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`Primary::connect`] looks for a qualifying server.
const FIND_FOR: Duration = Duration::from_secs(30);

/// The server of a libpq-style host list that Conveyor writes to, followed
/// across failovers. Cheap to clone; the watch ends with the last clone.
///
/// ```no_run
/// # async fn demo() -> conveyor::Result<()> {
/// let url = "postgres://app@db1:5432,db2:5432/app?target_session_attrs=read-write";
/// // Client::connect(url) does all of this itself.
/// let primary = conveyor::Primary::connect(url).await?;
/// let pool = primary.pool(conveyor::pool_options());
/// let client = conveyor::Client::builder(pool).primary(primary).build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Primary {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primary")
            .field("host", &self.host())
            .field("switches", &self.switches())
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    list: HostList,
    host_timeout: Duration,
    /// When this started: switch times are counted from here.
    base: Instant,
    /// Microseconds after `base` of the latest switch; 0 before any.
    switched_at: AtomicU64,
    state: Mutex<State>,
    /// Switches so far; sessions held outside pools watch it.
    switches: watch::Sender<u64>,
    /// Changes whenever the pools are pointed elsewhere (a switch, or
    /// waiting on a standby while no server qualifies): connections parked
    /// in `after_connect` look again.
    retarget: watch::Sender<u64>,
    /// Wakes the watcher before its next check (a pool met a server that
    /// does not qualify).
    suspect: Arc<Notify>,
}

struct State {
    /// Index in `list.hosts` of the server followed.
    current: usize,
    /// Index of the server the pools connect to: `current`, or while no
    /// server qualifies, the first that answered (a standby that may be
    /// promoted; see `hooks`).
    target: usize,
    /// Registered pools, with their registration ids.
    pools: Vec<(u64, PgPool)>,
    next_id: u64,
}

impl Primary {
    /// Parses a libpq-style URL (`postgres://user@h1:p1,h2:p2/db?target_session_attrs=read-write`;
    /// `target_session_attrs` may be `read-write`, `primary` or `any`, the
    /// default; libpq's `connect_timeout` in seconds bounds each host's
    /// answer, 2 s otherwise), finds the first host in order that qualifies,
    /// waiting up to 30 s for one, and starts checking it every second.
    /// Must be called within a tokio runtime.
    pub async fn connect(url: &str) -> Result<Primary> {
        Primary::with_hosts(parse(url)?).await
    }

    pub(crate) async fn with_hosts(list: HostList) -> Result<Primary> {
        let host_timeout = list.connect_timeout.unwrap_or(DEFAULT_HOST_TIMEOUT);
        let shared = Arc::new(Shared {
            list,
            host_timeout,
            base: Instant::now(),
            switched_at: AtomicU64::new(0),
            state: Mutex::new(State {
                current: 0,
                target: 0,
                pools: Vec::new(),
                next_id: 0,
            }),
            switches: watch::channel(0).0,
            retarget: watch::channel(0).0,
            suspect: Arc::new(Notify::new()),
        });
        let (current, probe) = watcher::find_within(&shared, FIND_FOR).await?;
        let mut state = shared.lock();
        (state.current, state.target) = (current, current);
        drop(state);
        watcher::spawn(Arc::downgrade(&shared), probe);
        Ok(Primary { shared })
    }

    /// A pool (connecting lazily) that follows this primary: each new
    /// connection goes to the server followed and is checked against
    /// `target_session_attrs`; connections opened before a switch are
    /// closed when next taken; while no server qualifies, a new connection
    /// waits (up to the acquire timeout) on a server that answers, in case
    /// it is the standby being promoted. Sets `options`' `after_connect` and
    /// `before_acquire` (do not set your own). The pool is kept (and
    /// followed) while this `Primary` lives, or until it is closed.
    pub fn pool(&self, options: PgPoolOptions) -> PgPool {
        self.register(options).0
    }

    /// `host:port` of the server followed now.
    pub fn host(&self) -> String {
        let state = self.shared.lock();
        self.shared.list.hosts[state.current].0.clone()
    }

    /// How many times the followed server changed since [`Primary::connect`].
    pub fn switches(&self) -> u64 {
        *self.shared.switches.borrow()
    }

    /// Registers a pool of `options` pointed at the current server.
    fn register(&self, options: PgPoolOptions) -> (PgPool, u64) {
        let options = hooks::hooked(options, Arc::downgrade(&self.shared));
        let mut state = self.shared.lock();
        // A pool its owner closed has nothing left to follow.
        state.pools.retain(|(_, pool)| !pool.is_closed());
        let connect = self.shared.list.hosts[state.target].1.clone();
        let pool = options.connect_lazy_with(connect);
        let id = state.next_id;
        state.next_id += 1;
        state.pools.push((id, pool.clone()));
        (pool, id)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows host `index` (it qualified), pointing every pool at it.
    fn switch_to(&self, index: usize) {
        let mut state = self.lock();
        if state.current == index {
            // The same server again (it was slow, or restarted).
            self.point_pools(&mut state, index);
            return;
        }
        let (from, to) = (&self.list.hosts[state.current].0, &self.list.hosts[index].0);
        tracing::warn!(%from, %to, "conveyor: following the new primary");
        state.current = index;
        // Connections opened from now on go to the new server; older ones
        // are closed when next taken from their pool.
        let micros = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.switched_at.store(micros.max(1), Ordering::SeqCst);
        self.point_pools(&mut state, index);
        // Under the lock: whoever reads the server and the count together
        // (`Connector::connect`) sees both old or both new.
        self.switches.send_modify(|n| *n += 1);
    }

    /// While no server qualifies: new connections go to host `index`, which
    /// answered, and wait there (up to their acquire timeout) in case it is
    /// the standby being promoted. Without this they would retry the dead
    /// server with sqlx's growing backoff (up to a fifth of the acquire
    /// timeout), and work would resume seconds after the promotion.
    fn wait_on(&self, index: usize) {
        let mut state = self.lock();
        if state.target != index {
            tracing::info!(
                host = %self.list.hosts[index].0,
                "conveyor: no server qualifies yet; new connections wait on one that answers"
            );
            self.point_pools(&mut state, index);
        }
    }

    fn point_pools(&self, state: &mut State, index: usize) {
        if state.target == index {
            return;
        }
        state.target = index;
        let options = &self.list.hosts[index].1;
        for (_, pool) in &state.pools {
            pool.set_connect_options(options.clone());
        }
        self.retarget.send_modify(|n| *n += 1);
    }

    /// Whether a connection `age` old was opened before the latest switch.
    fn predates_switch(&self, age: Duration) -> bool {
        let switched = self.switched_at.load(Ordering::SeqCst);
        let opened = self.base.elapsed().saturating_sub(age);
        switched != 0 && opened < Duration::from_micros(switched)
    }
}
