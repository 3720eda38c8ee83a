//! What a server is started with: address, models, auth and every bound (batch, queue,
//! deadline, body, pixels, connections), with the defaults `imgseq serve` uses.

use imgseq_core::{Error, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One model to load: the name requests use and where its files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub name: String,
    pub path: PathBuf,
}

impl ModelSpec {
    /// `NAME=PATH` (a name of letters, digits, `-`, `_` and `.`).
    pub fn parse(s: &str) -> Result<Self> {
        let Some((name, path)) = s.split_once('=') else {
            return Err(Error::setting("model", s, "must be NAME=PATH"));
        };
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !ok || path.is_empty() {
            return Err(Error::setting(
                "model",
                s,
                "must be NAME=PATH with a name of letters, digits, '-', '_' or '.' (at most 64)",
            ));
        }
        Ok(Self {
            name: name.to_string(),
            path: PathBuf::from(path),
        })
    }
}

/// The server's settings. [`ServeConfig::default`] are `imgseq serve`'s defaults.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen (127.0.0.1:8080 unless another address is asked for).
    pub addr: SocketAddr,
    /// Models to load; empty: the shipped VQGAN (`vqgan`), ViT (`vit`) and GPT (`gpt`).
    pub models: Vec<ModelSpec>,
    /// When set, every `/v1/` and `/metrics` request needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Most images one batch carries (any model).
    pub max_batch: usize,
    /// Per model (by name): most pixels (images × height × width of the model's input) one
    /// batch carries; models not named get their family's default
    /// ([`crate::models::default_batch_pixels`]). A bound below one image's pixels runs
    /// every request alone.
    pub batch_pixels: Vec<(String, u64)>,
    /// How long the first request of a batch waits for others (0: a batch is what already
    /// waits; under load requests queue up while a batch runs, so batches form anyway).
    pub batch_wait: Duration,
    /// Requests waiting per model; beyond it, 503 with `Retry-After`.
    pub queue_capacity: usize,
    /// A request not answered within this is answered 504.
    pub deadline: Duration,
    /// A request body not received within this is answered 408.
    pub body_timeout: Duration,
    /// Request headers not received within this close the connection.
    pub header_timeout: Duration,
    /// An answer the client reads none of for this long closes the connection (clients that
    /// pipeline requests and never read would otherwise hold their connection slots).
    pub write_timeout: Duration,
    /// Largest request body (413 beyond).
    pub max_body_bytes: usize,
    /// Largest image (width × height, read from the header before decoding).
    pub max_pixels: u64,
    /// Open connections; one more is answered 429 and closed.
    pub max_connections: usize,
    /// Most images one GPT sample request asks for.
    pub max_samples: usize,
    /// Input side of VQ models (default: 384 for colour models, the training resolution for
    /// gray ones, as `imgseq vq encode`).
    pub vq_size: Option<u32>,
    /// Adds `POST /v1/_test?action=panic|sleep&ms=N` (work that panics or holds the worker):
    /// for tests of panic isolation, full queues and deadlines.
    /// Built only with the `test-hooks` feature (the crate's own tests): not in the binary
    /// users run.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub test_routes: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            models: Vec::new(),
            token: None,
            max_batch: 256,
            batch_pixels: Vec::new(),
            batch_wait: Duration::ZERO,
            queue_capacity: 64,
            deadline: Duration::from_secs(60),
            body_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_body_bytes: 16 << 20,
            max_pixels: 40_000_000,
            max_connections: 64,
            max_samples: 16,
            vq_size: None,
            #[cfg(feature = "test-hooks")]
            test_routes: false,
        }
    }
}

impl ServeConfig {
    /// Refuses bounds that cannot work (zero sizes, zero times).
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("max_batch", self.max_batch),
            ("queue_capacity", self.queue_capacity),
            ("max_body_bytes", self.max_body_bytes),
            ("max_connections", self.max_connections),
            ("max_samples", self.max_samples),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(Error::setting(name, v, "must be positive"));
            }
        }
        if self.max_batch > 256 {
            return Err(Error::setting(
                "max_batch",
                self.max_batch,
                "must be at most 256",
            ));
        }
        if self.max_pixels == 0 {
            return Err(Error::setting("max_pixels", 0, "must be positive"));
        }
        for (name, d) in [
            ("deadline", self.deadline),
            ("body_timeout", self.body_timeout),
            ("header_timeout", self.header_timeout),
            ("write_timeout", self.write_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::setting(name, "0", "must be positive"));
            }
        }
        if let Some(t) = &self.token {
            if t.is_empty() || !t.chars().all(|c| c.is_ascii_graphic()) {
                return Err(Error::setting(
                    "token",
                    "(hidden)",
                    "must be printable ASCII without spaces",
                ));
            }
        }
        for (name, px) in &self.batch_pixels {
            if *px == 0 {
                return Err(Error::setting(
                    "batch_pixels",
                    format!("{name}=0"),
                    "must be positive",
                ));
            }
        }
        let mut names: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::setting("model", w[0], "is named twice"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_spec_needs_name_and_path() {
        let m = ModelSpec::parse("vq=weights/vqgan").unwrap();
        assert_eq!(
            (m.name.as_str(), m.path),
            ("vq", PathBuf::from("weights/vqgan"))
        );
        for bad in ["vq", "=x", "vq=", "a b=x", "v/q=x"] {
            assert!(ModelSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_bounds_and_duplicate_names_are_refused() {
        assert!(ServeConfig::default().validate().is_ok());
        let c = ServeConfig {
            queue_capacity: 0,
            ..ServeConfig::default()
        };
        assert!(c.validate().is_err());
        let c = ServeConfig {
            deadline: Duration::ZERO,
            ..ServeConfig::default()
        };
        assert!(c.validate().is_err());
        let c = ServeConfig {
            models: vec![
                ModelSpec::parse("a=x").unwrap(),
                ModelSpec::parse("a=y").unwrap(),
            ],
            ..ServeConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
