//! `imgseq serve`: the imgseq models as an HTTP service with a web viewer.
//!
//! * [`config`]: the server's settings and bounds ([`ServeConfig`]).
//! * [`models`]: loading `NAME=PATH` models (VQ, ViT, GPT) and the shipped defaults.
//! * [`queue`]: the bounded queue per model and its batching worker thread;
//!   [`work`]: the model work of each request kind, batched.
//! * [`handlers`]: the `/v1/` endpoints; [`http`]: errors, body limits, `.npy`/PNG bodies.
//! * [`state`]: the served models and settings every handler sees; [`stream`]: GPT sampling
//!   streamed row by row.
//! * [`server`]: router, auth, metrics layer, accept loop (connection limit, drain);
//!   [`metrics`]: the Prometheus text; [`openapi`]: the API description; [`viewer`]: the
//!   embedded web viewer.

pub mod config;
pub mod conn;
pub mod handlers;
pub mod http;
pub mod metrics;
pub mod models;
pub mod openapi;
pub mod queue;
pub mod server;
pub mod state;
pub mod stream;
pub mod viewer;
pub mod work;

pub use config::{ModelSpec, ServeConfig};

use imgseq_core::{Error, Result};
use std::sync::Arc;

/// Loads the models of `cfg`, listens on `cfg.addr` and serves until SIGTERM or Ctrl-C, then
/// answers the requests in flight and returns. `ready` is called with the bound address
/// (a port of 0 picks a free one).
pub fn run(cfg: ServeConfig, ready: impl FnOnce(std::net::SocketAddr)) -> Result<()> {
    let (state, workers) = state::AppState::load(cfg)?;
    let state = Arc::new(state);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(state.cfg.max_connections.clamp(2, 64))
        .enable_all()
        .build()
        .map_err(|e| Error::invalid(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(state.cfg.addr)
            .await
            .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", state.cfg.addr)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", state.cfg.addr)))?;
        ready(addr);
        server::serve(listener, state.clone(), server::shutdown_signal()).await
    })?;
    drop(rt);
    // The last handle of the state holds the queues: dropping it ends the workers.
    drop(state);
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}
