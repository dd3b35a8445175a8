//! The second scenario, operating a fleet: a running chain with a chord
//! step drawn as a graph; the periodic schedules and the process leading
//! them; a queue's limits set and the queue paused from the settings page;
//! failed jobs searched by args and error text, and a job found by the
//! start of its id; the 300 matching failures retried at once after a
//! confirmation that counts them; and a read-only dashboard that shows none
//! of those actions.

use std::sync::Arc;
use std::time::Duration;

use conveyor::dashboard::{self, DashboardConfig};
use conveyor::{Chain, Group, NewJob, Periodic, Worker};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::common::{TestDb, WAIT, count_jobs, eventually};
use super::{
    ONE_BROWSER, Outcome, TOKEN, absent, browser, click, err, finish, screenshot, serve, text_of,
    type_into, until,
};

/// How many elements `css` matches once there are `n` of them.
async fn count_is(browser: &Client, css: &str, n: usize) -> Outcome {
    until(&format!("{n} of `{css}`"), || async {
        let found = browser.find_all(Locator::Css(css)).await.ok()?;
        (found.len() == n).then_some(())
    })
    .await
}

/// The ids of the running chain's steps the scenario looks at.
struct Chain4 {
    id: uuid::Uuid,
    publish: uuid::Uuid,
}

