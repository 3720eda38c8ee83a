//! `imgseq serve`: flags → [`imgseq_serve::ServeConfig`]; the server is `imgseq_serve`'s.

use anyhow::{bail, Result};
use clap::Args;
use imgseq_serve::{ModelSpec, ServeConfig};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// A model to serve as NAME=PATH (a VQ, ViT or GPT folder or weights file); repeatable.
    /// Default: the shipped VQGAN (vqgan), ViT (vit) and GPT (gpt).
    #[arg(long = "model", value_name = "NAME=PATH")]
    models: Vec<String>,
    /// Address to listen on; another host than 127.0.0.1 must be asked for.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Require `Authorization: Bearer TOKEN` on /v1/ and /metrics (default: from
    /// $IMGSEQ_SERVE_TOKEN when set, else no token).
    #[arg(long)]
    token: Option<String>,
    /// Most images per batch, any model (1: no batching).
    #[arg(long, default_value_t = 256)]
    max_batch: usize,
    /// A model's batch bound in pixels of its input (images x height x width), as
    /// NAME=PIXELS or NAME=WxHxB (e.g. vqgan=256x256x2); repeatable. Default: VQ models
    /// 256x256 (a 256² or larger input runs alone), ViT models 256 images. /healthz and
    /// /metrics show each model's bound.
    #[arg(long = "batch-pixels", value_name = "NAME=PIXELS")]
    batch_pixels: Vec<String>,
    /// Milliseconds the first request of a batch waits for others (0: a batch is the
    /// requests already waiting, which under load is many).
    #[arg(long, default_value_t = 0)]
    batch_wait_ms: u64,
    /// Requests waiting per model before answering 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Seconds within which a request is answered (else 504).
    #[arg(long, default_value_t = 60.0)]
    deadline: f64,
    /// Seconds within which a request body must arrive (else 408).
    #[arg(long, default_value_t = 10.0)]
    body_timeout: f64,
    /// Seconds an answer may wait for the client to read any of it (else the connection is
    /// closed: clients that never read their answers do not hold connection slots).
    #[arg(long, default_value_t = 10.0)]
    write_timeout: f64,
    /// Largest request body in MiB (else 413).
    #[arg(long, default_value_t = 16)]
    max_body_mib: usize,
    /// Largest image in megapixels, read from its header before decoding (else 413).
    #[arg(long, default_value_t = 40.0)]
    max_megapixels: f64,
    /// Open connections (one more is answered 429).
    #[arg(long, default_value_t = 64)]
    max_connections: usize,
    /// Input side of VQ models in pixels (default: 384 for colour models, the training
    /// resolution for gray ones, as `imgseq vq encode`).
    #[arg(long)]
    vq_size: Option<u32>,
}

fn seconds(flag: &str, s: f64) -> Result<Duration> {
    if !(s > 0.0 && s <= 86_400.0) {
        bail!("--{flag} {s} must be more than 0 and at most 86400 seconds");
    }
    Ok(Duration::from_secs_f64(s))
}

/// `NAME=PIXELS` or `NAME=WxHxB` (a product of positive integers).
fn batch_pixels(s: &str) -> Result<(String, u64)> {
    let Some((name, v)) = s.split_once('=') else {
        bail!("--batch-pixels {s:?} must be NAME=PIXELS or NAME=WxHxB");
    };
    let mut px: u64 = 1;
    for f in v.split(['x', 'X']) {
        match f.trim().parse::<u64>() {
            Ok(n) if n > 0 => px = px.saturating_mul(n),
            _ => bail!("--batch-pixels {s:?}: {v:?} must be a positive integer or WxHxB"),
        }
    }
    Ok((name.to_string(), px))
}

pub fn run(a: ServeArgs) -> Result<()> {
    if !(a.max_megapixels > 0.0 && a.max_megapixels <= 1_000.0) {
        bail!("--max-megapixels {} must be in (0, 1000]", a.max_megapixels);
    }
    if a.max_body_mib == 0 || a.max_body_mib > 1024 {
        bail!(
            "--max-body-mib {} must be between 1 and 1024",
            a.max_body_mib
        );
    }
    let token = a
        .token
        .or_else(|| std::env::var("IMGSEQ_SERVE_TOKEN").ok())
        .filter(|t| !t.is_empty());
    let cfg = ServeConfig {
        addr: a.addr,
        models: a
            .models
            .iter()
            .map(|m| ModelSpec::parse(m))
            .collect::<imgseq_core::Result<_>>()?,
        token,
        max_batch: a.max_batch,
        batch_pixels: a
            .batch_pixels
            .iter()
            .map(|b| batch_pixels(b))
            .collect::<Result<_>>()?,
        batch_wait: Duration::from_millis(a.batch_wait_ms),
        queue_capacity: a.queue,
        deadline: seconds("deadline", a.deadline)?,
        body_timeout: seconds("body-timeout", a.body_timeout)?,
        write_timeout: seconds("write-timeout", a.write_timeout)?,
        max_body_bytes: a.max_body_mib << 20,
        max_pixels: (a.max_megapixels * 1e6) as u64,
        max_connections: a.max_connections,
        vq_size: a.vq_size,
        ..ServeConfig::default()
    };
    let auth = if cfg.token.is_some() {
        " (bearer token required)"
    } else {
        ""
    };
    imgseq_serve::run(cfg, |addr| {
        eprintln!("imgseq serve: listening on http://{addr}/{auth} (Ctrl-C or SIGTERM stops)");
    })?;
    eprintln!("imgseq serve: stopped");
    Ok(())
}
