//! Where a library statement runs: [`Exec`], the one executor every function
//! of `db` hands its statements to.
//!
//! Direct to PostgreSQL it passes each statement to the pool or connection
//! it wraps, untouched (one branch on a flag). Behind a transaction-mode
//! pooler (PgBouncer, see [`crate::Pooler`]) every statement is sent
//! unnamed (`persistent(false)`) and inside an explicit transaction: its
//! caller's if the connection is in one, else one of its own around that
//! statement alone. sqlx sends a statement with parameters in two round
//! trips, each ending in `Sync`; outside a transaction the pooler may hand
//! the server connection to another client between them, which then binds
//! our parameters to its statement or the reverse
//! (docs/decisions/2026-11-23-pgbouncer-transaction-mode-findings.md).
//! `raw_sql` (simple protocol) is safe either way and never comes here.

use futures_core::future::BoxFuture;
use futures_core::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt, stream};
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Connection, Either, Error, Execute, Executor, PgConnection, PgPool, Postgres, SqlStr};

use super::{BEGIN, Queries};

/// A pool or a connection.
#[derive(Debug)]
pub(crate) enum Target<'c> {
    Pool(&'c PgPool),
    Conn(&'c mut PgConnection),
}

impl<'c> From<&'c PgPool> for Target<'c> {
    fn from(pool: &'c PgPool) -> Self {
        Target::Pool(pool)
    }
}

impl<'c> From<&'c mut PgConnection> for Target<'c> {
    fn from(conn: &'c mut PgConnection) -> Self {
        Target::Conn(conn)
    }
}

impl<'c> From<&'c mut sqlx::pool::PoolConnection<Postgres>> for Target<'c> {
    fn from(conn: &'c mut sqlx::pool::PoolConnection<Postgres>) -> Self {
        Target::Conn(conn)
    }
}

/// A [`Target`] and whether it is reached through a transaction-mode pooler.
#[derive(Debug)]
pub(crate) struct Exec<'c> {
    target: Target<'c>,
    pooled: bool,
}

impl Queries {
    /// Where this schema's statements run on `target`: as given, or made
    /// safe for a transaction-mode pooler if these queries were built for one.
    pub(crate) fn on<'c>(&self, target: impl Into<Target<'c>>) -> Exec<'c> {
        Exec {
            target: target.into(),
            pooled: self.pooled,
        }
    }
}

/// A statement sent unnamed: parsed, bound and run on one server
/// connection, never cached on ours.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement> {
        self.0.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

type Step = Either<PgQueryResult, PgRow>;

/// Runs `query` unnamed on `target` inside a transaction (the connection's
/// own if it is in one) and collects what it returns.
async fn pooled<'q, E, T>(
    target: Target<'_>,
    query: E,
    run: impl AsyncFnOnce(&mut PgConnection, Unnamed<E>) -> Result<T, Error>,
) -> Result<T, Error>
where
    E: Execute<'q, Postgres>,
{
    let query = Unnamed(query);
    let mut tx = match target {
        Target::Conn(conn) if conn.is_in_transaction() => return run(conn, query).await,
        Target::Conn(conn) => conn.begin_with(BEGIN).await?,
        Target::Pool(pool) => pool.begin_with(BEGIN).await?,
    };
    let out = run(&mut tx, query).await?;
    tx.commit().await?;
    Ok(out)
}

impl<'c> Executor<'c> for Exec<'c> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return match self.target {
                Target::Pool(pool) => pool.fetch_many(query),
                Target::Conn(conn) => conn.fetch_many(query),
            };
        }
        let steps = pooled(self.target, query, async |conn, query| {
            conn.fetch_many(query).try_collect::<Vec<_>>().await
        });
        stream::once(steps)
            .map_ok(|steps| stream::iter(steps.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return match self.target {
                Target::Pool(pool) => pool.fetch_optional(query),
                Target::Conn(conn) => conn.fetch_optional(query),
            };
        }
        Box::pin(pooled(self.target, query, async |conn, query| {
            conn.fetch_optional(query).await
        }))
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, Error>>
    where
        'c: 'e,
    {
        match self.target {
            Target::Pool(pool) => pool.prepare_with(sql, parameters),
            Target::Conn(conn) => conn.prepare_with(sql, parameters),
        }
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, Error>>
    where
        'c: 'e,
    {
        match self.target {
            Target::Pool(pool) => pool.describe(sql),
            Target::Conn(conn) => conn.describe(sql),
        }
    }
}
