//! Schema migrations: the `.sql` files of `migrations/`, embedded at build
//! time and applied by refinery over a sqlx connection (no second driver).

use refinery::Migration;
use refinery_core::traits::r#async::{AsyncMigrate, AsyncQuery, AsyncTransaction};
use sqlx::{PgConnection, PgPool};

use crate::db::{self, Queries};
use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// Applies Conveyor's migrations to the default schema (`conveyor`).
///
/// Idempotent, and safe to call from many processes at once: the whole call
/// is one transaction that first takes a transaction-scoped advisory lock,
/// so callers are serialised, and either every pending migration is applied
/// or none is (each in a savepoint of its own). Being one transaction, it is
/// also safe through PgBouncer in transaction mode. Returns the versions
/// applied by this call.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> conveyor::Result<()> {
/// conveyor::migrate(&pool).await?;
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> Result<Vec<i32>> {
    migrate_schema(pool, db::DEFAULT_SCHEMA).await
}

/// Like [`migrate`], into another schema (see [`crate::ClientBuilder::schema`]).
pub async fn migrate_schema(pool: &PgPool, schema: &str) -> Result<Vec<i32>> {
    db::validate_schema(schema)?;
    let queries = Queries::for_schema(schema);
    let mut tx = pool.begin().await?;
    db::lock_migrations(&mut tx, queries).await?;
    let applied = apply(&mut tx, queries).await?;
    tx.commit().await?;
    Ok(applied)
}

async fn apply(conn: &mut PgConnection, queries: &'static Queries) -> Result<Vec<i32>> {
    db::create_schema(conn, queries).await?;
    db::apply_functions(conn, queries).await?;
    let mut migrations = Vec::new();
    for m in embedded::migrations::runner().get_migrations() {
        let sql = m.sql().unwrap_or_default();
        let name = format!("V{}__{}", m.version(), m.name());
        let migration = Migration::unapplied(&name, &db::in_schema(sql, queries.schema))
            .map_err(|e| Error::Migrate(e.to_string()))?;
        migrations.push(migration);
    }
    // refinery's defaults: a history naming a migration that is not among
    // these files, or one whose text differs, aborts the run (nothing is
    // applied) instead of applying what is missing around it.
    let mut runner = refinery::Runner::new(&migrations);
    runner.set_migration_table_name(queries.migrations_table());
    let report = runner
        .run_async(&mut RefineryConnection(conn))
        .await
        .map_err(|e| history_error(&e, queries))?;
    Ok(report
        .applied_migrations()
        .iter()
        .map(|m| m.version())
        .collect())
}

/// refinery's error, with what to do about it when the schema's history is
/// not this build's: it names a migration this build does not have, or one
/// whose text differs from this build's file of that number.
///
/// Before the first release the migrations were squashed into one baseline
/// (docs/decisions/2026-11-29-one-baseline.md): a schema migrated by a
/// pre-release build has another `V1__baseline` and `V2__workers` …
/// `V20__rescue_floor` in its history, and no migration leads from there to
/// this schema. After the first release a released migration never changes,
/// so a history naming an unknown one was written by a newer build.
fn history_error(e: &refinery::Error, queries: &Queries) -> Error {
    use refinery::error::Kind;
    let (schema, history) = (queries.schema, queries.migrations_table());
    let found = match e.kind() {
        Kind::DivergentVersion(applied, file) => {
            format!("has migration {applied} with another text than this build's {file}")
        }
        // (refinery also reports a file missing from the history below its
        // newest entry, as an unapplied migration: its own message says so.)
        Kind::MissingVersion(applied) if applied.applied_on().is_some() => {
            format!("has migration {applied}, which this build does not have")
        }
        _ => return Error::Migrate(e.to_string()),
    };
    Error::Migrate(format!(
        "schema `{schema}` was migrated by another build of Conveyor: its history ({history}) \
         {found}. A schema migrated by a build from before the first release cannot be \
         upgraded (those migrations were squashed into one baseline): recreate it with \
         `DROP SCHEMA {schema}, {schema}_internal CASCADE` (which deletes its jobs) and migrate \
         again. A schema migrated by a newer release needs that release or a newer one."
    ))
}

/// A sqlx connection seen through refinery's async driver traits.
struct RefineryConnection<'c>(&'c mut PgConnection);

impl AsyncTransaction for RefineryConnection<'_> {
    type Error = sqlx::Error;

    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> std::result::Result<usize, Self::Error> {
        db::execute_in_transaction(self.0, queries).await
    }
}

impl AsyncQuery<Vec<Migration>> for RefineryConnection<'_> {
    async fn query<'a>(
        &'a mut self,
        query: &'a str,
    ) -> std::result::Result<Vec<Migration>, Self::Error> {
        let rows = db::applied_migrations(self.0, query).await?;
        rows.into_iter()
            .map(|(version, name, applied_on, checksum)| {
                let bad = |what: &str| {
                    sqlx::Error::Protocol(format!("bad {what} in migration history: {name}"))
                };
                let applied_on = time::OffsetDateTime::parse(
                    &applied_on,
                    &time::format_description::well_known::Rfc3339,
                )
                .map_err(|_| bad("applied_on"))?;
                let checksum = checksum.parse::<u64>().map_err(|_| bad("checksum"))?;
                Ok(Migration::applied(version, name, applied_on, checksum))
            })
            .collect()
    }
}

impl AsyncMigrate for RefineryConnection<'_> {}
