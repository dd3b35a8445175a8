//! Test support: a fresh database per test, and waiting for events with a timeout.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use conveyor::Client;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// Where the shared PostgreSQL is (`DATABASE_URL`, default the local one).
pub fn base_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A database of its own for one test, migrated, dropped when the value is.
pub struct TestDb {
    pub pool: PgPool,
    pub client: Client,
    name: String,
}

impl TestDb {
    /// A new, migrated database.
    pub async fn new() -> TestDb {
        let db = TestDb::empty().await;
        conveyor::migrate(&db.pool).await.expect("migrate");
        db
    }

    /// A URL for this database.
    pub fn url(&self) -> String {
        let base = base_url();
        let (server, _) = base
            .rsplit_once('/')
            .expect("DATABASE_URL has a database name");
        format!("{server}/{}", self.name)
    }

    /// A new database without Conveyor's schema.
    pub async fn empty() -> TestDb {
        let name = format!("conveyor_test_{}", uuid::Uuid::new_v4().simple());
        let admin = PgConnectOptions::from_str(&base_url()).expect("DATABASE_URL");
        let mut conn = admin.connect().await.expect("connect to PostgreSQL");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
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
        let client = Client::new(pool.clone());
        TestDb { pool, client, name }
    }
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
