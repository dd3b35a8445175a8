//! A small fault-injecting TCP proxy for tests: put it between a client and
//! PostgreSQL (`Proxy::url`) to lose a reply after the server acted on a
//! statement, partition the network for a while, or drop every connection.
//!
//! Each accepted connection is one task running two pumps (client→server and
//! server→client); when either ends, both sockets are dropped (closed).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// Client bytes kept across reads so a needle straddling two reads is still
/// found (needles longer than this + 1 may be missed when split).
const TAIL: usize = 1024;

/// State shared by the `Proxy` handle and its tasks.
struct Shared {
    /// `true` while the network is cut.
    cut: watch::Sender<bool>,
    /// The armed lost-acknowledgement needle, taken by the first match.
    armed: Mutex<Option<Vec<u8>>>,
    /// The armed freeze needle, taken by the first match, and how many more
    /// client chunks go through after it.
    freeze: Mutex<Option<Vec<u8>>>,
    freeze_more: AtomicUsize,
    fired: AtomicBool,
    /// Cut the network as soon as a lost acknowledgement fires.
    cut_when_fired: AtomicBool,
    accepted: AtomicUsize,
    /// Times a connection was held back by a cut: a new one not yet
    /// connected upstream, or a chunk read and not yet forwarded.
    held: AtomicUsize,
    /// Connection tasks, to abort on `kill_all` and on drop.
    conns: Mutex<Vec<AbortHandle>>,
}

/// Locks, ignoring poisoning (no panic in the proxy's tasks).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A TCP proxy on 127.0.0.1 forwarding to one upstream; stops when dropped.
pub struct Proxy {
    port: u16,
    /// The accept loop.
    task: JoinHandle<()>,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on 127.0.0.1:<free port>, forwarding each accepted connection
    /// to `upstream` (e.g. "127.0.0.1:5432").
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            cut: watch::Sender::new(false),
            armed: Mutex::new(None),
            freeze: Mutex::new(None),
            freeze_more: AtomicUsize::new(0),
            fired: AtomicBool::new(false),
            cut_when_fired: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            conns: Mutex::new(Vec::new()),
        });
        let (upstream, state) = (upstream.to_string(), shared.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let task = tokio::spawn(serve(client, upstream.clone(), state.clone()));
                let mut conns = lock(&state.conns);
                conns.retain(|c| !c.is_finished());
                conns.push(task.abort_handle());
            }
        });
        Proxy { port, task, shared }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (e.g. "postgres://postgres@127.0.0.1:5432/db?x=y") with its
    /// host:port replaced by this proxy's; user, database and query are kept.
    pub fn url(&self, url: &str) -> String {
        let (prefix, _, rest) = split_host_port(url);
        format!("{prefix}127.0.0.1:{}{rest}", self.port)
    }

    /// Arms a one-shot lost acknowledgement: the next client→server chunk (on
    /// any connection) containing `needle` is forwarded, then the server's next
    /// bytes on that connection are dropped and both its sockets closed. The
    /// needle may straddle two reads (up to `TAIL` + 1 bytes long). SQL text
    /// travels in simple queries (`raw_sql`, sqlx's `COMMIT`) and in sqlx's
    /// prepare round trip (Parse+Describe+Sync, before the statement runs;
    /// absent once the statement is cached on that connection).
    pub fn lose_next_reply_to(&self, needle: &[u8]) {
        *lock(&self.shared.armed) = Some(needle.to_vec());
    }

    /// `lose_next_reply_to`, and the network is cut (as by `cut`) the
    /// moment the reply is dropped, so the client's retry waits for `heal`.
    pub fn lose_next_reply_to_then_cut(&self, needle: &[u8]) {
        self.shared.cut_when_fired.store(true, Ordering::SeqCst);
        self.lose_next_reply_to(needle);
    }

    /// Arms a one-shot partition of one connection: the next client→server
    /// chunk containing `needle` is forwarded, and `more` chunks after it on
    /// that connection, then it forwards nothing more either way and is left
    /// open (the server sees a live, idle client) until `kill_all` or drop.
    /// `fired` tells when it happened. (sqlx sends a new statement's text in
    /// one chunk, Parse, and runs it in the next, Bind and Execute: `more` = 1
    /// lets the statement run and loses its answer.)
    pub fn freeze_after(&self, needle: &[u8], more: usize) {
        self.shared.freeze_more.store(more, Ordering::SeqCst);
        *lock(&self.shared.freeze) = Some(needle.to_vec());
    }

    /// Whether an armed lost acknowledgement or freeze has fired (a reply was dropped).
    pub fn fired(&self) -> bool {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// Cuts the network: nothing is forwarded either way and new connections
    /// hang (nothing is closed) until `heal`.
    pub fn cut(&self) {
        self.shared.cut.send_replace(true);
    }

    /// Resumes forwarding, on connections still open and on new ones.
    pub fn heal(&self) {
        self.shared.cut.send_replace(false);
    }

    /// Closes every connection currently open through the proxy.
    pub fn kill_all(&self) {
        for conn in lock(&self.shared.conns).drain(..) {
            conn.abort();
        }
    }

    /// Number of connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// How many times a cut held something back (see `Shared::held`).
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.kill_all();
    }
}

