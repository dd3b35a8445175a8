//! Quickstart: migrate, enqueue typed and JSON jobs, run a worker, await the
//! results, then show the job history with plain SQL.
//!
//! ```sh
//! cargo run --example quickstart            # uses postgres://postgres@127.0.0.1:5432/postgres
//! DATABASE_URL=postgres://... cargo run --example quickstart
//! ```

use std::time::Duration;

use conveyor::{Client, NewJob, Task, TaskContext, TaskError, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Serialize, Deserialize)]
struct ResizeArgs {
    image: String,
    width: u32,
}

#[derive(Serialize, Deserialize, Debug)]
struct Resized {
    path: String,
    bytes: u64,
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    task: String,
    state: String,
    attempt: i32,
    result: Option<String>,
    last_error: Option<String>,
}

/// A typed task: arguments and result are Rust types, stored as JSON.
struct Resize;

impl Task for Resize {
    const NAME: &'static str = "resize_image";
    type Args = ResizeArgs;
    type Output = Resized;

    async fn run(&self, ctx: TaskContext, args: ResizeArgs) -> Result<Resized, TaskError> {
        // The first attempt of a flaky job fails: the job is retried after a
        // (Fibonacci) backoff and succeeds on attempt 2.
        if args.image == "flaky.png" && ctx.attempt() == 1 {
            return Err(TaskError::retry("storage timed out"));
        }
        Ok(Resized {
            path: format!("/thumbs/{}x{}", args.width, args.image),
            bytes: u64::from(args.width) * 100,
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await?;
    let applied = conveyor::migrate(&pool).await?;
    println!("migrated (applied now: {applied:?})");

    let client = Client::new(pool.clone());
    let worker = Worker::builder(&client)
        .concurrency(4)
        .register(Resize)
        .register_fn("greet", |_ctx, args| async move {
            let name = args["name"].as_str().unwrap_or("stranger").to_string();
            Ok(json!({ "greeting": format!("hello, {name}") }))
        })
        .start()?;

    // Typed enqueue.
    let photo = client
        .enqueue(Resize::job(ResizeArgs {
            image: "cat.png".into(),
            width: 128,
        }))
        .await?;
    let flaky = client
        .enqueue(
            Resize::job(ResizeArgs {
                image: "flaky.png".into(),
                width: 64,
            })
            .retry_backoff_base(Duration::from_millis(200)),
        )
        .await?;
    // JSON enqueue, with an ETA half a second from now.
    let greet = client
        .enqueue(NewJob::new("greet", json!({"name": "Ada"})).delay(Duration::from_millis(500)))
        .await?;
    // Enqueue from SQL, as psql or a trigger would.
    let from_sql: uuid::Uuid =
        sqlx::query_scalar("SELECT conveyor.enqueue('greet', '{\"name\": \"SQL\"}'::jsonb)")
            .fetch_one(&pool)
            .await?;

    let timeout = Duration::from_secs(30);
    println!("resize cat.png   -> {:?}", photo.wait(timeout).await?);
    println!("resize flaky.png -> {:?}", flaky.wait(timeout).await?);
    println!("greet (ETA)      -> {}", greet.wait(timeout).await?);
    let sql_job = client.handle::<serde_json::Value>(from_sql);
    println!("greet (from SQL) -> {}", sql_job.wait(timeout).await?);

    worker.shutdown(Duration::from_secs(5)).await?;

    // The whole history is plain SQL.
    let sql = "SELECT task, state, attempt, result::text AS result, last_error
               FROM conveyor.jobs WHERE id = ANY($1) ORDER BY created_at, id";
    println!("\n{sql}");
    let ids = vec![photo.id(), flaky.id(), greet.id(), from_sql];
    let rows: Vec<HistoryRow> = sqlx::query_as(sql).bind(&ids).fetch_all(&pool).await?;
    println!(
        "{:<13} {:<8} {:>7}  {:<44} last_error",
        "task", "state", "attempt", "result"
    );
    for row in rows {
        println!(
            "{:<13} {:<8} {:>7}  {:<44} {}",
            row.task,
            row.state,
            row.attempt,
            row.result.unwrap_or_default(),
            row.last_error.unwrap_or_default()
        );
    }
    Ok(())
}
