//! The command line: clap's definitions of every command, option and filter.

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "conveyor",
    version,
    about = "Inspect and steer a Conveyor job queue in PostgreSQL"
)]
pub(crate) struct Cli {
    /// PostgreSQL URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        global = true
    )]
    pub(crate) database_url: String,
    /// Schema holding Conveyor's tables.
    #[arg(
        long,
        env = "CONVEYOR_SCHEMA",
        default_value = "conveyor",
        global = true
    )]
    pub(crate) schema: String,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade Conveyor's schema (idempotent).
    Migrate,
    /// Per queue: jobs by state, oldest pending age, throughput, paused.
    Stats,
    /// List or show jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Re-queue failed or cancelled jobs (attempts reset, history kept).
    Retry(Targets),
    /// Cancel jobs (queued ones at once; running ones through their worker).
    Cancel(Targets),
    /// Delete jobs (running ones are skipped: cancel them first).
    Delete(Targets),
    /// Pause or resume a queue for every worker.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Serve Prometheus metrics on http://BIND/metrics.
    Metrics {
        /// Address to listen on (loopback by default).
        #[arg(long, default_value = "127.0.0.1:9090")]
        bind: String,
    },
    /// Serve the web dashboard on http://BIND/ (queues, jobs, actions).
    Dashboard(DashboardArgs),
    /// Enqueue a job.
    Enqueue {
        /// Task name.
        name: String,
        /// Arguments, as JSON.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Queue.
        #[arg(long, default_value = conveyor::DEFAULT_QUEUE)]
        queue: String,
        /// Seconds to wait before it may run.
        #[arg(long)]
        delay: Option<f64>,
        /// Priority (higher runs first).
        #[arg(long, default_value_t = 0)]
        priority: i32,
    },
}

#[derive(Args)]
pub(crate) struct DashboardArgs {
    /// Address to listen on. A non-loopback address needs --token or
    /// --basic-auth (or --allow-insecure).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) bind: String,
    /// Require this token: `Authorization: Bearer TOKEN`, or open
    /// http://BIND/?token=TOKEN once in a browser (sets a session cookie).
    #[arg(long, env = "CONVEYOR_DASHBOARD_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Accept HTTP basic authentication as USER:PASSWORD.
    #[arg(long, env = "CONVEYOR_DASHBOARD_BASIC_AUTH", hide_env_values = true)]
    pub(crate) basic_auth: Option<String>,
    /// Show everything, change nothing: actions answer 403 and are hidden.
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Serve a non-loopback address without authentication (e.g. behind an
    /// authenticating proxy).
    #[arg(long)]
    pub(crate) allow_insecure: bool,
}

#[derive(Subcommand)]
pub(crate) enum JobsCommand {
    /// Jobs, newest first.
    List(Filter),
    /// One job: args, result, every attempt's error, timeline, workflow.
    Show {
        /// Job id.
        id: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum QueueCommand {
    /// Stop claims from the queue (running jobs finish).
    Pause { queue: String },
    /// Claim from the queue again.
    Resume { queue: String },
}

#[derive(Args, Clone, Default)]
pub(crate) struct Filter {
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this state (pending, scheduled, started, retry, success, failure, cancelled).
    #[arg(long)]
    pub(crate) state: Option<String>,
    /// Only this task.
    #[arg(long)]
    pub(crate) task: Option<String>,
    /// Only jobs enqueued at or after this time (RFC 3339).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Only jobs enqueued before this time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<String>,
    /// Only jobs older than this id (paging).
    #[arg(long)]
    pub(crate) before: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: i64,
}

#[derive(Args)]
pub(crate) struct Targets {
    /// Job ids; or none, and a filter.
    pub(crate) ids: Vec<String>,
    #[command(flatten)]
    pub(crate) filter: Filter,
    /// Do not ask for confirmation of a filter.
    #[arg(long)]
    pub(crate) yes: bool,
}
