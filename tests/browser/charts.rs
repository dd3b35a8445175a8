//! The third scenario, charts from the persisted rollups: after a known
//! workload (successes, retries, failures for good, a rescue, cancellations
//! in two queues and four tasks), the overview's throughput chart and the
//! charts page show as totals what `conveyor.jobs` holds (counted with SQL),
//! for all queues and narrowed to one; the charts are drawn (their series'
//! colour is on the canvas) with no CSP violation or script error; a failed
//! chord's job page does not link to the callback that was never created;
//! then every finished job is pruned and, reloaded, the charts show the
//! same totals.

use conveyor::dashboard::{self, DashboardConfig};
use conveyor::{Group, NewJob, TaskError, Worker};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use super::common::{TestDb, WAIT};
use super::outcomes::{self, Outcomes};
use super::{
    ONE_BROWSER, Outcome, TOKEN, absent, browser, click, err, finish, screenshot, serve, text_of,
    until,
};

const COUNTS: [&str; 5] = ["succeeded", "failed", "retried", "rescued", "cancelled"];

fn values(o: &Outcomes) -> [i64; 5] {
    [o.succeeded, o.failed, o.retried, o.rescued, o.cancelled]
}

/// Waits until the totals table `table` shows `expected` (raw numbers in
/// `data-value`); the failures chart leaves successes out.
async fn totals_are(browser: &Client, table: &str, expected: &Outcomes) -> Outcome {
    let skip = usize::from(table.contains("failures"));
    for (key, n) in COUNTS.iter().zip(values(expected)).skip(skip) {
        let css = format!(r#"#{table} td[data-total="{key}"]"#);
        until(&format!("{css} to say {n}"), || async {
            let cell = browser.find(Locator::Css(&css)).await.ok()?;
            let value = cell.attr("data-value").await.ok()??;
            (value == n.to_string()).then_some(())
        })
        .await?;
    }
    Ok(())
}

/// Records CSP violations and script errors from now on (the page is one
/// document: hash routes do not reload it).
const WATCH: &str = "window.__problems = [];
    document.addEventListener('securitypolicyviolation',
      (e) => window.__problems.push('CSP: ' + e.violatedDirective + ' blocked ' + e.blockedURI));
    window.addEventListener('error', (e) => window.__problems.push('script error: ' + e.message));";

async fn no_problems(browser: &Client) -> Outcome {
    let problems = browser
        .execute("return window.__problems || ['the watch is gone'];", vec![])
        .await
        .map_err(err("read the recorded problems"))?;
    match problems.as_array() {
        Some(list) if list.is_empty() => Ok(()),
        _ => Err(format!("the page reported: {problems}")),
    }
}

/// How many pixels of the chart `css`'s canvas are within 12 of the colour
/// of the CSS variable `var` (its series' stroke).
const PIXELS: &str = "const [css, name] = arguments;
    const canvas = document.querySelector(css + ' canvas');
    if (!canvas) return -1;
    const probe = document.createElement('span');
    probe.style.color = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    document.body.append(probe);
    const rgb = getComputedStyle(probe).color.match(/\\d+/g).map(Number);
    probe.remove();
    const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 200 && Math.abs(d[i] - rgb[0]) < 12 && Math.abs(d[i + 1] - rgb[1]) < 12
          && Math.abs(d[i + 2] - rgb[2]) < 12) n++;
    }
    return n;";

async fn drawn(browser: &Client, chart: &str, var: &str) -> Outcome {
    until(&format!("{chart} to draw its {var} series"), || async {
        let n = browser
            .execute(PIXELS, vec![json!(chart), json!(var)])
            .await
            .ok()?;
        (n.as_i64()? > 10).then_some(())
    })
    .await
}

