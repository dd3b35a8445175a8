//! What `crate::migrate` runs: its advisory lock, the schema, migration batches
//! and refinery's history table.

use sqlx::{PgConnection, Row};

use super::Queries;
use crate::error::Result;

/// Key of the advisory lock that serialises migrations of one schema.
pub(crate) async fn lock_migrations(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('conveyor.migrate:' || $1, 0))")
        .bind(q.schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(crate) async fn unlock_migrations(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended('conveyor.migrate:' || $1, 0))")
        .bind(q.schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(crate) async fn create_schema(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::raw_sql(q.create_schema).execute(&mut *conn).await?;
    Ok(())
}

/// Runs a batch of statements (a migration) in one transaction.
pub(crate) async fn execute_in_transaction<'a>(
    conn: &mut PgConnection,
    statements: impl Iterator<Item = &'a str>,
) -> std::result::Result<usize, sqlx::Error> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    let mut count = 0;
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
        count += 1;
    }
    tx.commit().await?;
    Ok(count)
}

/// Reads refinery's history table: (version, name, applied_on, checksum).
pub(crate) async fn applied_migrations(
    conn: &mut PgConnection,
    query: &str,
) -> std::result::Result<Vec<(i32, String, String, String)>, sqlx::Error> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(query))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        })
        .collect()
}
