//! The dashboard: one page, a script and a style sheet, built into the
//! binary and served under `/ui/`. The script calls the same HTTP API as
//! everyone else (it has no routes of its own), with the token the user
//! signs in with kept in the browser tab's `sessionStorage`: never in a
//! cookie (so no other site can make the browser act with it), a URL or a
//! log. Every answer carries a Content-Security-Policy that allows only
//! this daemon's own script, style and API.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get};

use super::AppState;

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const APP_CSS: &str = include_str!("dashboard/app.css");

/// The policy of every dashboard answer: nothing inline, nothing from
/// elsewhere, no framing, no form posts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'none'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes (not in `/openapi.json`: they serve files).
pub fn routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/", get(to_dashboard)),
        ("/ui", get(to_dashboard)),
        (
            "/ui/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        ),
        (
            "/ui/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        ),
        (
            "/ui/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        ),
    ]
}

async fn to_dashboard() -> Redirect {
    Redirect::to("/ui/")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
