//! The server: the router with its auth,
//! metrics and panic layers, and the accept loop (connection limit, header timeout, drain on
//! SIGTERM / Ctrl-C).

use crate::conn::WriteBound;
use crate::handlers;
use crate::http::{error_body, ApiError, CatchPanic};
use crate::models::ModelInfo;
pub use crate::state::{AppState, Served};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use imgseq_core::Result;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The routes metrics are kept for by name (others count as `other`).
pub const ROUTES: &[&str] = &[
    "/",
    "/viewer.js",
    "/viewer.css",
    "/healthz",
    "/metrics",
    "/v1/models",
    "/v1/openapi.json",
    "/v1/tokenize",
    "/v1/detokenize",
    "/v1/roundtrip",
    "/v1/embed",
    "/v1/classify",
    "/v1/sample",
    "/v1/sample/stream",
    "/v1/models/{name}/positions",
    #[cfg(feature = "test-hooks")]
    "/v1/_test",
];

/// The router of a loaded state.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/tokenize", post(handlers::tokenize))
        .route("/v1/detokenize", post(handlers::detokenize))
        .route("/v1/roundtrip", post(handlers::roundtrip))
        .route("/v1/embed", post(handlers::embed))
        .route("/v1/classify", post(handlers::classify))
        .route("/v1/sample", post(handlers::sample))
        .route("/v1/sample/stream", post(handlers::sample_stream))
        .route("/v1/models/{name}/positions", get(handlers::positions))
        .route("/metrics", get(metrics));
    #[cfg(feature = "test-hooks")]
    let v1 = if state.cfg.test_routes {
        v1.route("/v1/_test", post(handlers::test_task))
    } else {
        v1
    };
    let v1 = v1.layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(crate::viewer::routes())
        .merge(v1)
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such endpoint (see /v1/openapi.json)",
    )
}

async fn not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed here (see /v1/openapi.json)",
    )
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let models: Vec<&str> = state.models.iter().map(|m| m.info.name.as_str()).collect();
    let batching: serde_json::Map<String, serde_json::Value> = state
        .models
        .iter()
        .map(|m| (m.info.name.clone(), m.batching()))
        .collect();
    Json(serde_json::json!({"status": "ok", "models": models, "batching": batching}))
        .into_response()
}

async fn list_models(State(state): State<Arc<AppState>>) -> Response {
    let infos: Vec<&ModelInfo> = state.models.iter().map(|m| &m.info).collect();
    Json(serde_json::json!({ "models": infos })).into_response()
}

async fn openapi() -> Response {
    Json(crate::openapi::spec()).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let depths: Vec<crate::metrics::ModelGauges> = state
        .models
        .iter()
        .map(|m| crate::metrics::ModelGauges {
            model: m.info.name.clone(),
            queue_depth: m.queue.depth(),
            max_batch_pixels: m.rule.max_pixels,
            max_batch_images: m.rule.max_images(m.input_pixels),
        })
        .collect();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&depths),
    )
        .into_response()
}

/// Bearer-token check (when a token is set): 401 otherwise.
async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.cfg.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::http::bearer_token);
        if !given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
            let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")
                .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Counts each request by route and status, times it, and answers a handler's panic 500.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let route = ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .or_else(|| {
            let rest = path
                .strip_prefix("/v1/models/")?
                .strip_suffix("/positions")?;
            (!rest.contains('/')).then_some("/v1/models/{name}/positions")
        })
        .unwrap_or("other");
    let t0 = Instant::now();
    let r = CatchPanic(Box::pin(next.run(req))).await;
    state
        .metrics
        .observe_request(route, r.status().as_u16(), t0.elapsed().as_secs_f64());
    r
}

/// Serves `state` on `listener` until `shutdown` completes, then lets in-flight requests
/// finish (new connections are no longer accepted).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let app = router(state.clone());
    let limit = Arc::new(Semaphore::new(state.cfg.max_connections));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                // Out of file descriptors and the like: wait, do not spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            state.metrics.refused_connection();
            tokio::spawn(refuse(stream, state.cfg.max_connections));
            continue;
        };
        let svc = TowerToHyperService::new(app.clone());
        // A client that half-closes after its request (`nc -N`, some proxies) is answered;
        // one that stops reading its answers loses the connection after `write_timeout`.
        let io = TokioIo::new(WriteBound::new(stream, state.cfg.write_timeout));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(state.cfg.header_timeout)
            .half_close(true)
            .serve_connection(io, svc);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection over the limit with a 429 and closes it.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    let body = error_body(&format!(
        "too many connections (the limit is {max}); try again shortly"
    ));
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        // Read what the client sent first (a little, briefly): closing a socket with unread
        // data resets it, and the client would see no answer.
        let mut buf = [0u8; 8192];
        let _ = tokio::time::timeout(std::time::Duration::from_millis(200), stream.read(&mut buf))
            .await;
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
