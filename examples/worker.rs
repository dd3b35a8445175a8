//! A long-running worker process: serves the quickstart's tasks until SIGINT
//! (Ctrl-C) or SIGTERM, then shuts down gracefully (running jobs get 30 s to
//! finish; the rest go back to pending without spending an attempt).
//!
//! ```sh
//! cargo run --example worker
//! psql -h 127.0.0.1 -U postgres -c "SELECT conveyor.enqueue('greet', '{\"name\": \"psql\"}')"
//! ```

use std::time::Duration;

use conveyor::{Client, Worker};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await?;
    conveyor::migrate(&pool).await?;
    let client = Client::new(pool);
    let worker = Worker::builder(&client)
        .concurrency(20)
        .register_fn("greet", |ctx, args| async move {
            let name = args["name"].as_str().unwrap_or("stranger").to_string();
            tracing::info!(job = %ctx.job_id(), "greeting {name}");
            Ok(json!({ "greeting": format!("hello, {name}") }))
        })
        .start()?;
    println!("worker {} running; Ctrl-C to stop", worker.id());
    let report = worker.run_until_signal(Duration::from_secs(30)).await?;
    println!("stopped; jobs given back: {}", report.released);
    Ok(())
}