async fn scenario(
    browser: &Client,
    db: &TestDb,
    base: &str,
    chord_member: uuid::Uuid,
    chord_callback: uuid::Uuid,
) -> Outcome {
    let all = outcomes::in_jobs_table(&db.pool, "true").await;
    let mail = outcomes::in_jobs_table(&db.pool, "queue = 'mail'").await;
    browser
        .goto(&format!("{base}?token={TOKEN}"))
        .await
        .map_err(err("sign in"))?;
    browser
        .execute(WATCH, vec![])
        .await
        .map_err(err("watch for CSP violations"))?;
    // The charts page (drawn after the watch began), every queue.
    click(browser, r#"a[data-nav="charts"]"#).await?;
    totals_are(browser, "chart-throughput-totals", &all).await?;
    totals_are(browser, "chart-failures-totals", &all).await?;
    let timed = (all.succeeded + all.failed + all.retried).to_string();
    for table in ["chart-wait-totals", "chart-run-totals"] {
        text_of(
            browser,
            &format!(r#"#{table} td[data-total="count"]"#),
            |t| t == timed,
        )
        .await?;
        text_of(browser, &format!(r#"#{table} td[data-total="p99"]"#), |t| {
            t.starts_with("≤ ")
        })
        .await?;
    }
    drawn(browser, "#chart-throughput", "--ok").await?;
    drawn(browser, "#chart-failures", "--bad").await?;
    drawn(browser, "#chart-run", "--bad").await?;
    // Tall enough for the four charts.
    let tall = browser.set_window_size(1280, 1090).await;
    screenshot(browser, "dashboard-charts.png").await?;
    tall.and(browser.set_window_size(1280, 900).await)
        .map_err(err("resize the window"))?;

    // Narrowed to a queue; the 24-hour window counts the same.
    browser
        .find(Locator::Css("select#chart-queue"))
        .await
        .map_err(err("the queue filter"))?
        .select_by_value("mail")
        .await
        .map_err(err("choose the mail queue"))?;
    totals_are(browser, "chart-throughput-totals", &mail).await?;
    click(browser, r#"a[data-window="24h"]"#).await?;
    text_of(browser, "#chart-range", |t| t.contains("10-minute")).await?;
    totals_are(browser, "chart-throughput-totals", &mail).await?;

    // The overview's throughput chart, from the same rollups.
    click(browser, r#"a[data-nav="overview"]"#).await?;
    totals_are(browser, "overview-throughput-totals", &all).await?;
    drawn(browser, "#overview-throughput", "--ok").await?;
    no_problems(browser).await?;

    // A failed chord's member: its workflow's callback was never created,
    // and the page says so instead of linking to it (that link led to a 404).
    browser
        .goto(&format!("{base}#/job/{chord_member}"))
        .await
        .map_err(err("open the chord member"))?;
    text_of(browser, "#job-state", |t| t == "failure").await?;
    text_of(browser, "#result-job", |t| t.contains("never created")).await?;
    absent(
        browser,
        &format!(r##"a[href="#/job/{chord_callback}"]"##),
        "the callback was never created",
    )
    .await?;

    // Every finished job pruned: reloaded, the charts count the same.
    outcomes::prune_jobs(&db.client, &db.pool).await;
    browser
        .goto(&format!("{base}#/charts?window=7d"))
        .await
        .map_err(err("open the charts again"))?;
    browser.refresh().await.map_err(err("reload"))?;
    totals_are(browser, "chart-throughput-totals", &all).await?;
    totals_are(browser, "chart-failures-totals", &all).await?;
    browser
        .goto(&format!("{base}#/charts?window=1h&queue=mail"))
        .await
        .map_err(err("open the mail queue's charts"))?;
    totals_are(browser, "chart-throughput-totals", &mail).await?;
    browser
        .goto(base)
        .await
        .map_err(err("open the overview again"))?;
    totals_are(browser, "overview-throughput-totals", &all).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_show_what_the_jobs_table_held_after_it_is_pruned() {
    let _one = ONE_BROWSER.lock().await;
    let Some((driver, browser)) = browser().await else {
        return;
    };
    let db = TestDb::new().await;
    outcomes::run(&db.client, &db.pool).await;
    // A chord one of whose members fails for good: no callback.
    let worker = Worker::builder(&db.client)
        .register_fn("member", |_, args: Value| async move {
            if args == json!(1) {
                Err(TaskError::fail("member 1 is broken"))
            } else {
                Ok(args)
            }
        })
        .register_fn("sum", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    let chord = Group::new((0..3).map(|n| NewJob::new("member", json!(n)).max_retries(0)))
        .then_job(NewJob::new("sum", json!([])));
    let handle = db.client.enqueue_workflow(chord).await.unwrap();
    assert!(handle.wait(WAIT).await.is_err(), "the chord fails");
    worker.shutdown(WAIT).await.unwrap();
    let (member, callback): (uuid::Uuid, uuid::Uuid) = sqlx::query_as(
        "SELECT j.id, w.result_job_id FROM conveyor.jobs j JOIN conveyor.workflows w ON w.id = j.workflow_id
         WHERE j.workflow_id = $1 AND j.state = 'failure'",
    )
    .bind(handle.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();

    let router = dashboard::router(db.client.clone(), DashboardConfig::new().token(TOKEN));
    let (base, server) = serve(router).await;
    let outcome = scenario(&browser, &db, &base, member, callback).await;
    server.abort();
    finish(browser, driver, outcome).await;
}
