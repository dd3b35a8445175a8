//! The web dashboard: queues with live counts, charts of throughput,
//! failures, queue wait and run time over 1 h / 24 h / 7 d from the
//! persisted rollups (`conveyor.stats`), workers, job lists per state with
//! search (id prefix, args, error text) and keyset paging, job details (arguments, result, headers, every attempt's error,
//! timeline, workflow progress), workflows with their graphs, periodic
//! schedules and their leader, queue settings, and actions (retry, cancel,
//! delete one job or everything a filter matches; pause, resume, limit a
//! queue).
//!
//! It is an [`axum::Router`]: serve it alone with [`serve`] (what
//! `conveyor dashboard` does) or mount it in your own axum server. Its HTML,
//! JavaScript and CSS are embedded in the binary; the page polls a JSON API
//! under `api/`, which scripts may use too.
//!
//! ```no_run
//! # async fn demo(client: conveyor::Client) -> conveyor::Result<()> {
//! use conveyor::dashboard::{self, DashboardConfig};
//! let config = DashboardConfig::new().token("s3cret").read_only(true);
//! // Alone (refuses a non-loopback address without authentication):
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await
//!     .map_err(|e| conveyor::Error::Config(e.to_string()))?;
//! dashboard::serve(listener, client.clone(), config.clone()).await?;
//! // Or inside your own server, under a path (open it as /conveyor/):
//! let app: axum::Router = axum::Router::new()
//!     .nest("/conveyor", dashboard::router(client, config));
//! # Ok(()) }
//! ```
//!
//! **Security.** With a token, clients send `Authorization: Bearer TOKEN`;
//! a browser opens `/?token=TOKEN` once (or uses the login form), which sets
//! an `HttpOnly`, `SameSite=Strict` session cookie. With basic auth the
//! browser asks for the user and password. Mutating endpoints are `POST`
//! only, need the `X-Conveyor-Csrf: 1` header (which a cross-site form cannot
//! send) and a same-origin `Origin` when one is given; in read-only mode they
//! all answer 403.

mod api;
mod auth;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::OriginalUri;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::client::Client;
use crate::error::{Error, Result};

/// How the dashboard authenticates and what it allows.
///
/// With neither a token nor basic auth, anyone who can reach the address can
/// use it: [`serve`] accepts that on a loopback address only, unless
/// [`DashboardConfig::allow_insecure`] is set.
#[derive(Clone, Default)]
pub struct DashboardConfig {
    token: Option<String>,
    basic_auth: Option<(String, String)>,
    read_only: bool,
    allow_insecure: bool,
}

impl std::fmt::Debug for DashboardConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardConfig")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("basic_auth", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("read_only", &self.read_only)
            .field("allow_insecure", &self.allow_insecure)
            .finish()
    }
}

impl DashboardConfig {
    /// No authentication, actions allowed, loopback only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires this bearer token (header, `?token=` or login form). An
    /// empty token is ignored.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.token = (!token.is_empty()).then_some(token);
        self
    }

    /// Accepts HTTP basic authentication with this user and password.
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.basic_auth = Some((user.into(), password.into()));
        self
    }

    /// Read-only: every mutating endpoint answers 403 and the page shows no
    /// action buttons.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Lets [`serve`] listen on a non-loopback address without authentication.
    pub fn allow_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// Whether requests must authenticate.
    pub fn requires_auth(&self) -> bool {
        self.token.is_some() || self.basic_auth.is_some()
    }

    /// Checks that serving on `addr` is acceptable: a loopback address, or
    /// authentication configured, or insecure serving explicitly allowed.
    pub fn check_bind(&self, addr: SocketAddr) -> Result<()> {
        if addr.ip().is_loopback() || self.requires_auth() || self.allow_insecure {
            return Ok(());
        }
        Err(Error::Config(format!(
            "refusing to serve the dashboard on {addr} without authentication: anyone who can \
             reach it could read job arguments and retry, cancel or delete jobs. Give a token \
             (--token or CONVEYOR_DASHBOARD_TOKEN) or --basic-auth user:pass, bind a loopback \
             address such as 127.0.0.1, or pass --allow-insecure if something in front of it \
             authenticates"
        )))
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    client: Client,
    config: Arc<DashboardConfig>,
    /// The session cookie's value: random per router, so a restart logs
    /// browsers out and the token itself never sits in a cookie.
    session: Arc<str>,
}

