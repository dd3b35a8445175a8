//! `conveyor`: inspect and steer a Conveyor queue from the shell.
//!
//! Every command takes `--database-url` (or `DATABASE_URL`) and `--json` for
//! scripts; without `--json` it prints tables for people.

mod args;
mod bulk;
mod failure;
mod output;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use args::{Cli, Command, DashboardArgs, EnqueueArgs, JobsCommand, QueueCommand};
use bulk::Action;
use clap::Parser;
use conveyor::{Client, NewJob};
use failure::{Failure, redact, sqlx_message, warn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors exit 2 here, from clap.
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

/// A pool on `--database-url`, after one plain connection whose error says
/// why (refused, no such database, bad password…) without the password.
async fn connect(url: &str) -> Result<sqlx::PgPool, Failure> {
    let cannot = |e: sqlx::Error| {
        Failure::msg(format!(
            "cannot connect to the database at {}: {}",
            redact(url),
            sqlx_message(&e)
        ))
    };
    let options: sqlx::postgres::PgConnectOptions = url.parse().map_err(cannot)?;
    let probe = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
        .await
        .map_err(cannot)?;
    sqlx::Connection::close(probe).await.map_err(cannot)?;
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(cannot)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let pool = connect(&cli.database_url).await?;
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
        Command::Stats { watch: Some(every) } => watch::stats(&client, every, cli.json).await,
        Command::Stats { watch: None } => {
            let stats = client.queue_stats().await?;
            output::print(cli.json, &serde_json::to_value(&stats)?, || {
                output::stats_table(&stats)
            })
        }
        Command::Workers => {
            let workers = client.workers().await?;
            output::print(cli.json, &serde_json::to_value(&workers)?, || {
                output::workers_table(&workers)
            })
        }
        Command::Jobs(JobsCommand::List(list)) => {
            let jobs = client
                .list_jobs(&list.filter.job_filter(list.limit))
                .await?;
            let values: Vec<Value> = jobs.iter().map(conveyor::Job::to_json).collect();
            output::print(cli.json, &Value::Array(values), || {
                output::jobs_table(&jobs)
            })
        }
        Command::Jobs(JobsCommand::Show { id }) => {
            let job = client
                .job(id)
                .await?
                .ok_or_else(|| Failure::msg(format!("no job with id {id}")))?;
            output::print(cli.json, &job.to_json(), || output::job_detail(&job))
        }
        Command::Retry(targets) => bulk::run(&client, &targets, Action::Retry, cli.json).await,
        Command::Cancel(targets) => bulk::run(&client, &targets, Action::Cancel, cli.json).await,
        Command::Delete(targets) => bulk::run(&client, &targets, Action::Delete, cli.json).await,
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
        Command::Queue(QueueCommand::Limit { queue, limit }) => {
            client.set_queue_limit(&queue, limit.0).await?;
            let value = json!({ "queue": queue, "concurrency_limit": limit.0 });
            output::print(cli.json, &value, || match limit.0 {
                Some(n) => format!("{queue}: at most {n} job(s) running at once"),
                None => format!("{queue}: no concurrency limit"),
            })
        }
        Command::Queue(QueueCommand::Rate {
            queue,
            limit,
            period,
        }) => queue_rate(&client, &queue, limit.0, period, cli.json).await,
        Command::Metrics { bind } => {
            let metrics = conveyor::Metrics::new()?;
            let listener = tokio::net::TcpListener::bind(&bind)
                .await
                .map_err(|e| Failure::msg(format!("cannot listen on {bind}: {e}")))?;
            warn(&format!(
                "serving metrics on http://{}/metrics",
                listener.local_addr()?
            ));
            axum::serve(listener, metrics.router(client)).await?;
            Ok(())
        }
        Command::Dashboard(args) => dashboard(client, args).await,
        Command::Enqueue(args) => enqueue(&client, args, cli.json).await,
    }
}

async fn enqueue(client: &Client, args: EnqueueArgs, as_json: bool) -> Result<(), Failure> {
    let mut job = NewJob::new(args.name, args.args)
        .queue(args.queue)
        .priority(args.priority);
    if let Some(delay) = args.delay {
        job = job.delay(delay);
    }
    if let Some(at) = args.run_at {
        job = job.run_at(at);
    }
    if let Some(retries) = args.max_retries {
        job = job.max_retries(retries);
    }
    if let Some(timeout) = args.timeout {
        job = job.timeout(timeout);
    }
    if let Some(id) = args.id {
        job = job.id(id);
    }
    for (key, value) in args.headers {
        job = job.header(key, Value::String(value));
    }
    let handle = client.enqueue(job).await?;
    let state = handle.state().await?;
    output::print(
        as_json,
        &json!({ "id": handle.id(), "state": state.as_str(), "duplicate": handle.is_duplicate() }),
        || {
            let duplicate = if handle.is_duplicate() {
                ", a duplicate: nothing inserted"
            } else {
                ""
            };
            format!("enqueued {} ({state}{duplicate})", handle.id())
        },
    )
}

/// `queue rate QUEUE N PERIOD` or `queue rate QUEUE none`.
async fn queue_rate(
    client: &Client,
    queue: &str,
    limit: Option<u32>,
    period: Option<Duration>,
    as_json: bool,
) -> Result<(), Failure> {
    let rate = match (limit, period) {
        (Some(n), Some(period)) => Some((n, period)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(Failure::Usage(
                "give the rate's period too: queue rate QUEUE N PERIOD (e.g. 100 1m)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Failure::Usage(
                "`none` removes the rate limit: give no period after it".into(),
            ));
        }
    };
    client.set_queue_rate_limit(queue, rate).await?;
    let value = json!({
        "queue": queue,
        "rate_limit": rate.map(|r| r.0),
        "rate_period_secs": rate.map(|r| r.1.as_secs_f64()),
    });
    output::print(as_json, &value, || match rate {
        Some((n, period)) => format!(
            "{queue}: at most {n} job(s) started per {}",
            watch::duration(period)
        ),
        None => format!("{queue}: no rate limit"),
    })
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
            .ok_or_else(|| Failure::Usage("--basic-auth: expected USER:PASSWORD".into()))?;
        config = config.basic_auth(user, password);
    }
    // Check every address the name stands for before listening on any.
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(&args.bind)
        .await
        .map_err(|e| Failure::msg(format!("--bind {}: {e}", args.bind)))?
        .collect();
    for addr in &addrs {
        config.check_bind(*addr)?;
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .map_err(|e| Failure::msg(format!("cannot listen on {}: {e}", args.bind)))?;
    let addr = listener.local_addr()?;
    let mode = if args.read_only { ", read-only" } else { "" };
    let auth = if config.requires_auth() {
        ""
    } else {
        ", no authentication"
    };
    warn(&format!(
        "serving the dashboard on http://{addr}/{auth}{mode}"
    ));
    conveyor::dashboard::serve(listener, client, config).await?;
    Ok(())
}
