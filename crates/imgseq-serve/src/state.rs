//! What every handler sees: the served models behind their queues ([`AppState`]), the
//! settings and the metrics; choosing the model a request names.

use crate::config::ServeConfig;
use crate::http::ApiError;
use crate::metrics::Metrics;
use crate::models::{self, Kind, ModelInfo};
use crate::queue::{BatchRule, Queue};
use axum::http::StatusCode;
use imgseq_core::input::InputSpec;
use imgseq_core::{Error, Result};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A served model: what clients may know of it, how its input is prepared, its queue.
pub struct Served {
    pub info: ModelInfo,
    /// The VQ's input rule (decoded images are cropped to it); `None`: the model takes the
    /// decoded image as it is (the ViT's preprocessing is its tensor step).
    pub input: Option<InputSpec>,
    pub queue: Queue,
}

/// Everything a handler sees.
pub struct AppState {
    pub cfg: ServeConfig,
    pub models: Vec<Arc<Served>>,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// Loads the models of `cfg` (the shipped defaults when it names none) and starts their
    /// workers; the handles end once the state is dropped.
    pub fn load(cfg: ServeConfig) -> Result<(Self, Vec<JoinHandle<()>>)> {
        cfg.validate()?;
        let metrics = Arc::new(Metrics::default());
        let rule = BatchRule {
            max_batch: cfg.max_batch,
            wait: cfg.batch_wait,
        };
        let mut served = Vec::new();
        let mut handles = Vec::new();
        for spec in models::resolve_specs(&cfg.models)? {
            let (engine, info) = models::load(&spec, cfg.vq_size).map_err(|e| {
                Error::invalid(format!(
                    "model {} ({}): {e}",
                    spec.name,
                    spec.path.display()
                ))
            })?;
            let input = match &engine {
                models::Engine::Vq(t) => Some(imgseq_core::tokenizer::Tokenizer::input(t)),
                _ => None,
            };
            let (queue, h) = Queue::start(
                &spec.name,
                engine,
                cfg.queue_capacity,
                rule,
                metrics.clone(),
            )?;
            handles.push(h);
            served.push(Arc::new(Served { info, input, queue }));
        }
        Ok((
            Self {
                cfg,
                models: served,
                metrics,
            },
            handles,
        ))
    }

    /// The model `name`, or the first of `kind` when no name is given; 404 when there is no
    /// such model, 400 when it is of another kind.
    pub fn model(
        &self,
        name: Option<&str>,
        kind: Kind,
    ) -> std::result::Result<Arc<Served>, ApiError> {
        let kind_name = serde_json::to_value(kind)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let found = match name {
            Some(n) => self.models.iter().find(|m| m.info.name == n),
            None => self.models.iter().find(|m| m.info.kind == kind),
        };
        let Some(m) = found else {
            let names: Vec<&str> = self.models.iter().map(|m| m.info.name.as_str()).collect();
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                match name {
                    Some(n) => format!("no model named {n:?} (served: {})", names.join(", ")),
                    None => format!(
                        "no {kind_name} model is served (served: {})",
                        names.join(", ")
                    ),
                },
            ));
        };
        if m.info.kind != kind {
            return Err(ApiError::bad(format!(
                "model {} is a {:?} model; this endpoint needs a {kind_name} model",
                m.info.name, m.info.kind
            )));
        }
        Ok(m.clone())
    }
}
