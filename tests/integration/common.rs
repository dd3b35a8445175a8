//! Test support: a fresh database per test, and waiting for events with a timeout.
//!
//! The same modules make the `pgbouncer` test target (tests/pgbouncer), which
//! runs the suite again with each test's client, and so its workers, going
//! through PgBouncer in transaction mode ([`THROUGH_PGBOUNCER`], `bouncer`).
//! The test's own pool (`TestDb::pool`, for its checks and adversaries)
//! stays direct.

#[path = "common/bouncer.rs"]
pub mod bouncer;

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use conveyor::{Client, Pooler};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// Where the shared PostgreSQL is (`DATABASE_URL`, default the local one).
pub fn base_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// Whether this test binary sends each test's client through PgBouncer: the
/// `pgbouncer` target does, `integration` does not.
pub const THROUGH_PGBOUNCER: bool = same(env!("CARGO_CRATE_NAME"), "pgbouncer");

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// How often idle workers poll when a test's client has no session URL.
pub const POLL: Duration = Duration::from_millis(100);

/// From this many jobs due now, `Client::enqueue_many` streams them with
/// COPY (its documented threshold; a unit test in `src/db/enqueue.rs`
/// keeps the crate's constant at this value).
pub const COPY_MIN: usize = 1_000;

/// A database of its own for one test, migrated, dropped when the value is.
pub struct TestDb {
    pub pool: PgPool,
    pub client: Client,
    name: String,
}

impl TestDb {
    /// A new, migrated database: a copy of a migrated template (see
    /// [`template`]), which is much cheaper than migrating every test's
    /// database (the schema makes a few dozen tables and indexes).
    pub async fn new() -> TestDb {
        let template = template().await;
        TestDb::create(&format!("TEMPLATE {template}")).await
    }

    /// A URL for this database.
    pub fn url(&self) -> String {
        let base = base_url();
        let (server, _) = base
            .rsplit_once('/')
            .expect("DATABASE_URL has a database name");
        format!("{server}/{}", self.name)
    }

    /// A URL for this database through this binary's PgBouncer (started on
    /// first use), in transaction mode.
    pub fn bouncer_url(&self) -> String {
        let admin = PgConnectOptions::from_str(&base_url()).expect("DATABASE_URL");
        let port = bouncer::port((admin.get_host(), admin.get_port()));
        format!("postgres://postgres@127.0.0.1:{port}/{}", self.name)
    }

    /// A pool of `connections` to this database through PgBouncer.
    pub fn bouncer_pool(&self, connections: u32) -> PgPool {
        conveyor::pool_options()
            .max_connections(connections)
            .connect_lazy(&self.bouncer_url())
            .expect("PgBouncer URL")
    }

    /// A client through PgBouncer with [`Pooler`] set: `LISTEN` and the
    /// periodic leader on a direct session (`session`), or none (idle
    /// workers poll every [`POLL`]).
    pub fn bouncer_client(&self, session: bool) -> Client {
        let mut pooler = Pooler::transaction_mode().poll_every(POLL);
        if session {
            pooler = pooler.session_url(self.url());
        }
        Client::builder(self.bouncer_pool(8))
            .pooler(pooler)
            .build()
            .expect("client through PgBouncer")
    }

    /// Where this test's queue connections go, as `host:port` (for a proxy
    /// in front of them): this binary's PgBouncer, or the server.
    pub fn queue_target(&self) -> String {
        let admin = PgConnectOptions::from_str(&base_url()).expect("DATABASE_URL");
        if THROUGH_PGBOUNCER {
            let port = bouncer::port((admin.get_host(), admin.get_port()));
            format!("127.0.0.1:{port}")
        } else {
            format!("{}:{}", admin.get_host(), admin.get_port())
        }
    }

    /// A client on `pool` (which reaches [`TestDb::queue_target`], perhaps
    /// through a proxy), with [`Pooler`] set in the `pgbouncer` binary:
    /// `LISTEN` and the periodic leader on a direct session if
    /// `session_direct`, else through `pool`'s server (polling).
    pub fn client_on(&self, pool: PgPool, session_direct: bool) -> Client {
        if !THROUGH_PGBOUNCER {
            return Client::new(pool);
        }
        let mut pooler = Pooler::transaction_mode().poll_every(POLL);
        if session_direct {
            pooler = pooler.session_url(self.url());
        }
        Client::builder(pool)
            .pooler(pooler)
            .build()
            .expect("client through PgBouncer")
    }