/// Splits a URL into (scheme and user info, host:port, path and query).
fn split_host_port(url: &str) -> (&str, &str, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| i + start);
    let host = url[start..end].rfind('@').map_or(start, |i| start + i + 1);
    (&url[..host], &url[host..end], &url[end..])
}

/// Waits until the network is not cut; `None` if the proxy is gone. A
/// wait that a cut makes is counted in `held`.
async fn healed(cut: &mut watch::Receiver<bool>, held: &AtomicUsize) -> Option<()> {
    if *cut.borrow_and_update() {
        held.fetch_add(1, Ordering::SeqCst);
    }
    cut.wait_for(|cut| !*cut).await.ok().map(drop)
}

/// One proxied connection: connects upstream (once healed) and runs both pumps
/// until either ends; returning drops, so closes, both sockets.
async fn serve(mut client: TcpStream, upstream: String, shared: Arc<Shared>) -> Option<()> {
    let mut cut = shared.cut.subscribe();
    healed(&mut cut, &shared.held).await?;
    let mut server = TcpStream::connect(&upstream).await.ok()?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let flags = Flags::default();
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    tokio::select! {
        _ = pump(&mut client_read, &mut server_write, &shared, &flags, cut.clone(), true) => {}
        _ = pump(&mut server_read, &mut client_write, &shared, &flags, cut, false) => {}
    }
    None
}

/// What an armed needle did to one connection.
#[derive(Default)]
struct Flags {
    /// Drop the server's next chunk and close.
    lose: AtomicBool,
    /// Forward nothing more, close nothing.
    frozen: AtomicBool,
    /// Client chunks still to forward before freezing, once the needle matched.
    freeze_in: Mutex<Option<usize>>,
}

/// Forwards `from` to `to` until either ends (`None`). Client→server
/// (`upstream`) it watches for the armed needle; server→client, after a match
/// it drops the next chunk instead and ends the connection; once frozen,
/// neither direction forwards again.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    shared: &Shared,
    flags: &Flags,
    mut cut: watch::Receiver<bool>,
    upstream: bool,
) -> Option<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = from.read(&mut buf).await.ok().filter(|&n| n > 0)?;
        if flags.frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if !upstream && flags.lose.load(Ordering::SeqCst) {
            if shared.cut_when_fired.swap(false, Ordering::SeqCst) {
                shared.cut.send_replace(true);
            }
            shared.fired.store(true, Ordering::SeqCst);
            return None;
        }
        healed(&mut cut, &shared.held).await?;
        let chunk = &buf[..n];
        let mut freeze = false;
        if upstream {
            if take_if_armed(&shared.armed, &tail, chunk) {
                flags.lose.store(true, Ordering::SeqCst);
            }
            let mut freeze_in = lock(&flags.freeze_in);
            if take_if_armed(&shared.freeze, &tail, chunk) {
                *freeze_in = Some(shared.freeze_more.load(Ordering::SeqCst));
            } else if let Some(n) = freeze_in.as_mut() {
                *n = n.saturating_sub(1);
            }
            freeze = *freeze_in == Some(0);
            tail.extend_from_slice(chunk);
            tail.drain(..tail.len().saturating_sub(TAIL));
        }
        to.write_all(chunk).await.ok()?;
        if freeze {
            flags.frozen.store(true, Ordering::SeqCst);
            shared.fired.store(true, Ordering::SeqCst);
        }
    }
}

/// Whether the armed needle (disarming it if so) ends in `chunk`, which
/// follows the bytes `tail` on the same connection.
fn take_if_armed(armed: &Mutex<Option<Vec<u8>>>, tail: &[u8], chunk: &[u8]) -> bool {
    let mut armed = lock(armed);
    let found = armed.as_deref().is_some_and(|needle| {
        // Only the last needle.len() - 1 old bytes: a match must end in `chunk`.
        let keep = tail.len().min(needle.len().saturating_sub(1));
        let window = [&tail[tail.len() - keep..], chunk].concat();
        needle.is_empty() || window.windows(needle.len()).any(|w| w == needle)
    });
    found && armed.take().is_some()
}

