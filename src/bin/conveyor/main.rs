//! `conveyor`: inspect and steer a Conveyor queue from the shell.
//!
//! Every command takes `--database-url` (or `DATABASE_URL`) and `--json` for
//! scripts; without `--json` it prints tables for people.

mod args;
mod output;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use args::{Cli, Command, DashboardArgs, Filter, JobsCommand, QueueCommand, Targets};
use clap::Parser;
use conveyor::{Client, JobFilter, JobId, JobState, NewJob};
use serde_json::{Value, json};

/// An error for the user: printed as one line, exit code 1.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure(error.to_string())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("conveyor: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let cannot = |e: sqlx::Error| {
        Failure(format!(
            "cannot connect to the database at {}: {e}",
            redact(&cli.database_url)
        ))
    };
    // One plain connection first: its error says why (refused, bad password…).
    let options: sqlx::postgres::PgConnectOptions = cli.database_url.parse().map_err(cannot)?;
    let probe = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
        .await
        .map_err(cannot)?;
    sqlx::Connection::close(probe).await.map_err(cannot)?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(cannot)?;
    if let Command::Migrate = cli.command {
        let applied = conveyor::migrate_schema(&pool, &cli.schema).await?;
        return output::print(cli.json, &json!({ "applied": applied }), || {
            if applied.is_empty() {
                "schema up to date".to_string()
            } else {
                format!("applied migrations {applied:?}")
            }
        });
    }
    let client = Client::builder(pool).schema(&cli.schema).build()?;
    match cli.command {
        Command::Migrate => Ok(()),
        Command::Stats => {
            let stats = client.queue_stats().await?;
            output::print(cli.json, &serde_json::to_value(&stats)?, || {
                output::stats_table(&stats)
            })
        }
        Command::Jobs(JobsCommand::List(filter)) => {
            let jobs = client.list_jobs(&job_filter(&filter)?).await?;
            let values: Vec<Value> = jobs.iter().map(conveyor::Job::to_json).collect();
            output::print(cli.json, &Value::Array(values), || {
                output::jobs_table(&jobs)
            })
        }
        Command::Jobs(JobsCommand::Show { id }) => {
            let id = parse_id(&id)?;
            let job = client
                .job(id)
                .await?
                .ok_or_else(|| Failure(format!("no job with id {id}")))?;
            output::print(cli.json, &job.to_json(), || output::job_detail(&job))
        }
        Command::Retry(targets) => {
            let ids = resolve(&client, &targets, "re-queue").await?;
            let n = client.requeue(&ids).await?;
            output::print(cli.json, &json!({ "requeued": n }), || {
                format!("re-queued {n} job(s)")
            })
        }
        Command::Cancel(targets) => {
            let ids = resolve(&client, &targets, "cancel").await?;
            let mut states = serde_json::Map::new();
            for id in &ids {
                let state = client.cancel(*id).await?;
                states.insert(id.to_string(), json!(state.as_str()));
            }
            let summary = states
                .iter()
                .map(|(id, s)| format!("{id}: {}", s.as_str().unwrap_or("")))
                .collect::<Vec<_>>();
            output::print(cli.json, &json!({ "cancelled": states }), || {
                summary.join("\n")
            })
        }
        Command::Delete(targets) => {
            let ids = resolve(&client, &targets, "delete").await?;
            let n = client.delete_jobs(&ids).await?;
            output::print(cli.json, &json!({ "deleted": n }), || {
                format!("deleted {n} job(s)")
            })
        }
        Command::Queue(QueueCommand::Pause { queue }) => {
            client.pause_queue(&queue).await?;
            output::print(cli.json, &json!({ "queue": queue, "paused": true }), || {
                format!("paused {queue}")
            })
        }
        Command::Queue(QueueCommand::Resume { queue }) => {
            client.resume_queue(&queue).await?;
            output::print(
                cli.json,
                &json!({ "queue": queue, "paused": false }),
                || format!("resumed {queue}"),
            )
        }
        Command::Metrics { bind } => {
            let metrics = conveyor::Metrics::new()?;
            let listener = tokio::net::TcpListener::bind(&bind)
                .await
                .map_err(|e| Failure(format!("cannot listen on {bind}: {e}")))?;
            eprintln!(
                "serving metrics on http://{}/metrics",
                listener.local_addr()?
            );
            axum::serve(listener, metrics.router(client)).await?;
            Ok(())
        }
        Command::Dashboard(args) => dashboard(client, args).await,
        Command::Enqueue {
            name,
            args,
            queue,
            delay,
            priority,
        } => {
            let args: Value = serde_json::from_str(&args)
                .map_err(|e| Failure(format!("--args is not valid JSON: {e}")))?;
            let mut job = NewJob::new(name, args).queue(queue).priority(priority);
            if let Some(delay) = delay {
                let delay = Duration::try_from_secs_f64(delay)
                    .map_err(|_| Failure(format!("--delay {delay}: expected seconds >= 0")))?;
                job = job.delay(delay);
            }
            let handle = client.enqueue(job).await?;
            let state = handle.state().await?;
            output::print(
                cli.json,
                &json!({ "id": handle.id(), "state": state.as_str(), "duplicate": handle.is_duplicate() }),
                || format!("enqueued {} ({state})", handle.id()),
            )
        }
    }
}

