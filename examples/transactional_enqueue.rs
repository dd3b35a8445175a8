//! Transactional enqueue: a job commits together with the business write that
//! caused it, or not at all.
//!
//! (a) One transaction inserts an order and enqueues `ship_order`; after the
//!     commit a worker runs the job (and can read the order it was given).
//! (b) Another transaction inserts an order and enqueues a job, then rolls
//!     back: plain SQL shows that neither the order nor the job exists.
//!
//! ```sh
//! cargo run --example transactional_enqueue   # uses postgres://postgres@127.0.0.1:5432/postgres
//! DATABASE_URL=postgres://... cargo run --example transactional_enqueue
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conveyor::{Client, Task, TaskContext, TaskError, Worker};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

#[derive(Serialize, Deserialize)]
struct ShipOrderArgs {
    order_id: i64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Shipment {
    order_id: i64,
    item: String,
    tracking: String,
}

/// Ships an order. It reads the order row, which it can only see because the
/// job was committed in the same transaction as the order.
struct ShipOrder {
    pool: PgPool,
}

impl Task for ShipOrder {
    const NAME: &'static str = "ship_order";
    type Args = ShipOrderArgs;
    type Output = Shipment;

    async fn run(&self, ctx: TaskContext, args: ShipOrderArgs) -> Result<Shipment, TaskError> {
        let item: Option<String> =
            sqlx::query_scalar("SELECT item FROM public.conveyor_example_orders WHERE id = $1")
                .bind(args.order_id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(item) = item else {
            // No retry can make a missing order appear.
            return Err(TaskError::fail(format!(
                "order {} does not exist",
                args.order_id
            )));
        };
        Ok(Shipment {
            order_id: args.order_id,
            item,
            tracking: format!("TRK-{}-{}", args.order_id, ctx.attempt()),
        })
    }
}

async fn order_exists(pool: &PgPool, order_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM public.conveyor_example_orders WHERE id = $1)")
        .bind(order_id)
        .fetch_one(pool)
        .await
}

async fn job_exists(pool: &PgPool, job_id: uuid::Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM conveyor.jobs WHERE id = $1)")
        .bind(job_id)
        .fetch_one(pool)
        .await
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

    sqlx::query(
        "CREATE TABLE IF NOT EXISTS public.conveyor_example_orders (id bigint PRIMARY KEY, item text)",
    )
    .execute(&pool)
    .await?;
    println!("business table public.conveyor_example_orders is ready");

    // Distinct order ids per run (microseconds since the epoch), so the
    // example can be run again and again.
    let base = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros())?;
    let (committed_order, rolled_back_order) = (base, base + 1);

    let client = Client::new(pool.clone());
    let worker = Worker::builder(&client)
        .concurrency(2)
        .register(ShipOrder { pool: pool.clone() })
        .start()?;
    println!("worker {} started", worker.id());

    // (a) Order and job commit together.
    println!(
        "\n(a) insert order {committed_order} + enqueue ship_order in one transaction, then COMMIT"
    );
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO public.conveyor_example_orders (id, item) VALUES ($1, $2)")
        .bind(committed_order)
        .bind("blue teapot")
        .execute(&mut *tx)
        .await?;
    println!("    inserted order {committed_order} (uncommitted)");
    let shipped = client
        .enqueue_tx(
            &mut tx,
            ShipOrder::job(ShipOrderArgs {
                order_id: committed_order,
            }),
        )
        .await?;
    println!("    enqueued job {} (uncommitted)", shipped.id());
    tx.commit().await?;
    println!("    committed: the worker is woken by NOTIFY at commit");
    let shipment = shipped.wait(Duration::from_secs(30)).await?;
    println!("    job result: {shipment:?}");
    let job = shipped.job().await?;
    println!(
        "    job row: state={} attempt={} started_at={:?} finished_at={:?}",
        job.state,
        job.attempt,
        job.started_at.map(|t| t.to_rfc3339()),
        job.finished_at.map(|t| t.to_rfc3339()),
    );

    // (b) Order and job roll back together.
    println!(
        "\n(b) insert order {rolled_back_order} + enqueue ship_order in one transaction, then ROLLBACK"
    );
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO public.conveyor_example_orders (id, item) VALUES ($1, $2)")
        .bind(rolled_back_order)
        .bind("red kettle")
        .execute(&mut *tx)
        .await?;
    println!("    inserted order {rolled_back_order} (uncommitted)");
    let discarded = client
        .enqueue_tx(
            &mut tx,
            ShipOrder::job(ShipOrderArgs {
                order_id: rolled_back_order,
            }),
        )
        .await?;
    let discarded_id = discarded.id();
    let state_inside: String = sqlx::query_scalar("SELECT state FROM conveyor.jobs WHERE id = $1")
        .bind(discarded_id)
        .fetch_one(&mut *tx)
        .await?;
    println!("    enqueued job {discarded_id}: inside the transaction its state is {state_inside}");
    tx.rollback().await?;
    println!("    rolled back");

    let order_left = order_exists(&pool, rolled_back_order).await?;
    let job_left = job_exists(&pool, discarded_id).await?;
    println!(
        "    SELECT EXISTS (... conveyor_example_orders WHERE id = {rolled_back_order}) -> {order_left}"
    );
    println!("    SELECT EXISTS (... conveyor.jobs WHERE id = '{discarded_id}') -> {job_left}");
    match discarded.state().await {
        Err(conveyor::Error::NotFound(id)) => println!("    handle.state() -> NotFound({id})"),
        other => println!("    handle.state() -> {other:?} (unexpected)"),
    }
    if order_left || job_left {
        return Err("rollback left an order or a job behind".into());
    }
    println!("    neither the order nor the job exists: they rolled back together");

    let report = worker.shutdown(Duration::from_secs(5)).await?;
    println!(
        "\nworker shut down gracefully (jobs released: {}, unreleased: {})",
        report.released,
        report.unreleased.len()
    );
    Ok(())
}
