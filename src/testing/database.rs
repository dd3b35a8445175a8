//! [`TestDatabase`]: a database of its own for each test, so that tests
//! touching the queue run in parallel against a real PostgreSQL.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::client::Client;
use crate::error::{Error, Result};

/// The server tests use unless told otherwise: `DATABASE_URL`, or the
/// local PostgreSQL as user `postgres`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A new database named `conveyor_test_<random>` on a server, with a pool
/// and a [`Client`] on it; dropped (with `FORCE`) when this value is.
///
/// ```no_run
/// # async fn demo() -> conveyor::Result<()> {
/// let db = conveyor::testing::TestDatabase::new().await?; // migrated
/// db.client().enqueue(conveyor::NewJob::new("t", serde_json::json!({}))).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestDatabase {
    pool: PgPool,
    client: Client,
    name: String,
    server: PgConnectOptions,
}

impl TestDatabase {
    /// A new database on [`server_url`], migrated.
    pub async fn new() -> Result<TestDatabase> {
        let db = TestDatabase::empty().await?;
        crate::migrate(&db.pool).await?;
        Ok(db)
    }

    /// A new database on [`server_url`], without Conveyor's schema.
    pub async fn empty() -> Result<TestDatabase> {
        TestDatabase::on(&server_url()).await
    }

    /// A new, empty database on the server of `url` (whose user may create
    /// databases). Its pool has 8 connections.
    pub async fn on(url: &str) -> Result<TestDatabase> {
        let server = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Config(format!("database URL: {e}")))?;
        let name = format!("conveyor_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = server.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(server.clone().database(&name))
            .await?;
        Ok(TestDatabase {
            client: Client::new(pool.clone()),
            pool,
            name,
            server,
        })
    }

    /// Its pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A client on its pool (schema `conveyor`).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connect options for it (the server's, with this database).
    pub fn connect_options(&self) -> PgConnectOptions {
        self.server.clone().database(&self.name)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (name, server) = (self.name.clone(), self.server.clone());
        // From a thread of its own: Drop cannot await, and the test's runtime
        // may be blocked here (so its pool cannot close cleanly: FORCE ends
        // its connections instead).
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = server.connect().await {
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
