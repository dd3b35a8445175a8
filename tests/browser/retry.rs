//! The first scenario: a job fails while its handler is "broken"; in the
//! browser we sign in with the token, see on the overview which queue no
//! live worker serves, open the workers page, find the failure, open the
//! failed jobs list and the job, read its error, repair the handler, press
//! Retry and wait for the page to show the job succeeded; then the worker
//! stops and the overview says no live worker is left.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use conveyor::dashboard::{self, DashboardConfig};
use conveyor::{NewJob, TaskError, Worker, WorkerHandle};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use super::common::{TestDb, WAIT, count_jobs, eventually};
use super::{
    ONE_BROWSER, Outcome, TOKEN, UI_WAIT, browser, click, err, finish, screenshot, serve, text_of,
};

/// What the browser does; an `Err` says which step did not happen.
async fn scenario(
    browser: &Client,
    db: &TestDb,
    base: &str,
    broken: &AtomicBool,
    job: uuid::Uuid,
    worker: WorkerHandle,
) -> Outcome {
    // Signed out: the login form. Sign in with the token.
    browser
        .goto(base)
        .await
        .map_err(err("open the dashboard"))?;
    let field = browser
        .wait()
        .at_most(UI_WAIT)
        .for_element(Locator::Css("input#token"))
        .await
        .map_err(err("the login form"))?;
    field
        .send_keys(TOKEN)
        .await
        .map_err(err("type the token"))?;
    click(browser, "main.login button[type=submit]").await?;

    // The overview: the media queue's row counts one failure.
    let failures = r#"tr[data-queue="media"] td[data-col="failed_24h"]"#;
    text_of(browser, failures, |t| t.trim() == "1").await?;
    text_of(browser, r#"tr[data-queue="reports"]"#, |t| {
        t.contains("paused")
    })
    .await?;
    text_of(
        browser,
        r#"tr[data-queue="media"] td[data-col="succeeded_1m"]"#,
        |t| t.trim() == "4",
    )
    .await?;
    // Nobody serves "reports": the overview says so; "media" is served.
    text_of(browser, "#no-worker", |t| {
        t.contains("No live worker serves")
    })
    .await?;
    text_of(browser, r#"[data-orphan="reports"]"#, |t| {
        t.contains("3 pending")
    })
    .await?;
    if browser
        .find(Locator::Css(r#"[data-orphan="media"]"#))
        .await
        .is_ok()
    {
        return Err("media is served, yet the overview says nobody serves it".into());
    }
    text_of(browser, "#live-workers", |t| t.trim() == "1").await?;
    screenshot(browser, "dashboard-overview.png").await?;

    // The workers page: this worker, live, running the transcode job.
    click(browser, r#"a[data-nav="workers"]"#).await?;
    let row = format!(r#"tr[data-worker="{}"]"#, worker.id());
    text_of(browser, &format!("{row} td[data-col=\"busy\"]"), |t| {
        t.trim() == "1 / 10"
    })
    .await?;
    text_of(browser, &row, |t| {
        t.contains("live") && t.contains("media, mail")
    })
    .await?;
    screenshot(browser, "dashboard-workers.png").await?;
    browser.back().await.map_err(err("back to the overview"))?;

    // The failed jobs of the queue, then the job.
    click(browser, &format!("{failures} a")).await?;
    click(browser, &format!(r#"tr[data-job="{job}"] a.job-link"#)).await?;
    text_of(browser, "#job-state", |t| t == "failure").await?;
    let errors = text_of(browser, "#job-errors", |t| !t.is_empty()).await?;
    if !errors.contains("renderer is broken") {
        return Err(format!(
            "the error history does not show the error: {errors}"
        ));
    }

    // Repair the handler and retry: the page follows the job to success.
    broken.store(false, Ordering::SeqCst);
    click(browser, r#"button[data-action="retry"]"#).await?;
    text_of(browser, "#job-state", |t| t == "success").await?;
    let result = text_of(browser, "pre.json", |t| !t.is_empty()).await;
    if count_jobs(&db.pool, &format!("id = '{job}' AND state = 'success'")).await != 1 {
        return Err(format!(
            "the page says success but the row does not ({result:?})"
        ));
    }

    // The only worker stops (its transcode job is given back, pending): the
    // overview says no live worker is left, within one refresh.
    worker
        .shutdown(Duration::from_millis(200))
        .await
        .map_err(err("stop the worker"))?;
    browser.goto(base).await.map_err(err("open the overview"))?;
    text_of(browser, "#no-worker", |t| t.contains("No live worker.")).await?;
    text_of(browser, r#"[data-orphan="media"]"#, |t| {
        t.contains("1 pending")
    })
    .await?;
    screenshot(browser, "dashboard-no-worker.png").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_a_failed_job_from_the_browser() {
    let _one = ONE_BROWSER.lock().await;
    let Some((driver, browser)) = browser().await else {
        return;
    };
    let db = TestDb::new().await;
    let client = db.client.clone();
    let broken = Arc::new(AtomicBool::new(true));
    let flag = broken.clone();
    let worker = Worker::builder(&client)
        .queues(["media", "mail"])
        .register_fn("render", move |_ctx, args: Value| {
            let broken = flag.load(Ordering::SeqCst);
            async move {
                if broken {
                    Err(TaskError::retry("renderer is broken: font cache missing"))
                } else {
                    Ok(json!({ "rendered": args["page"] }))
                }
            }
        })
        .register_fn("thumbnail", |_ctx, args| async move { Ok(args) })
        .register_fn("sync", |_ctx, _args| async move {
            Err::<Value, _>(TaskError::retry_after(
                Duration::from_secs(3600),
                "upstream answered 503",
            ))
        })
        .register_fn("transcode", |ctx, args| async move {
            // Runs until the worker stops: a "started" row for the overview.
            tokio::select! {
                _ = ctx.cancelled() => Err(TaskError::fail("cancelled")),
                _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(args),
            }
        })
        .start()
        .expect("start the worker");

    // Something in every corner of the overview, and the job that will fail.
    for i in 0..4 {
        client
            .enqueue(NewJob::new("thumbnail", json!({ "image": i })).queue("media"))
            .await
            .unwrap();
    }
    let handle = client
        .enqueue(
            NewJob::new("render", json!({ "page": 7 }))
                .queue("media")
                .max_retries(0),
        )
        .await
        .unwrap();
    for i in 0..2 {
        let later = NewJob::new("digest", json!({ "user": i }))
            .queue("mail")
            .delay(Duration::from_secs(3600));
        client.enqueue(later).await.unwrap();
    }
    client
        .enqueue(NewJob::new("sync", json!({ "account": 42 })).queue("mail"))
        .await
        .unwrap();
    client
        .enqueue(NewJob::new("transcode", json!({ "video": 3 })).queue("media"))
        .await
        .unwrap();
    client.pause_queue("reports").await.unwrap();
    for i in 0..3 {
        client
            .enqueue(NewJob::new("monthly", json!({ "month": i })).queue("reports"))
            .await
            .unwrap();
    }
    let job = handle.id();
    eventually(WAIT, "the render job to fail", || async {
        let failed =
            count_jobs(&db.pool, &format!("id = '{job}' AND state = 'failure'")).await == 1;
        let done = count_jobs(&db.pool, "task = 'thumbnail' AND state = 'success'").await == 4;
        let retrying = count_jobs(&db.pool, "task = 'sync' AND state = 'retry'").await == 1;
        let running = count_jobs(&db.pool, "task = 'transcode' AND state = 'started'").await == 1;
        (failed && done && retrying && running).then_some(())
    })
    .await;

    // The dashboard, in-process on a free loopback port, behind a token.
    let router = dashboard::router(client.clone(), DashboardConfig::new().token(TOKEN));
    let (base, server) = serve(router).await;
    let outcome = scenario(&browser, &db, &base, &broken, job, worker).await;
    server.abort();
    finish(browser, driver, outcome).await;
}
