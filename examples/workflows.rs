//! Workflows: a chain, a group and a chord, with their results, then the
//! workflow rows as SQL sees them.
//!
//! ```sh
//! cargo run --example workflows
//! ```

use std::time::Duration;

use conveyor::{Chain, Client, Group, JobFailure, Task, TaskContext, TaskError, Worker};

/// Downloads a "page": returns its length.
struct Fetch;
impl Task for Fetch {
    const NAME: &'static str = "fetch";
    type Args = String;
    type Output = usize;
    async fn run(&self, _: TaskContext, url: String) -> Result<usize, TaskError> {
        Ok(url.len() * 100)
    }
}

/// Doubles a number (receives the previous step's result).
struct Double;
impl Task for Double {
    const NAME: &'static str = "double";
    type Args = usize;
    type Output = usize;
    async fn run(&self, _: TaskContext, n: usize) -> Result<usize, TaskError> {
        Ok(n * 2)
    }
}

/// A chord callback: receives every member's result, in member order.
struct Total;
impl Task for Total {
    const NAME: &'static str = "total";
    type Args = Vec<usize>;
    type Output = usize;
    async fn run(&self, _: TaskContext, sizes: Vec<usize>) -> Result<usize, TaskError> {
        Ok(sizes.iter().sum())
    }
}

/// An error callback: gets the error message first.
struct Alert;
impl Task for Alert {
    const NAME: &'static str = "alert";
    type Args = JobFailure;
    type Output = ();
    async fn run(&self, _: TaskContext, failure: JobFailure) -> Result<(), TaskError> {
        println!("  alert: {} failed: {}", failure.task, failure.error);
        Ok(())
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
    conveyor::migrate(&pool).await?;
    let client = Client::new(pool.clone());
    let worker = Worker::builder(&client)
        .concurrency(10)
        .register(Fetch)
        .register(Double)
        .register(Total)
        .register(Alert)
        .start()?;
    let timeout = Duration::from_secs(30);
    let urls = [
        "https://a.example",
        "https://bb.example",
        "https://ccc.example",
    ];

    // Chain: fetch → double → double; each step gets the previous result.
    let chain = Chain::new(Fetch::job(urls[0].into()))
        .then::<Double>()
        .then::<Double>()
        .on_error::<Alert>();
    let chain = client.enqueue_workflow(chain).await?;
    println!(
        "chain  fetch → double → double         = {}",
        chain.wait(timeout).await?
    );

    // Group: three fetches in parallel; results in member order.
    let group = Group::new(urls.iter().map(|u| Fetch::job(u.to_string())));
    let group = client.enqueue_workflow(group).await?;
    println!(
        "group  fetch × 3                       = {:?}",
        group.wait(timeout).await?
    );

    // Chord: the same fan-out, joined by a callback that runs exactly once.
    let chord = Group::new(urls.iter().map(|u| Fetch::job(u.to_string())))
        .then::<Total>()
        .on_error::<Alert>();
    let chord = client.enqueue_workflow(chord).await?;
    println!(
        "chord  fetch × 3 → total               = {}",
        chord.wait(timeout).await?
    );

    // Fan out, join, continue: a chord as a chain step.
    let pipeline = Chain::new(Fetch::job("https://seed.example".into()))
        .then_chord(Group::new(urls.iter().map(|u| Fetch::job(u.to_string()))).then::<Total>())
        .then::<Double>();
    let pipeline = client.enqueue_workflow(pipeline).await?;
    println!(
        "chain  fetch → chord(fetch × 3 → total) → double = {}",
        pipeline.wait(timeout).await?
    );

    worker.shutdown(Duration::from_secs(5)).await?;

    let sql = "SELECT kind, state, total, succeeded, failed, parent_id IS NOT NULL AS nested
               FROM conveyor.workflows WHERE id = ANY($1) OR parent_id = ANY($1) ORDER BY created_at";
    println!("\n{sql}");
    let ids = vec![chain.id(), group.id(), chord.id(), pipeline.id()];
    let rows: Vec<(String, String, i32, i32, i32, bool)> =
        sqlx::query_as(sql).bind(&ids).fetch_all(&pool).await?;
    println!("kind   state    total succeeded failed nested");
    for (kind, state, total, succeeded, failed, nested) in rows {
        println!("{kind:<6} {state:<8} {total:>5} {succeeded:>9} {failed:>6} {nested}");
    }
    Ok(())
}