async fn workflow_graph(browser: &Client, base: &str, chain: &Chain4) -> Outcome {
    browser
        .goto(&format!("{base}?token={TOKEN}"))
        .await
        .map_err(err("sign in"))?;
    click(browser, r#"a[data-nav="workflows"]"#).await?;
    let row = format!(r#"tr[data-workflow="{}"]"#, chain.id);
    text_of(browser, &row, |t| {
        t.contains("running") && t.contains("chain")
    })
    .await?;
    click(browser, r#"a[data-tab="success"]"#).await?;
    text_of(browser, "#workflows tbody", |t| {
        t.contains("No workflow matches")
    })
    .await?;
    click(browser, r#"a[data-tab="running"]"#).await?;
    click(browser, &format!("{row} a.workflow-link")).await?;
    text_of(browser, "#workflow-state", |t| t == "running").await?;
    text_of(
        browser,
        r#"#workflow-graph [data-fan="chord"] .wf-fan-title"#,
        |t| t.contains("success") && t.contains("3/3"),
    )
    .await?;
    let publish = format!(r#"#workflow-graph [data-node="{}"]"#, chain.publish);
    text_of(browser, &publish, |t| {
        t.contains("publish") && t.contains("started")
    })
    .await?;
    text_of(browser, "#workflow-graph .wf-absent", |t| {
        t.contains("not yet created")
    })
    .await?;
    // seed, 3 members, callback, publish, notify; and the curves between:
    // seed → 3 members → callback → publish → notify.
    count_is(browser, "#workflow-graph .wf-node", 7).await?;
    count_is(browser, "#workflow-graph svg path", 8).await?;
    screenshot(browser, "dashboard-workflow.png").await
}

async fn periodic(browser: &Client) -> Outcome {
    click(browser, r#"a[data-nav="periodic"]"#).await?;
    text_of(browser, "#periodic-leader", |t| {
        t.contains("Leading") && t.contains("fleet-1")
    })
    .await?;
    text_of(
        browser,
        r#"tr[data-schedule="heartbeat"] td[data-col="last"]"#,
        |t| t.contains("success"),
    )
    .await?;
    text_of(browser, r#"tr[data-schedule="nightly-report"]"#, |t| {
        t.contains("every 1d") && t.contains("report") && t.contains("reports")
    })
    .await?;
    screenshot(browser, "dashboard-periodic.png").await
}

async fn settings(browser: &Client, db: &TestDb) -> Outcome {
    click(browser, r#"a[data-nav="queues"]"#).await?;
    let form = r#"form[data-settings="media"]"#;
    type_into(browser, &format!("{form} input[name=limit]"), "2").await?;
    type_into(browser, &format!("{form} input[name=rate]"), "10").await?;
    type_into(browser, &format!("{form} input[name=every]"), "1").await?;
    click(browser, &format!("{form} button[data-action=save]")).await?;
    text_of(
        browser,
        r#"tr[data-queue="media"] td[data-col="limit"]"#,
        |t| t == "2",
    )
    .await?;
    text_of(
        browser,
        r#"tr[data-queue="media"] td[data-col="rate"]"#,
        |t| t.contains("10 per 1 min"),
    )
    .await?;
    click(
        browser,
        r#"tr[data-queue="media"] button[data-action="pause"]"#,
    )
    .await?;
    text_of(
        browser,
        r#"tr[data-queue="media"] td[data-col="paused"]"#,
        |t| t == "paused",
    )
    .await?;
    let row: (Option<i32>, Option<i32>, Option<f64>, bool) = sqlx::query_as(
        "SELECT concurrency_limit, rate_limit, extract(epoch FROM rate_period)::float8,
                paused_at IS NOT NULL FROM conveyor.queues WHERE name = 'media'",
    )
    .fetch_one(&db.pool)
    .await
    .map_err(err("read the settings"))?;
    if row != (Some(2), Some(10), Some(60.0), true) {
        return Err(format!("the page says saved, the row holds {row:?}"));
    }
    screenshot(browser, "dashboard-settings.png").await
}

async fn search(browser: &Client, publish: uuid::Uuid) -> Outcome {
    click(browser, r#"a[data-nav="jobs"]"#).await?;
    text_of(browser, r#"a[data-tab="failure"].active"#, |_| true).await?;
    type_into(
        browser,
        "#job-filter input[name=args]",
        r#"{"customer": 3}"#,
    )
    .await?;
    type_into(browser, "#job-filter input[name=error]", "declined").await?;
    click(browser, "#job-filter button[type=submit]").await?;
    text_of(browser, "#search-note", |t| t.contains("stops after 5 s")).await?;
    count_is(browser, "#jobs tbody tr[data-job]", 30).await?;
    let table = text_of(browser, "#jobs tbody", |t| !t.is_empty()).await?;
    if table.contains("gateway") {
        return Err("the error search shows a job whose error does not match".into());
    }
    screenshot(browser, "dashboard-search.png").await?;
    // By the start of an id: four hex digits match many (a list), all but
    // the last two digits one (its page).
    let id = publish.to_string();
    type_into(browser, "#goto-id", &id[..4]).await?;
    click(browser, "#goto button[type=submit]").await?;
    text_of(browser, "#prefix-note", |t| {
        t.contains("type more of the id")
    })
    .await?;
    count_is(browser, "#jobs tbody tr[data-job]", 20).await?;
    type_into(browser, "#goto-id", &id[..id.len() - 2]).await?;
    click(browser, "#goto button[type=submit]").await?;
    text_of(browser, "#job-id", |t| t == id).await?;
    Ok(())
}

async fn bulk_retry(browser: &Client, db: &TestDb, base: &str) -> Outcome {
    let list = format!("{base}#/jobs?state=failure&task=charge&error=declined");
    browser
        .goto(&list)
        .await
        .map_err(err("open the failures"))?;
    text_of(browser, "#jobs tbody tr[data-job]", |t| {
        t.contains("card declined")
    })
    .await?;
    click(browser, r#"button[data-bulk="retry"]"#).await?;
    text_of(browser, "#bulk-count", |t| {
        t.contains("Re-queue 300 failed jobs matching task charge")
    })
    .await?;
    screenshot(browser, "dashboard-bulk-retry.png").await?;
    click(browser, "#bulk-confirm").await?;
    text_of(browser, "#flash", |t| {
        t.contains("Re-queued 300 job(s); skipped 0.")
    })
    .await?;
    let declined = count_jobs(
        &db.pool,
        "state = 'failure' AND last_error = 'card declined'",
    )
    .await;
    let timeouts = count_jobs(
        &db.pool,
        "state = 'failure' AND last_error = 'gateway timeout'",
    )
    .await;
    if (declined, timeouts) != (0, 20) {
        return Err(format!(
            "after the bulk retry: {declined} declined failures left (0 expected), {timeouts} timeouts (20)"
        ));
    }
    Ok(())
}

/// A read-only dashboard shows the data and none of the actions.
async fn read_only(browser: &Client, base: &str) -> Outcome {
    browser
        .goto(&format!("{base}#/jobs?state=failure"))
        .await
        .map_err(err("open the read-only dashboard"))?;
    text_of(browser, "#jobs tbody tr[data-job]", |t| {
        t.contains("gateway timeout")
    })
    .await?;
    text_of(browser, "#mode", |t| t == "read-only").await?;
    absent(browser, "button[data-bulk]", "read-only hides bulk actions").await?;
    click(browser, r#"a[data-nav="queues"]"#).await?;
    text_of(browser, r#"tr[data-queue="media"]"#, |t| {
        t.contains("paused")
    })
    .await?;
    absent(
        browser,
        "form[data-settings]",
        "read-only hides the settings forms",
    )
    .await?;
    absent(
        browser,
        "button[data-action]",
        "read-only hides pause and resume",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_a_fleet_from_the_browser() {
    let _one = ONE_BROWSER.lock().await;
    let Some((driver, browser)) = browser().await else {
        return;
    };
    let db = TestDb::new().await;
    let client = db.client.clone();
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let ok = |_, args: Value| async move { Ok(args) };
    let worker = Worker::builder(&client)
        .id("fleet-1")
        .queues(["default", "media"])
        .periodic(Periodic::every("heartbeat", Duration::from_secs(1), |_| {
            NewJob::new("ping", json!({}))
        }))
        .periodic(Periodic::every(
            "nightly-report",
            Duration::from_secs(86_400),
            |_| NewJob::new("report", json!({})).queue("reports"),
        ))
        .register_fn("ping", ok)
        .register_fn("fetch", ok)
        .register_fn("charge", ok)
        .register_fn("publish", move |_, args| {
            let gate = held.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(args)
            }
        })
        .start()
        .expect("start the worker");
    // seed → chord(3 × fetch ⇒ sum) → publish (held) → notify (not created yet).
    let publish = NewJob::new("publish", json!({}));
    let publish_id = uuid::Uuid::now_v7();
    let chord = Group::new((0..3).map(|i| NewJob::new("fetch", json!(i))))
        .then_job(NewJob::new("fetch", json!("sum")));
    let chain = Chain::new(NewJob::new("fetch", json!("seed")))
        .then_chord(chord)
        .then_job(publish.id(publish_id))
        .then_job(NewJob::new("fetch", json!("notify")));
    let chain = Chain4 {
        id: client.enqueue_workflow(chain).await.unwrap().id(),
        publish: publish_id,
    };
    // 300 card declines, 30 per customer, and 20 gateway timeouts.
    sqlx::raw_sql(
        "INSERT INTO conveyor.jobs (task, args, state, attempt, max_retries, created_at,
                                    started_at, finished_at, last_error)
         SELECT 'charge', jsonb_build_object('customer', i % 10), 'failure', 1, 0,
                now() - i * interval '10 seconds', now() - i * interval '9 seconds',
                now() - i * interval '9 seconds', 'card declined' FROM generate_series(1, 300) i;
         INSERT INTO conveyor.jobs (task, args, state, attempt, max_retries, created_at,
                                    started_at, finished_at, last_error)
         SELECT 'charge', jsonb_build_object('customer', 3), 'failure', 1, 0,
                now() - i * interval '10 seconds', now() - i * interval '9 seconds',
                now() - i * interval '9 seconds', 'gateway timeout' FROM generate_series(1, 20) i;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    client.set_queue_limit("media", Some(5)).await.unwrap();
    eventually(
        WAIT,
        "publish to run and a heartbeat to succeed",
        || async {
            let running = count_jobs(
                &db.pool,
                &format!("id = '{publish_id}' AND state = 'started'"),
            )
            .await;
            let beat = count_jobs(&db.pool, "task = 'ping' AND state = 'success'").await;
            (running == 1 && beat >= 1).then_some(())
        },
    )
    .await;

    let router = dashboard::router(client.clone(), DashboardConfig::new().token(TOKEN));
    let (base, server) = serve(router).await;
    let ro_router = dashboard::router(client.clone(), DashboardConfig::new().read_only(true));
    let (ro_base, ro_server) = serve(ro_router).await;
    let outcome = async {
        workflow_graph(&browser, &base, &chain).await?;
        periodic(&browser).await?;
        settings(&browser, &db).await?;
        search(&browser, chain.publish).await?;
        bulk_retry(&browser, &db, &base).await?;
        read_only(&browser, &ro_base).await
    }
    .await;
    server.abort();
    ro_server.abort();
    gate.add_permits(10);
    worker.shutdown(WAIT).await.unwrap();
    finish(browser, driver, outcome).await;
}
