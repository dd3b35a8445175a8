//! The crate's error type.

use std::time::Duration;

use crate::job::JobId;

/// Everything that can go wrong when talking to Conveyor.
///
/// Errors from PostgreSQL keep their [`sqlx::Error`] so callers can inspect
/// them (for example `is_unique_violation()` on a database error).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A query failed, or the connection to PostgreSQL did.
    Database(sqlx::Error),
    /// Applying the schema migrations failed.
    Migrate(String),
    /// The database has no Conveyor schema yet: run [`crate::migrate`] first.
    NotMigrated(
        /// PostgreSQL's message (e.g. `relation "conveyor.jobs" does not exist`).
        String,
    ),
    /// Task arguments or a result could not be turned into or out of JSON.
    Json {
        /// The task involved.
        task: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// A job or workflow cannot be enqueued as built (e.g. arguments that do
    /// not serialise, an empty group).
    InvalidJob(String),
    /// A configuration value is not acceptable.
    Config(String),
    /// No job has this id.
    NotFound(JobId),
    /// A handle's `wait` gave up before the job or workflow finished.
    WaitTimeout {
        /// The job or workflow waited on.
        id: JobId,
        /// Its state when the wait ended (`pending`, `running`…).
        state: String,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// The job ended in the `failure` state.
    JobFailed {
        /// The job.
        id: JobId,
        /// The error of its last attempt.
        error: String,
    },
    /// The job ended in the `cancelled` state.
    JobCancelled(JobId),
    /// An enqueue's statements went out but its commit could not be
    /// confirmed: the connection failed and the database stayed out of reach
    /// while the call kept trying (see [`crate::ClientBuilder::confirm_for`]). Its jobs may
    /// or may not exist; look them up by id, or enqueue them again with the
    /// same ids ([`crate::NewJob::id`]), which cannot double them.
    Unconfirmed {
        /// The jobs of the call, every one fixed before the first try.
        ids: Vec<JobId>,
        /// The last failure.
        source: Box<Error>,
    },
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Database(e) => write!(f, "database error: {e}"),
            Error::Migrate(e) => write!(f, "migration failed: {e}"),
            Error::NotMigrated(message) => write!(
                f,
                "the Conveyor schema is missing or out of date ({message}): run conveyor::migrate (or `conveyor migrate`) first"
            ),
            Error::Json { task, source } => write!(f, "task `{task}`: JSON error: {source}"),
            Error::InvalidJob(e) => write!(f, "invalid job: {e}"),
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
            Error::NotFound(id) => write!(f, "no job with id {id}"),
            Error::WaitTimeout { id, state, waited } => write!(
                f,
                "job {id} still {state} after waiting {:.3}s",
                waited.as_secs_f64()
            ),
            Error::JobFailed { id, error } => write!(f, "job {id} failed: {error}"),
            Error::JobCancelled(id) => write!(f, "job {id} was cancelled"),
            Error::Unconfirmed { ids, source } => write!(
                f,
                "enqueue of {} job(s) unconfirmed: the database could not be reached to tell whether it committed ({source}); enqueueing again with the same ids is safe",
                ids.len()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Database(e) => Some(e),
            Error::Json { source, .. } => Some(source),
            Error::Unconfirmed { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl Error {
    /// Whether trying the same again may succeed: the connection or the
    /// pool failed (the statement may or may not have run), or PostgreSQL
    /// gave up for a passing reason (shutting down, a serialization failure
    /// or deadlock, resources exhausted). False for a refusal, such as a
    /// constraint violation, that a retry would meet again.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Database(db)) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or("");
                // 08: connection exception; 57P: operator intervention;
                // 40001 / 40P01: serialization failure, deadlock; 53:
                // insufficient resources; 58: system error; XX: internal;
                // 25006: read-only transaction (a demoted primary, or a
                // standby before promotion: the next connection goes to the
                // new primary, see `crate::Primary`).
                ["08", "57P", "40001", "40P01", "53", "58", "XX", "25006"]
                    .iter()
                    .any(|class| code.starts_with(class))
            }
            Error::Database(
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed,
            ) => true,
            _ => false,
        }
    }

    /// Whether PostgreSQL refused to write because the server is read-only
    /// (a standby, or a demoted primary): nothing of that try was written.
    pub(crate) fn is_read_only(&self) -> bool {
        matches!(self, Error::Database(sqlx::Error::Database(db)) if db.code().as_deref() == Some("25006"))
    }

    /// Whether PostgreSQL refused the statement for a reason a retry would
    /// meet again (the transaction was rolled back; the connection is fine).
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self, Error::Database(sqlx::Error::Database(_))) && !self.is_transient()
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        // 42P01: undefined_table, 3F000: invalid_schema_name.
        if let sqlx::Error::Database(db) = &e
            && matches!(db.code().as_deref(), Some("42P01" | "3F000"))
        {
            return Error::NotMigrated(db.message().to_string());
        }
        Error::Database(e)
    }
}