/// The dashboard's routes, relative to where they are mounted: the page at
/// `/`, its assets under `/assets/`, the JSON API under `/api/`.
pub fn router(client: Client, config: DashboardConfig) -> Router {
    let session = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let state = AppState {
        client,
        config: Arc::new(config),
        session: session.into(),
    };
    Router::new()
        .route("/", get(index))
        .route("/api/overview", get(api::overview))
        .route("/api/jobs", get(api::jobs))
        .route("/api/search", get(api::id_search))
        .route("/api/workers", get(api::workers))
        .route("/api/jobs/{id}", get(api::job))
        .route("/api/jobs/{id}/{action}", post(api::job_action))
        .route("/api/bulk", get(api::bulk_count))
        .route("/api/bulk/{action}", post(api::bulk_act))
        .route("/api/workflows", get(api::workflows))
        .route("/api/workflows/{id}", get(api::workflow))
        .route("/api/periodic", get(api::periodic))
        .route("/api/stats", get(api::stats))
        .route("/api/queues/{queue}/{action}", post(api::queue_action))
        .fallback(api::not_found)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        // Not behind the guard: the login form and the (public) assets it uses.
        .route("/login", post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/assets/{name}", get(asset))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
}

/// Serves [`router`] on `listener` until the process ends, after checking
/// the address with [`DashboardConfig::check_bind`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    client: Client,
    config: DashboardConfig,
) -> Result<()> {
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Config(format!("dashboard listener: {e}")))?;
    config.check_bind(addr)?;
    axum::serve(listener, router(client, config))
        .await
        .map_err(|e| Error::Config(format!("dashboard server on {addr}: {e}")))
}

const INDEX_HTML: &str = include_str!("assets/index.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");

/// The page's script (ES modules, `app.js` first) and style sheet, and the
/// chart library (`assets/vendor/`, see its README), embedded.
const ASSETS: &[(&str, &str)] = &[
    ("app.css", include_str!("assets/app.css")),
    ("app.js", include_str!("assets/app.js")),
    ("bulk.js", include_str!("assets/bulk.js")),
    ("charts.js", include_str!("assets/charts.js")),
    ("graph.js", include_str!("assets/graph.js")),
    ("job.js", include_str!("assets/job.js")),
    ("jobs.js", include_str!("assets/jobs.js")),
    ("lib.js", include_str!("assets/lib.js")),
    ("overview.js", include_str!("assets/overview.js")),
    ("periodic.js", include_str!("assets/periodic.js")),
    ("plot.js", include_str!("assets/plot.js")),
    ("queues.js", include_str!("assets/queues.js")),
    ("workers.js", include_str!("assets/workers.js")),
    ("workflows.js", include_str!("assets/workflows.js")),
    (
        "uPlot.iife.min.js",
        include_str!("assets/vendor/uPlot.iife.min.js"),
    ),
    ("uPlot.min.css", include_str!("assets/vendor/uPlot.min.css")),
];

/// The page. Its URLs are relative to `<base>`: where the router is
/// mounted (`/`, or `/conveyor` under axum's `nest`).
async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let page = INDEX_HTML.replace("{base}", &base_href(uri.path(), ""));
    html(StatusCode::OK, page)
}

/// The mount point of a request to `route` (a path relative to the router's
/// root) as a `<base href>`: with a trailing slash, HTML-escaped.
pub(crate) fn base_href(path: &str, route: &str) -> String {
    let base = path.strip_suffix(route).unwrap_or(path);
    let mut base = base.to_string();
    if !base.ends_with('/') {
        base.push('/');
    }
    base.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Where to send a browser back to the page, from a request to `route`.
pub(crate) fn page_path(path: &str, route: &str) -> String {
    let base = path.strip_suffix(route).unwrap_or(path);
    match base.trim_end_matches('/') {
        "" => "/".to_string(),
        mount => mount.to_string(),
    }
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `GET assets/{name}`: one of [`ASSETS`] (public: the login page uses the
/// style sheet; none holds data).
async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let Some((_, body)) = ASSETS.iter().find(|(n, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let content_type = if name.ends_with(".css") {
        "text/css; charset=utf-8"
    } else {
        "text/javascript; charset=utf-8"
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        *body,
    )
        .into_response()
}

/// Everything is same-origin: no framing, no inline script, and the
/// referrer (which could hold a `?token=` URL) goes to this origin only.
/// (`no-referrer` would also make browsers send `Origin: null` with the
/// page's own POSTs.)
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'self'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