    /// A new database without Conveyor's schema.
    pub async fn empty() -> TestDb {
        TestDb::create("").await
    }

    async fn create(options: &str) -> TestDb {
        let name = format!("conveyor_test_{}", uuid::Uuid::new_v4().simple());
        let admin = PgConnectOptions::from_str(&base_url()).expect("DATABASE_URL");
        let mut conn = admin.connect().await.expect("connect to PostgreSQL");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} {options}"
        )))
        .execute(&mut conn)
        .await
        .expect("create test database");
        conn.close().await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(admin.database(&name))
            .await
            .expect("connect to test database");
        let mut db = TestDb {
            client: Client::new(pool.clone()),
            pool,
            name,
        };
        if THROUGH_PGBOUNCER {
            db.client = db.bouncer_client(true);
        }
        db
    }
}

/// The name of a database migrated with this build's migrations, made once
/// (per set of migrations: the name carries a hash of their files) by the
/// first test that needs it, under an advisory lock so that concurrent test
/// processes make it once. It is marked ready only once migrated, so a
/// half-made one (a killed run) is made again. Templates of other builds
/// older than a day are dropped on the way.
async fn template() -> String {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            // The migrations and the files of sql/ (the function files among
            // them), at any depth, in path order.
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let mut dirs = vec![root.join("migrations"), root.join("sql")];
            let mut files = Vec::new();
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(&dir).expect("migrations") {
                    let path = entry.expect("migration file").path();
                    if path.is_dir() {
                        dirs.push(path);
                    } else if path.extension().is_some_and(|e| e == "sql") {
                        files.push(path);
                    }
                }
            }
            files.sort();
            for file in files {
                std::fs::read_to_string(&file).expect("migration").hash(&mut hasher);
            }
            let name = format!("conveyor_template_{:016x}", hasher.finish());
            let admin = PgConnectOptions::from_str(&base_url()).expect("DATABASE_URL");
            let mut conn = admin.connect().await.expect("connect to PostgreSQL");
            let exec = |sql: String| sqlx::raw_sql(sqlx::AssertSqlSafe(sql));
            exec("SELECT pg_advisory_lock(hashtext('conveyor test template'))".into())
                .execute(&mut conn)
                .await
                .expect("template lock");
            let stale: Vec<String> = sqlx::query_scalar(
                "SELECT datname::text FROM pg_database
                 WHERE datname LIKE 'conveyor_template_%' AND datname <> $1
                   AND coalesce(substring(shobj_description(oid, 'pg_database') FROM 'ready ([0-9]+)')::bigint, 0)
                       < extract(epoch FROM now() - interval '1 day')",
            )
            .bind(&name)
            .fetch_all(&mut conn)
            .await
            .expect("list templates");
            for old in stale {
                let _ = exec(format!("DROP DATABASE IF EXISTS {old} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await;
            }
            let ready: Option<bool> = sqlx::query_scalar(
                "SELECT coalesce(shobj_description(oid, 'pg_database') LIKE 'ready %', false)
                 FROM pg_database WHERE datname = $1",
            )
            .bind(&name)
            .fetch_optional(&mut conn)
            .await
            .expect("find template");
            if ready != Some(true) {
                exec(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .expect("drop half-made template");
                exec(format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create template");
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(admin.clone().database(&name))
                    .await
                    .expect("connect to template");
                conveyor::migrate(&pool).await.expect("migrate template");
                pool.close().await;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                exec(format!("COMMENT ON DATABASE {name} IS 'ready {now}'"))
                .execute(&mut conn)
                .await
                .expect("mark template ready");
            }
            conn.close().await.ok();
            name
        })
        .await
        .clone()
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop the database from a thread of its own: Drop cannot await, and the
        // test's runtime is blocked here (so its pool cannot be closed cleanly;
        // FORCE ends its connections instead).
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(admin) = PgConnectOptions::from_str(&base_url()) else {
                    return;
                };
                if let Ok(mut conn) = admin.connect().await {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Re-evaluates `check` until it returns `Some`, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The shared buffers on a `Buffers:` line of `EXPLAIN (ANALYZE, BUFFERS)`,
/// hit or read (`Buffers: shared hit=14 read=120 dirtied=2, temp read=5`
/// gives 134; a line of other buffers, none). Hits alone undercount: pages
/// another database's work pushed out of `shared_buffers` are read.
pub fn shared_pages(line: &str) -> Option<u64> {
    let shared = line.trim().strip_prefix("Buffers: shared ")?;
    let counts = shared.split(',').next().unwrap_or_default();
    Some(
        counts
            .split_whitespace()
            .filter_map(|pair| match pair.split_once('=') {
                Some(("hit" | "read", n)) => n.parse::<u64>().ok(),
                _ => None,
            })
            .sum(),
    )
}

/// `SELECT count(*) FROM conveyor.jobs WHERE <filter>`.
pub async fn count_jobs(pool: &PgPool, filter: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM conveyor.jobs WHERE {filter}"
    )))
    .fetch_one(pool)
    .await
    .expect("count jobs")
}

