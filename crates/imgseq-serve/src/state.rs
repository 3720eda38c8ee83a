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
    /// How its worker forms batches, and the pixels of one input image.
    pub rule: BatchRule,
    pub input_pixels: u64,
    /// A ViT's position-similarity matrix (computed once, at load).
    pub positions: Option<Positions>,
}

/// The cosine similarity of every patch position's learned vector with every other's.
#[derive(Debug, Clone)]
pub struct Positions {
    /// Patches per side, and patches (`side²`; the CLS slot excluded).
    pub side: usize,
    pub n: usize,
    /// (n, n) row-major.
    pub similarity: Vec<f32>,
}

impl Positions {
    /// The position similarity of `m` (by `imgseq_vit::position_plot`'s rule).
    pub fn of(m: &imgseq_vit::inference::Classifier) -> Result<Self> {
        let pos = m.model.vit.embeddings.patch_positions()?; // (n, hidden)
        let (n, d) = pos.dims2()?;
        let flat: Vec<f32> = pos
            .to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1()?;
        Ok(Self {
            side: (n as f64).sqrt().round() as usize,
            n,
            similarity: imgseq_vit::position_plot::similarity_maps(&flat, n, d),
        })
    }
}

impl Served {
    /// The batch bound as `/healthz` shows it.
    pub fn batching(&self) -> serde_json::Value {
        serde_json::json!({
            "max_batch_pixels": self.rule.max_pixels,
            "input_pixels": self.input_pixels,
            "max_batch_images": self.rule.max_images(self.input_pixels),
        })
    }
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
        let specs = models::resolve_specs(&cfg.models)?;
        if let Some((name, _)) = cfg
            .batch_pixels
            .iter()
            .find(|(n, _)| !specs.iter().any(|s| &s.name == n))
        {
            return Err(Error::setting(
                "batch_pixels",
                name,
                "names no served model",
            ));
        }
        let mut served = Vec::new();
        let mut handles = Vec::new();
        for spec in specs {
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
            let input_pixels = engine.input_pixels();
            let positions = match &engine {
                models::Engine::Vit(m) => Some(Positions::of(m)?),
                _ => None,
            };
            let max_pixels = cfg
                .batch_pixels
                .iter()
                .rev()
                .find(|(n, _)| *n == spec.name)
                .map(|&(_, px)| px)
                .unwrap_or_else(|| models::default_batch_pixels(info.kind, input_pixels));
            let rule = BatchRule {
                max_batch: cfg.max_batch,
                max_pixels,
                wait: cfg.batch_wait,
            };
            let (queue, h) = Queue::start(
                &spec.name,
                engine,
                cfg.queue_capacity,
                rule,
                metrics.clone(),
            )?;
            handles.push(h);
            served.push(Arc::new(Served {
                info,
                input,
                queue,
                rule,
                input_pixels,
                positions,
            }));
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
