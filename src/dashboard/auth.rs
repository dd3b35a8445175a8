//! Who may use the dashboard: bearer token (header, `?token=`, login form →
//! session cookie), HTTP basic auth; and what they may do: read-only mode,
//! CSRF protection of every mutating request.

use axum::Form;
use axum::extract::{OriginalUri, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;

use super::AppState;
use super::api::ApiError;

/// Name of the session cookie set by `?token=` and the login form.
const COOKIE: &str = "conveyor_session";
/// The header the page's script sends with every mutating request.
pub(super) const CSRF_HEADER: &str = "x-conveyor-csrf";

/// Compares secrets in time independent of where they differ.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn token_matches(state: &AppState, given: &str) -> bool {
    state
        .config
        .token
        .as_deref()
        .is_some_and(|token| same_secret(given.as_bytes(), token.as_bytes()))
}

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether the request carries valid credentials (or none are needed).
pub(super) fn authenticated(state: &AppState, headers: &HeaderMap) -> bool {
    if !state.config.requires_auth() {
        return true;
    }
    if session_cookie(headers)
        .is_some_and(|value| same_secret(value.as_bytes(), state.session.as_bytes()))
    {
        return true;
    }
    let Some(authorization) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(token) = authorization.strip_prefix("Bearer ") {
        return token_matches(state, token.trim());
    }
    if let (Some(encoded), Some((user, password))) = (
        authorization.strip_prefix("Basic "),
        state.config.basic_auth.as_ref(),
    ) {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{user}:{password}");
        return same_secret(&decoded, expected.as_bytes());
    }
    false
}

/// A same-origin request: `Sec-Fetch-Site` (when the browser sends it) says
/// so, and `Origin` (when sent) names the host the request went to. An
/// opaque `Origin: null` counts only with `Sec-Fetch-Site: same-origin`.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let site = text(header::HeaderName::from_static("sec-fetch-site"));
    if site.is_some_and(|site| !matches!(site, "same-origin" | "none")) {
        return false;
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some("null"), _) => site == Some("same-origin"),
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        (Some(_), None) => false,
    }
}

/// Guards every page and API route: authentication (401), then for POSTs
/// read-only mode (403) and CSRF (403).
pub(super) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    // The full path (under a mount point), for links back to the page.
    let path = request.extensions().get::<OriginalUri>().map_or_else(
        || request.uri().path().to_string(),
        |uri| uri.path().to_string(),
    );
    if !api
        && request.method() == Method::GET
        && let Some(token) = query_token(request.uri())
    {
        let route = request.uri().path();
        return if token_matches(&state, &token) {
            logged_in(&state, &super::page_path(&path, route))
        } else {
            let base = super::base_href(&path, route);
            login_page(
                &state,
                &base,
                StatusCode::UNAUTHORIZED,
                "That token is not valid.",
            )
        };
    }
    if !authenticated(&state, request.headers()) {
        if api {
            let mut response =
                ApiError::new(StatusCode::UNAUTHORIZED, "authentication required").into_response();
            challenge(&state, &mut response);
            return response;
        }
        let base = super::base_href(&path, request.uri().path());
        return login_page(&state, &base, StatusCode::UNAUTHORIZED, "");
    }
    if request.method() == Method::POST {
        if state.config.read_only {
            return ApiError::new(StatusCode::FORBIDDEN, "the dashboard is read-only")
                .into_response();
        }
        let marked = request
            .headers()
            .get(CSRF_HEADER)
            .is_some_and(|v| v.as_bytes() == b"1");
        if !marked || !same_origin(request.headers()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "cross-site request refused: send the X-Conveyor-Csrf: 1 header from the same origin",
            )
            .into_response();
        }
    }
    next.run(request).await
}

fn query_token(uri: &Uri) -> Option<String> {
    #[derive(Deserialize)]
    struct TokenQuery {
        token: Option<String>,
    }
    Query::<TokenQuery>::try_from_uri(uri).ok()?.0.token
}

/// Asks the browser for basic credentials, when those are accepted.
fn challenge(state: &AppState, response: &mut Response) {
    if state.config.basic_auth.is_some() {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Conveyor dashboard\", charset=\"UTF-8\""),
        );
    }
}

/// The login page: a token form when a token is configured, otherwise a
/// basic-auth challenge with a short explanation.
fn login_page(state: &AppState, base: &str, status: StatusCode, message: &str) -> Response {
    let form_hidden = if state.config.token.is_some() {
        ""
    } else {
        "hidden"
    };
    let body = super::LOGIN_HTML
        .replace("{base}", base)
        .replace("{message}", message)
        .replace("{form_hidden}", form_hidden);
    let mut response = super::html(status, body);
    challenge(state, &mut response);
    response
}

/// Sets the session cookie and sends the browser to the page at `path`.
fn logged_in(state: &AppState, path: &str) -> Response {
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        state.session
    );
    redirect(path, &cookie)
}

fn redirect(location: &str, cookie: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, value);
    }
    if let Ok(value) = HeaderValue::from_str(cookie) {
        headers.insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

/// `POST login` with the form's token.
pub(super) async fn login(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !same_origin(&headers) {
        return ApiError::new(StatusCode::FORBIDDEN, "cross-site login refused").into_response();
    }
    if token_matches(&state, form.token.trim()) {
        logged_in(&state, &super::page_path(uri.path(), "/login"))
    } else {
        let base = super::base_href(uri.path(), "login");
        login_page(
            &state,
            &base,
            StatusCode::UNAUTHORIZED,
            "That token is not valid.",
        )
    }
}

/// `POST logout`: forgets the session cookie.
pub(super) async fn logout(OriginalUri(uri): OriginalUri) -> Response {
    redirect(
        &super::page_path(uri.path(), "/logout"),
        &format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    )
}
