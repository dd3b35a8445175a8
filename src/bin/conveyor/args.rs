//! The command line: clap's definitions of every command, option and filter,
//! and the parsers of their values (a value that does not parse is a usage
//! error: exit code 2).

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use conveyor::{JobId, JobState};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "conveyor",
    version,
    about = "Inspect and steer a Conveyor job queue in PostgreSQL",
    after_help = "Exit codes: 0 success; 1 error (including a job id that does not exist \
                  or a job the action cannot apply to); 2 usage error; 141 stdout closed early (| head)."
)]
pub(crate) struct Cli {
    /// PostgreSQL URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
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
    Stats {
        /// Refresh every SECS seconds (default 2) until interrupted (Ctrl-C);
        /// with --json, one JSON line per refresh.
        #[arg(
            long,
            value_name = "SECS",
            num_args = 0..=1,
            default_missing_value = "2",
            value_parser = interval,
            allow_negative_numbers = true
        )]
        watch: Option<Duration>,
    },
    /// Worker processes: host, pid, queues, busy slots, last beat, live or dead.
    Workers,
    /// List or show jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Re-queue failed or cancelled jobs (attempts reset, history kept).
    Retry(Targets),
    /// Cancel jobs (queued ones at once; running ones through their worker).
    Cancel(Targets),
    /// Delete jobs (running ones are skipped: cancel them first).
    Delete(Targets),
    /// Pause, resume or limit a queue for every worker.
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
    Enqueue(EnqueueArgs),
}

#[derive(Args)]
pub(crate) struct EnqueueArgs {
    /// Task name.
    pub(crate) name: String,
    /// Arguments, as JSON.
    #[arg(long, default_value = "{}", value_parser = json_value)]
    pub(crate) args: Value,
    /// Queue.
    #[arg(long, default_value = "default")]
    pub(crate) queue: String,
    /// Seconds to wait before it may run.
    #[arg(long, value_name = "SECONDS", value_parser = seconds, allow_negative_numbers = true)]
    pub(crate) delay: Option<Duration>,
    /// Earliest start, an RFC 3339 time (e.g. 2030-01-02T03:04:05Z).
    #[arg(long, value_name = "TIME", value_parser = time, conflicts_with = "delay")]
    pub(crate) run_at: Option<DateTime<Utc>>,
    /// Priority (higher runs first; may be negative).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i32,
    /// Retries after the first attempt (default 25).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub(crate) max_retries: Option<u32>,
    /// Time limit of one attempt, in seconds (default: the worker's).
    #[arg(long, value_name = "SECONDS", value_parser = seconds, allow_negative_numbers = true)]
    pub(crate) timeout: Option<Duration>,
    /// The job's id, a UUID (default: a new UUIDv7). If a job has it
    /// already, nothing is inserted and that job is shown, as a duplicate.
    #[arg(long, value_parser = job_id)]
    pub(crate) id: Option<JobId>,
    /// A header, KEY=VALUE (the value is stored as a JSON string); repeat
    /// for more.
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = header)]
    pub(crate) headers: Vec<(String, String)>,
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
    List(ListArgs),
    /// One job: args, result, every attempt's error, timeline, workflow.
    Show {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
}

#[derive(Subcommand)]
pub(crate) enum QueueCommand {
    /// Stop claims from the queue (running jobs finish).
    Pause { queue: String },
    /// Claim from the queue again.
    Resume { queue: String },
    /// At most N of the queue's jobs running at once, across all workers
    /// (`none` removes the limit).
    Limit {
        queue: String,
        #[arg(value_name = "N|none", value_parser = limit)]
        limit: Limit,
    },
    /// At most N of the queue's jobs started per PERIOD, across all workers
    /// (`100 1m`; PERIOD in seconds or with a unit: ms, s, m, h, d); `none`
    /// removes the rate limit.
    Rate {
        queue: String,
        #[arg(value_name = "N|none", value_parser = limit)]
        limit: Limit,
        #[arg(value_name = "PERIOD", value_parser = period)]
        period: Option<Duration>,
    },
}

