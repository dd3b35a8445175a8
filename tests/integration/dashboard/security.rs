//! Who may use the dashboard and what they may do: token, basic auth,
//! read-only mode, CSRF protection, and the loopback rule.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use conveyor::dashboard::{self, DashboardConfig};
use tower::ServiceExt;

use super::{FAILED_NOW, get, insert, open, post, send};
use crate::common::{TestDb, count_jobs};

#[tokio::test]
async fn a_token_is_required_when_configured() {
    let db = TestDb::new().await;
    let router = dashboard::router(db.client.clone(), DashboardConfig::new().token("s3cret"));
    let reply = get(&router, "/api/overview").await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body["error"], "authentication required");
    let wrong = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("authorization", "Bearer nope")],
    )
    .await;
    assert_eq!(wrong.status, 401);
    let right = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(right.status, 200);
    assert_eq!(right.body["auth"], true);

    // The page: a login form, then ?token= sets a session cookie.
    let page = get(&router, "/").await;
    assert_eq!(page.status, 401);
    assert!(page.text.contains("name=\"token\""), "{}", page.text);
    assert_eq!(get(&router, "/?token=nope").await.status, 401);
    let login = get(&router, "/?token=s3cret").await;
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    assert_eq!(
        login.headers[header::LOCATION],
        "/",
        "the token leaves the address bar"
    );
    let cookie = login.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("s3cret"),
        "the cookie holds a session, not the token"
    );
    let session = cookie.split(';').next().unwrap();
    assert_eq!(
        send(&router, Method::GET, "/", &[("cookie", session)])
            .await
            .status,
        200
    );
    let api = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("cookie", session)],
    )
    .await;
    assert_eq!(api.status, 200);
    let forged = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("cookie", "conveyor_session=guess")],
    )
    .await;
    assert_eq!(forged.status, 401);

    // The login form.
    let form = |token: &str| {
        Request::post("/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("token={token}")))
            .unwrap()
    };
    let ok = router.clone().oneshot(form("s3cret")).await.unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert!(
        ok.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .starts_with("conveyor_session=")
    );
    assert_eq!(
        router.clone().oneshot(form("nope")).await.unwrap().status(),
        401
    );
    // Assets are public (the login page uses them).
    assert_eq!(get(&router, "/assets/app.css").await.status, 200);
}

#[tokio::test]
async fn basic_auth_when_configured() {
    let db = TestDb::new().await;
    let router = dashboard::router(
        db.client.clone(),
        DashboardConfig::new().basic_auth("ops", "pa:ss"),
    );
    let reply = get(&router, "/api/overview").await;
    assert_eq!(reply.status, 401);
    assert!(
        reply.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Basic ")
    );
    assert_eq!(get(&router, "/").await.status, 401);
    // base64("ops:pa:ss") and base64("ops:wrong").
    let good = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("authorization", "Basic b3BzOnBhOnNz")],
    )
    .await;
    assert_eq!(good.status, 200);
    let bad = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("authorization", "Basic b3BzOndyb25n")],
    )
    .await;
    assert_eq!(bad.status, 401);
    let garbage = send(
        &router,
        Method::GET,
        "/api/overview",
        &[("authorization", "Basic %%%")],
    )
    .await;
    assert_eq!(garbage.status, 401);
}

#[tokio::test]
async fn read_only_refuses_every_post() {
    let db = TestDb::new().await;
    let router = dashboard::router(db.client.clone(), DashboardConfig::new().read_only(true));
    let failed = insert(&db, 1, "mail", "send", FAILED_NOW).await[0];
    let pending = insert(&db, 1, "mail", "send", "").await[0];
    for uri in [
        format!("/api/jobs/{failed}/retry"),
        format!("/api/jobs/{pending}/cancel"),
        format!("/api/jobs/{failed}/delete"),
        "/api/queues/mail/pause".to_string(),
        "/api/queues/mail/resume".to_string(),
        "/api/queues/mail/limit?limit=3".to_string(),
        "/api/queues/mail/rate?limit=10&period=60".to_string(),
        "/api/bulk/retry?state=failure&max=10".to_string(),
        "/api/bulk/cancel?state=pending&max=10".to_string(),
        "/api/bulk/delete?state=failure&max=10".to_string(),
    ] {
        let reply = post(&router, &uri).await;
        assert_eq!(reply.status, 403, "{uri}: {}", reply.text);
        assert!(reply.body["error"].as_str().unwrap().contains("read-only"));
    }
    let settings: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.queues")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(settings, 0, "no queue setting was written");
    // Reads still answer: the count a bulk action would show.
    let count = get(&router, "/api/bulk?action=retry&state=failure").await;
    assert_eq!(count.body["matched"], 1, "{}", count.text);
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 1);
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 1);
    assert_eq!(count_jobs(&db.pool, "true").await, 2);
    let overview = get(&router, "/api/overview").await;
    assert_eq!(
        (overview.status, overview.body["read_only"].as_bool()),
        (StatusCode::OK, Some(true))
    );
}

