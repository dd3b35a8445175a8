//! End to end: the dashboard in headless Chromium, driven through
//! chromedriver (WebDriver) with fantoccini, against a real worker.
//!
//! A job fails while its handler is "broken"; in the browser we sign in with
//! the token, see on the overview which queue no live worker serves, open
//! the workers page, find the failure, open the failed jobs list and the
//! job, read its error, repair the handler, press Retry and wait for the page
//! to show the job succeeded; then the worker stops and the overview says no
//! live worker is left. Screenshots go to `target/dashboard*.png` (the ones
//! in `docs/screenshots/` are copies).
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's
//! `chromium` and `chromium-driver`; `CHROMIUM` and `CHROMEDRIVER` name
//! others). When they are missing the test installs the two packages with
//! `apt-get` (as root, or through `sudo -n`), so `cargo test` needs nothing
//! installed by hand on a Debian machine; where it cannot, it fails saying
//! so, unless `CONVEYOR_SKIP_BROWSER=1`.

#[allow(dead_code)]
#[path = "../integration/common.rs"]
mod common;

use std::net::{Ipv4Addr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use conveyor::dashboard::{self, DashboardConfig};
use conveyor::{NewJob, TaskError, Worker, WorkerHandle};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use common::{TestDb, WAIT, count_jobs, eventually};

const TOKEN: &str = "e2e-secret-token";
/// How long the browser may take to show what we wait for.
const UI_WAIT: Duration = Duration::from_secs(30);

type Outcome = Result<(), String>;

fn binary(var: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    path.exists().then_some(path)
}

/// Installs Debian's `chromium` and `chromium-driver` with `apt-get`, as
/// root or through `sudo -n`; says why on stderr when it cannot.
fn install_browser() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
    let apt = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
    };
    eprintln!("Chromium or chromedriver is missing: installing chromium and chromium-driver");
    let installed = apt(&["update", "-q"]).is_ok_and(|s| s.success())
        && apt(&["install", "-y", "-q", "chromium", "chromium-driver"]).is_ok_and(|s| s.success());
    if !installed {
        eprintln!("apt-get could not install chromium and chromium-driver");
    }
}

fn free_port() -> u16 {
    StdListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Driver {
    async fn start(chromedriver: &Path) -> Driver {
        let port = free_port();
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chromedriver.log");
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let driver = Driver { child, port, log };
        eventually(
            Duration::from_secs(20),
            "chromedriver to listen",
            || async {
                TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                    .ok()
                    .map(drop)
            },
        )
        .await;
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(driver: &Driver, chromium: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-background-networking", "--window-size=1280,900"],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| {
            let log = std::fs::read_to_string(&driver.log).unwrap_or_default();
            let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            panic!("cannot open a Chromium session through chromedriver: {e}\nchromedriver log (last lines, newest first):\n{tail}")
        })
}

/// Polls `check` until it yields `Some`, or fails after [`UI_WAIT`].
async fn until<T, F, Fut>(what: &str, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + UI_WAIT;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("timed out after {UI_WAIT:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the element `css` once it exists and `ok` accepts it.
async fn text_of(browser: &Client, css: &str, ok: impl Fn(&str) -> bool) -> Result<String, String> {
    until(&format!("`{css}` to show the expected text"), || async {
        let text = browser
            .find(Locator::Css(css))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        ok(&text).then_some(text)
    })
    .await
}

async fn click(browser: &Client, css: &str) -> Outcome {
    let element = browser
        .wait()
        .at_most(UI_WAIT)
        .for_element(Locator::Css(css))
        .await
        .map_err(|e| format!("no `{css}` on the page: {e}"))?;
    element
        .click()
        .await
        .map_err(|e| format!("cannot click `{css}`: {e}"))
}

fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

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
    screenshot(browser, "dashboard.png").await?;

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

/// Saves the page as `target/<name>` (copied by hand to docs/screenshots).
async fn screenshot(browser: &Client, name: &str) -> Outcome {
    let shot = browser.screenshot().await.map_err(err("screenshot"))?;
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new("."));
    std::fs::write(target.join(name), shot).map_err(err("save a screenshot in target/"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_a_failed_job_from_the_browser() {
    if std::env::var("CONVEYOR_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("CONVEYOR_SKIP_BROWSER=1: the browser test is skipped");
        return;
    }
    let binaries = || {
        (
            binary("CHROMIUM", "/usr/bin/chromium"),
            binary("CHROMEDRIVER", "/usr/bin/chromedriver"),
        )
    };
    if matches!(binaries(), (None, _) | (_, None)) {
        install_browser();
    }
    let (Some(chromium), Some(chromedriver)) = binaries() else {
        panic!(
            "the dashboard browser test needs Chromium and chromedriver (/usr/bin/chromium and \
             /usr/bin/chromedriver, or set CHROMIUM / CHROMEDRIVER) and could not install them: \
             run `apt-get install chromium chromium-driver` as root, or set \
             CONVEYOR_SKIP_BROWSER=1 to skip"
        );
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
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let router = dashboard::router(client.clone(), DashboardConfig::new().token(TOKEN));
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let driver = Driver::start(&chromedriver).await;
    let browser = connect(&driver, &chromium).await;
    let outcome = scenario(&browser, &db, &base, &broken, job, worker).await;
    let page = match &outcome {
        Ok(()) => String::new(),
        Err(_) => browser.source().await.unwrap_or_default(),
    };
    browser.close().await.ok();
    drop(driver);
    server.abort();
    if let Err(step) = outcome {
        panic!("{step}\n--- page source ---\n{page}");
    }
}