/// Waits until the worker's LISTEN connection is in place.
pub async fn wait_for_listen(pool: &PgPool, listeners: i64) {
    eventually(Duration::from_secs(10), "worker LISTEN", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE 'LISTEN%job_ready%'",
        )
        .fetch_one(pool)
        .await
        .ok()?;
        (n >= listeners).then_some(())
    })
    .await
}

pub const WAIT: Duration = Duration::from_secs(20);

/// A lease that a worker keeps on a loaded machine: it is renewed every
/// third of it (5 s), so a renewal would have to come 10 s late for it to
/// lapse. For tests whose jobs must hold their lease while something else
/// happens; a test that must see renewals waits 5 s for each.
pub const STEADY_LEASE: Duration = Duration::from_secs(15);

/// Runs futures concurrently on this task (no extra crate for join_all).
pub async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for (i, f) in futures.into_iter().enumerate() {
        set.spawn(async move { (i, f.await) });
    }
    let mut out: Vec<(usize, F::Output)> = Vec::new();
    while let Some(joined) = set.join_next().await {
        out.push(joined.expect("task"));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}

/// `n` jobs of task `t` enqueued and taken by one claim, as claim.sql takes
/// them (ring rows gone, one `conveyor.claims` row, the job rows left
/// pending): their ids and the claim's token.
pub async fn claimed_by_hand(db: &TestDb, n: usize) -> (Vec<conveyor::JobId>, i64) {
    let ids: Vec<conveyor::JobId> = db
        .client
        .enqueue_many(
            (0..n)
                .map(|_| conveyor::NewJob::new("t", serde_json::json!({})))
                .collect(),
        )
        .await
        .unwrap()
        .iter()
        .map(|h| h.id())
        .collect();
    let token: i64 = sqlx::query_scalar(
        "WITH gone AS (DELETE FROM conveyor.ready WHERE job_id = ANY($1))
         INSERT INTO conveyor.claims
             (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
         VALUES (nextval('conveyor.lease_tokens'), 'default', 'w', now(),
                 now() + interval '1 minute', $1, cardinality($1))
         RETURNING lease_token",
    )
    .bind(&ids)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    (ids, token)
}

/// A session holding the xmin horizon (a transaction with an id, left
/// open), as a forgotten psql session does; `ROLLBACK` on it ends the hold.
pub async fn hold_snapshot(db: &TestDb) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut holder = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT txid_current();")
        .execute(&mut holder)
        .await
        .unwrap();
    holder
}

/// `n` claims made ten minutes ago, their leases run out nine minutes
/// ago, written and deleted by hand: under a held snapshot, the versions a
/// reader of `conveyor.claims` must step over.
pub async fn claims_ended_long_ago(db: &TestDb, n: i32) {
    sqlx::query(
        "INSERT INTO conveyor.claims
             (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
         SELECT nextval('conveyor.lease_tokens'), 'default', 'w', now() - interval '10 minutes',
                now() - interval '9 minutes', '{}', 0
         FROM generate_series(1, $1)",
    )
    .bind(n)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM conveyor.claims WHERE worker_id = 'w' AND jobs_left = 0")
        .execute(&db.pool)
        .await
        .unwrap();
}