/// A limit given on the command line: a number from 1, or `none`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit(pub(crate) Option<u32>);

/// Which jobs: the options shared by `jobs list` and the bulk commands.
#[derive(Args, Clone, Default)]
pub(crate) struct Filter {
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this state (scheduled, pending, started, retry, success, failure, cancelled).
    #[arg(long, value_parser = job_state)]
    pub(crate) state: Option<JobState>,
    /// Only this task.
    #[arg(long)]
    pub(crate) task: Option<String>,
    /// Only jobs enqueued at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub(crate) since: Option<DateTime<Utc>>,
    /// Only jobs enqueued before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub(crate) until: Option<DateTime<Utc>>,
    /// Only jobs older than this id (paging).
    #[arg(long, value_name = "ID", value_parser = job_id)]
    pub(crate) before: Option<JobId>,
}

impl Filter {
    /// Whether any option narrows the jobs (`--before` alone does not).
    pub(crate) fn narrows(&self) -> bool {
        self.queue.is_some()
            || self.state.is_some()
            || self.task.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    pub(crate) fn job_filter(&self, limit: i64) -> conveyor::JobFilter {
        conveyor::JobFilter {
            queue: self.queue.clone(),
            state: self.state,
            task: self.task.clone(),
            created_after: self.since,
            created_before: self.until,
            before_id: self.before,
            limit,
        }
    }
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) filter: Filter,
    /// At most this many.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..))]
    pub(crate) limit: i64,
}

#[derive(Args)]
pub(crate) struct Targets {
    /// Job ids; or none, and a filter (every matching job is acted on).
    #[arg(value_name = "ID", value_parser = job_id)]
    pub(crate) ids: Vec<JobId>,
    #[command(flatten)]
    pub(crate) filter: Filter,
    /// A cap: act on at most this many of the jobs a filter matches
    /// (default: no cap, every one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) limit: Option<u64>,
    /// Do not ask for confirmation of a filter.
    #[arg(long)]
    pub(crate) yes: bool,
}

fn job_id(value: &str) -> Result<JobId, String> {
    value
        .parse()
        .map_err(|_| format!("`{value}` is not a job id (expected a UUID)"))
}

fn job_state(value: &str) -> Result<JobState, String> {
    value.parse()
}

fn time(value: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("expected an RFC 3339 time such as 2030-01-02T03:04:05Z: {e}"))
}

fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| "expected a number of seconds >= 0".to_string())
}

fn json_value(value: &str) -> Result<Value, String> {
    serde_json::from_str(value).map_err(|e| format!("--args is not valid JSON: {e}"))
}

fn header(value: &str) -> Result<(String, String), String> {
    value
        .split_once('=')
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("`{value}`: expected KEY=VALUE"))
}

fn limit(value: &str) -> Result<Limit, String> {
    if value.eq_ignore_ascii_case("none") {
        return Ok(Limit(None));
    }
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=i32::MAX as u32).contains(n))
        .map(|n| Limit(Some(n)))
        .ok_or_else(|| "expected a whole number from 1 to 2147483647, or none".to_string())
}

/// A duration: seconds (`90`, `0.5`), or a number with a unit (`500ms`,
/// `30s`, `5m`, `1h`, `1d`); from 1 ms to 100 years.
fn period(value: &str) -> Result<Duration, String> {
    let units = [
        ("ms", 0.001),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3_600.0),
        ("d", 86_400.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| value.strip_suffix(unit).map(|n| (n, *scale)))
        .unwrap_or((value, 1.0));
    number
        .trim()
        .parse::<f64>()
        .ok()
        .map(|n| n * scale)
        .filter(|s| (0.001..=3_155_760_000.0).contains(s))
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            "expected a period from 1 ms to 100 years: seconds, or with a unit (500ms, 30s, 5m, 1h, 1d)"
                .to_string()
        })
}

/// `--watch`'s refresh interval: at least 0.1 s.
fn interval(value: &str) -> Result<Duration, String> {
    seconds(value)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100))
        .ok_or_else(|| "expected a number of seconds, at least 0.1".to_string())
}
