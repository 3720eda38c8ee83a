//! The web viewer at `/`: static HTML, JS and CSS compiled into the binary (no CDN, works
//! offline), talking to the `/v1/` API.

use crate::state::AppState;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

pub const INDEX_HTML: &str = include_str!("../static/index.html");
pub const VIEWER_JS: &str = include_str!("../static/viewer.js");
pub const VIEWER_CSS: &str = include_str!("../static/viewer.css");

/// `/`, `/viewer.js`, `/viewer.css`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    INDEX_HTML,
                )
                    .into_response()
            }),
        )
        .route(
            "/viewer.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    VIEWER_JS,
                )
                    .into_response()
            }),
        )
        .route(
            "/viewer.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    VIEWER_CSS,
                )
                    .into_response()
            }),
        )
}