#[tokio::test]
async fn proxy_loses_replies_cuts_heals_and_kills() {
    use crate::common::{TestDb, WAIT, base_url, eventually};
    use sqlx::{Connection, PgConnection, PgExecutor};
    use tokio::time::timeout;
    async fn connect(url: String) -> PgConnection {
        PgConnection::connect(&url).await.expect("connect")
    }
    async fn one<'c>(db: impl PgExecutor<'c>, sql: &'static str) -> sqlx::Result<i64> {
        sqlx::query_scalar(sql).fetch_one(db).await
    }
    async fn exec<'c>(db: impl PgExecutor<'c>, sql: &'static str) -> sqlx::Result<()> {
        sqlx::raw_sql(sql).execute(db).await.map(drop)
    }

    let base = base_url();
    let proxy = Proxy::start(split_host_port(&base).1).await;
    let url = proxy.url("postgres://u:p@h:1/db?x=y");
    assert_eq!(
        url,
        format!("postgres://u:p@127.0.0.1:{}/db?x=y", proxy.port())
    );

    // (1) Queries go through.
    let mut conn = connect(proxy.url(&base)).await;
    assert_eq!(one(&mut conn, "SELECT 1::int8").await.unwrap(), 1);
    assert_eq!(proxy.accepted(), 1);

    // (2) A lost acknowledgement: the insert commits, the client sees an error.
    let db = TestDb::empty().await;
    exec(&db.pool, "CREATE TABLE t (x int)").await.unwrap();
    let mut victim = connect(proxy.url(&db.url())).await;
    proxy.lose_next_reply_to(b"INSERT INTO t");
    assert!(!proxy.fired());
    let lost = timeout(WAIT, exec(&mut victim, "INSERT INTO t VALUES (1)")).await;
    let lost = lost.expect("not hung");
    assert!(lost.is_err(), "the reply should have been lost: {lost:?}");
    assert!(proxy.fired());
    let count = "SELECT count(*) FROM t";
    assert_eq!(one(&db.pool, count).await.unwrap(), 1, "committed anyway");
    // One-shot: the next insert (on another connection) is acknowledged.
    let mut again = connect(proxy.url(&db.url())).await;
    exec(&mut again, "INSERT INTO t VALUES (2)").await.unwrap();
    assert_eq!(one(&db.pool, count).await.unwrap(), 2);

    // (3) A cut holds back open and new connections (their insert and
    // handshake wait in the proxy: it says so, and the row is not there);
    // healing lets both through, and new ones work.
    proxy.cut();
    let held = proxy.held();
    let inserting = tokio::spawn(async move {
        exec(&mut again, "INSERT INTO t VALUES (3)")
            .await
            .map(|()| again)
    });
    eventually(WAIT, "the insert held back by the cut", || async {
        (proxy.held() > held).then_some(())
    })
    .await;
    let connecting = tokio::spawn(connect(proxy.url(&base)));
    eventually(WAIT, "the new connection held back by the cut", || async {
        (proxy.held() > held + 1).then_some(())
    })
    .await;
    assert!(!inserting.is_finished() && !connecting.is_finished());
    assert_eq!(one(&db.pool, count).await.unwrap(), 2, "held back");
    proxy.heal();
    let mut again = timeout(WAIT, inserting)
        .await
        .expect("the insert goes through once healed")
        .unwrap()
        .unwrap();
    assert_eq!(one(&db.pool, count).await.unwrap(), 3);
    assert_eq!(one(&mut again, "SELECT 3::int8").await.unwrap(), 3);
    let mut held_back = timeout(WAIT, connecting)
        .await
        .expect("the connection is made once healed")
        .unwrap();
    assert_eq!(one(&mut held_back, "SELECT 1::int8").await.unwrap(), 1);
    let mut fresh = connect(proxy.url(&base)).await;
    assert_eq!(one(&mut fresh, "SELECT 2::int8").await.unwrap(), 2);

    // (4) kill_all closes open connections.
    proxy.kill_all();
    let killed = timeout(WAIT, one(&mut fresh, "SELECT 3::int8")).await;
    assert!(killed.expect("not hung").is_err(), "query after kill_all");
    assert_eq!(proxy.accepted(), 5, "conn, victim, again, held back, fresh");
}