#[tokio::test]
async fn mutations_without_the_csrf_header_or_from_another_origin_are_refused() {
    let db = TestDb::new().await;
    let router = open(&db);
    let failed = insert(&db, 1, "mail", "send", FAILED_NOW).await[0];
    let uri = format!("/api/jobs/{failed}/retry");
    let bare = send(&router, Method::POST, &uri, &[]).await;
    assert_eq!(bare.status, 403);
    assert!(
        bare.body["error"]
            .as_str()
            .unwrap()
            .contains("X-Conveyor-Csrf")
    );
    let cross = [
        ("x-conveyor-csrf", "1"),
        ("host", "127.0.0.1:8080"),
        ("origin", "http://evil.example"),
    ];
    assert_eq!(send(&router, Method::POST, &uri, &cross).await.status, 403);
    let site = [("x-conveyor-csrf", "1"), ("sec-fetch-site", "cross-site")];
    assert_eq!(send(&router, Method::POST, &uri, &site).await.status, 403);
    for uri in [
        "/api/queues/mail/pause",
        "/api/queues/mail/limit?limit=1",
        "/api/queues/mail/rate?limit=1&period=1",
        "/api/bulk/retry?state=failure&max=10",
    ] {
        assert_eq!(
            send(&router, Method::POST, uri, &[]).await.status,
            403,
            "{uri}"
        );
        let cross = [
            ("x-conveyor-csrf", "1"),
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example"),
        ];
        assert_eq!(
            send(&router, Method::POST, uri, &cross).await.status,
            403,
            "{uri}"
        );
    }
    assert_eq!(
        count_jobs(&db.pool, "state = 'failure'").await,
        1,
        "nothing changed"
    );
    let same = [
        ("x-conveyor-csrf", "1"),
        ("host", "127.0.0.1:8080"),
        ("origin", "http://127.0.0.1:8080"),
    ];
    assert_eq!(send(&router, Method::POST, &uri, &same).await.status, 200);
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 1);
    // Reads need no header; GET never mutates.
    assert_eq!(
        get(&router, &format!("/api/jobs/{failed}")).await.status,
        200
    );
    assert_eq!(send(&router, Method::GET, &uri, &[]).await.status, 405);
}

#[tokio::test]
async fn the_page_and_assets_are_served_and_non_loopback_needs_auth() {
    let db = TestDb::new().await;
    let router = open(&db);
    let page = get(&router, "/").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("assets/app.js"));
    assert!(
        page.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    // The page's modules, all served as JavaScript; lib.js sends the CSRF header.
    for name in [
        "app.js",
        "lib.js",
        "overview.js",
        "workers.js",
        "jobs.js",
        "bulk.js",
        "job.js",
        "workflows.js",
        "graph.js",
        "periodic.js",
        "queues.js",
    ] {
        let js = get(&router, &format!("/assets/{name}")).await;
        assert_eq!(js.status, 200, "{name}");
        assert!(
            js.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/javascript"),
            "{name}"
        );
        // Every module app.js imports is served.
        if name == "app.js" {
            for import in js.text.lines().filter_map(|l| l.split("from './").nth(1)) {
                let file = import.trim_end_matches("';");
                assert_eq!(
                    get(&router, &format!("/assets/{file}")).await.status,
                    200,
                    "{file}"
                );
            }
        }
    }
    assert!(
        get(&router, "/assets/lib.js")
            .await
            .text
            .contains("X-Conveyor-Csrf")
    );
    assert_eq!(get(&router, "/assets/nothing.js").await.status, 404);
    assert!(
        get(&router, "/assets/app.css").await.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert!(page.text.contains("<base href=\"/\">"));
    // Mounted under a path: the page's relative URLs resolve below it.
    let nested = Router::new().nest("/conveyor", open(&db));
    let page = get(&nested, "/conveyor").await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("<base href=\"/conveyor/\">"),
        "{}",
        page.text
    );
    assert_eq!(get(&nested, "/conveyor/assets/app.js").await.status, 200);
    assert_eq!(get(&nested, "/conveyor/api/overview").await.status, 200);
    let guarded = Router::new().nest(
        "/conveyor",
        dashboard::router(db.client.clone(), DashboardConfig::new().token("t")),
    );
    let login = get(&guarded, "/conveyor?token=t").await;
    assert_eq!(login.headers[header::LOCATION], "/conveyor");
    let form = get(&guarded, "/conveyor").await;
    assert!(
        form.text.contains("<base href=\"/conveyor/\">"),
        "{}",
        form.text
    );

    let public = "0.0.0.0:8080".parse().unwrap();
    let err = DashboardConfig::new()
        .check_bind(public)
        .unwrap_err()
        .to_string();
    assert!(err.contains("refusing") && err.contains("--token"), "{err}");
    assert!(DashboardConfig::new().token("t").check_bind(public).is_ok());
    assert!(
        DashboardConfig::new()
            .basic_auth("u", "p")
            .check_bind(public)
            .is_ok()
    );
    assert!(
        DashboardConfig::new()
            .allow_insecure(true)
            .check_bind(public)
            .is_ok()
    );
    assert!(
        DashboardConfig::new()
            .check_bind("127.0.0.1:8080".parse().unwrap())
            .is_ok()
    );
    assert!(
        DashboardConfig::new()
            .check_bind("[::1]:8080".parse().unwrap())
            .is_ok()
    );
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn the_command_refuses_a_public_address_without_authentication() {
    let db = TestDb::new().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conveyor"))
        .args([
            "--database-url",
            &db.url(),
            "dashboard",
            "--bind",
            "0.0.0.0:0",
        ])
        .env_remove("CONVEYOR_DASHBOARD_TOKEN")
        .env_remove("CONVEYOR_DASHBOARD_BASIC_AUTH")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve the dashboard on 0.0.0.0:0 without authentication"),
        "{err}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conveyor"))
        .args([
            "--database-url",
            &db.url(),
            "dashboard",
            "--basic-auth",
            "nocolon",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("USER:PASSWORD"));
}