async fn dashboard(client: Client, args: DashboardArgs) -> Result<(), Failure> {
    let mut config = conveyor::dashboard::DashboardConfig::new()
        .read_only(args.read_only)
        .allow_insecure(args.allow_insecure);
    if let Some(token) = args.token.filter(|t| !t.is_empty()) {
        config = config.token(token);
    }
    if let Some(credentials) = args.basic_auth {
        let (user, password) = credentials
            .split_once(':')
            .filter(|(user, _)| !user.is_empty())
            .ok_or_else(|| Failure("--basic-auth: expected USER:PASSWORD".into()))?;
        config = config.basic_auth(user, password);
    }
    // Check every address the name stands for before listening on any.
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(&args.bind)
        .await
        .map_err(|e| Failure(format!("--bind {}: {e}", args.bind)))?
        .collect();
    for addr in &addrs {
        config.check_bind(*addr)?;
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .map_err(|e| Failure(format!("cannot listen on {}: {e}", args.bind)))?;
    let addr = listener.local_addr()?;
    let mode = if args.read_only { ", read-only" } else { "" };
    let auth = if config.requires_auth() {
        ""
    } else {
        ", no authentication"
    };
    eprintln!("serving the dashboard on http://{addr}/{auth}{mode}");
    conveyor::dashboard::serve(listener, client, config).await?;
    Ok(())
}

fn redact(url: &str) -> String {
    // postgres://user:secret@host → postgres://user:***@host
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

fn parse_id(id: &str) -> Result<JobId, Failure> {
    id.parse()
        .map_err(|_| Failure(format!("`{id}` is not a job id (expected a UUID)")))
}

fn parse_time(
    flag: &str,
    value: &Option<String>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, Failure> {
    value
        .as_deref()
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| Failure(format!("--{flag} {v}: expected an RFC 3339 time: {e}")))
        })
        .transpose()
}

fn job_filter(f: &Filter) -> Result<JobFilter, Failure> {
    Ok(JobFilter {
        queue: f.queue.clone(),
        state: f
            .state
            .as_deref()
            .map(|s| s.parse::<JobState>().map_err(Failure))
            .transpose()?,
        task: f.task.clone(),
        created_after: parse_time("since", &f.since)?,
        created_before: parse_time("until", &f.until)?,
        before_id: f.before.as_deref().map(parse_id).transpose()?,
        limit: f.limit.max(1),
    })
}

/// The ids a bulk command acts on: those given, or those the filter matches
/// (after confirmation, unless `--yes`).
async fn resolve(client: &Client, targets: &Targets, verb: &str) -> Result<Vec<JobId>, Failure> {
    if !targets.ids.is_empty() {
        return targets.ids.iter().map(|id| parse_id(id)).collect();
    }
    let f = &targets.filter;
    if f.queue.is_none()
        && f.state.is_none()
        && f.task.is_none()
        && f.since.is_none()
        && f.until.is_none()
    {
        return Err(Failure(format!(
            "give job ids, or a filter (--queue, --state, --task, --since, --until) of jobs to {verb}"
        )));
    }
    let mut filter = job_filter(f)?;
    filter.limit = f.limit.max(1);
    let ids: Vec<JobId> = client
        .list_jobs(&filter)
        .await?
        .iter()
        .map(|j| j.id)
        .collect();
    if !targets.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure(format!(
                "refusing to {verb} {} job(s) matched by a filter without --yes",
                ids.len()
            )));
        }
        eprint!("{verb} {} job(s)? [y/N] ", ids.len());
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure("cancelled by user".into()));
        }
    }
    Ok(ids)
}
