//! End to end: the dashboard in headless Chromium, driven through
//! chromedriver (WebDriver) with fantoccini, against real workers. Three
//! scenarios, one browser at a time:
//!
//! - `retry`: sign in, see which queue no live worker serves, the workers
//!   page, a failed job retried from its page, the overview once the last
//!   worker stopped;
//! - `fleet`: a workflow's graph, periodic schedules and their leader,
//!   queue settings edited, searches by args, error text and id prefix, a
//!   bulk retry confirmed with its count, and a read-only dashboard that
//!   shows no action;
//! - `charts`: the charts of the persisted rollups show what `conveyor.jobs`
//!   holds for a known workload, drawn without a CSP violation, and the
//!   same once the jobs are pruned; a failed chord's job page does not link
//!   to its never-created callback.
//!
//! Each saves screenshots to `target/screenshots/`; with
//! `CONVEYOR_UPDATE_SCREENSHOTS=1` also to `docs/screenshots/`, which the
//! README shows (so an ordinary run leaves the repository untouched).
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
#[path = "../integration/outcomes.rs"]
mod outcomes;

mod charts;
mod fleet;
mod retry;

use std::net::{Ipv4Addr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use common::eventually;

const TOKEN: &str = "e2e-secret-token";
/// How long the browser may take to show what we wait for.
const UI_WAIT: Duration = Duration::from_secs(30);

type Outcome = Result<(), String>;

fn binary(var: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    path.exists().then_some(path)
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

/// Saves the page as `target/screenshots/<name>`, and in
/// `docs/screenshots/` with `CONVEYOR_UPDATE_SCREENSHOTS=1`.
async fn screenshot(browser: &Client, name: &str) -> Outcome {
    let shot = browser.screenshot().await.map_err(err("screenshot"))?;
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join("screenshots");
    let mut dirs = vec![target];
    if std::env::var("CONVEYOR_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).map_err(err("create the screenshot folder"))?;
        std::fs::write(dir.join(name), &shot).map_err(err("save a screenshot"))?;
    }
    Ok(())
}

/// Types `text` into the field `css`, replacing what it held.
async fn type_into(browser: &Client, css: &str, text: &str) -> Outcome {
    let field = browser
        .wait()
        .at_most(UI_WAIT)
        .for_element(Locator::Css(css))
        .await
        .map_err(|e| format!("no `{css}` on the page: {e}"))?;
    field.clear().await.map_err(err("clear a field"))?;
    field
        .send_keys(text)
        .await
        .map_err(err("type into a field"))
}

/// Fails if `css` matches anything on the page.
async fn absent(browser: &Client, css: &str, why: &str) -> Outcome {
    match browser.find_all(Locator::Css(css)).await {
        Ok(found) if !found.is_empty() => Err(format!("`{css}` is on the page: {why}")),
        _ => Ok(()),
    }
}

/// The dashboard `router`, in-process on a free loopback port: its base URL.
async fn serve(router: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (base, server)
}

/// One browser at a time (two Chromiums on the 2-core CI machine slow each
/// other past the waits).
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A headless Chromium session through chromedriver, or `None` when
/// `CONVEYOR_SKIP_BROWSER=1`. Installs the two when missing (`tests/support/apt.rs`).
async fn browser() -> Option<(Driver, Client)> {
    if std::env::var("CONVEYOR_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("CONVEYOR_SKIP_BROWSER=1: the browser test is skipped");
        return None;
    }
    let binaries = || {
        (
            binary("CHROMIUM", "/usr/bin/chromium"),
            binary("CHROMEDRIVER", "/usr/bin/chromedriver"),
        )
    };
    if matches!(binaries(), (None, _) | (_, None)) {
        eprintln!("Chromium or chromedriver is missing");
        common::bouncer::apt::install(&["chromium", "chromium-driver"]);
    }
    let (Some(chromium), Some(chromedriver)) = binaries() else {
        panic!(
            "the dashboard browser test needs Chromium and chromedriver (/usr/bin/chromium and \
             /usr/bin/chromedriver, or set CHROMIUM / CHROMEDRIVER) and could not install them: \
             run `apt-get install chromium chromium-driver` as root, or set \
             CONVEYOR_SKIP_BROWSER=1 to skip"
        );
    };
    let driver = Driver::start(&chromedriver).await;
    let browser = connect(&driver, &chromium).await;
    Some((driver, browser))
}

/// Ends the session; on a failed step, panics with it and the page's source.
async fn finish(browser: Client, driver: Driver, outcome: Outcome) {
    let page = match &outcome {
        Ok(()) => String::new(),
        Err(_) => browser.source().await.unwrap_or_default(),
    };
    browser.close().await.ok();
    drop(driver);
    if let Err(step) = outcome {
        panic!("{step}\n--- page source ---\n{page}");
    }
}
