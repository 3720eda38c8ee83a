//! `imgseq.Tokenizer.from_pretrained(path)`: any family the loader (`imgseq_models::open`)
//! reads, told by its weights — a VQ model (taming, LlamaGen, diffusers `VQModel`, Janus, IBQ), an Open-MAGVIT2
//! (LFQ) checkpoint (integer token grids in the codebook's dtype, uint16 or int32, as shards
//! store them), an `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs: float32 latents or patch
//! sequences) or a vision tower (float32 (tokens, dim) embeddings of the chosen layer). NumPy
//! in and out, equal to `imgseq encode` / `imgseq vae encode` of the same pictures.

use crate::to_py;
use image::RgbImage;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::{
    check_batch_size, decode_batches, Embeddings, Encoded, Latents, OutputKind, Tokenizer as _,
};
use imgseq_core::tokens::TokenGrid;
use imgseq_models::{OpenOptions, Opened};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

/// An image tokenizer of any family, opened by the loader (`imgseq_models::open`).
#[pyclass(module = "imgseq._imgseq", frozen)]
pub struct Tokenizer {
    inner: Opened,
    /// Its description as JSON (made, and the weights hashed, when first asked for).
    description: std::sync::OnceLock<String>,
}

impl Tokenizer {
    fn spec(&self) -> InputSpec {
        self.inner.input()
    }

    fn is_discrete(&self) -> bool {
        self.inner.codebook_size().is_some()
    }

    /// Integer tokens (n, h, w) or (h, w) → pictures, every token checked against the
    /// codebook first, `batch` images per decoder pass.
    fn decode_tokens(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        batch: usize,
    ) -> PyResult<Vec<RgbImage>> {
        let (data, shape) = crate::int_array(tokens, "tokens")?;
        let (n, h, w, batched) = match shape[..] {
            [n, h, w] => (n, h, w, true),
            [h, w] => (1, h, w, false),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "tokens must have shape (n, h, w) or (h, w), got {shape:?}"
                )))
            }
        };
        if h == 0 || w == 0 {
            return Err(PyValueError::new_err(format!(
                "tokens: the grid is empty (shape {shape:?})"
            )));
        }
        let grid = TokenGrid {
            n,
            h,
            w,
            batched,
            data,
        };
        let n_codes = self.inner.codebook_size().unwrap_or(0);
        grid.check_codebook("tokens", n_codes).map_err(to_py)?;
        py.detach(|| decode_batches(&self.inner, &grid, batch, |_| ()))
            .map_err(to_py)
    }

    /// Float32 latents (n, ...) or one image's (...) of the tokenizer's output shape → what
    /// [`Tokenizer::encode`] gave.
    fn continuous(&self, latents: &Bound<'_, PyAny>) -> PyResult<Encoded> {
        let a = latents
            .cast::<PyArrayDyn<f32>>()
            .map_err(|_| PyTypeError::new_err("latents must be a float32 numpy array"))?;
        let ro = a.readonly();
        let view = ro.as_array();
        let mut shape = view.shape().to_vec();
        let d = self.inner.describe();
        if shape.len() == d.output.shape.len() {
            shape.insert(0, 1);
        }
        if shape.len() != d.output.shape.len() + 1 {
            return Err(PyValueError::new_err(format!(
                "latents: shape {:?} is not what encode gives ((n, ...) of {:?})",
                view.shape(),
                d.output.shape
            )));
        }
        let data: Vec<f32> = view.as_standard_layout().iter().copied().collect();
        let (n, item) = (shape[0], shape[1..].to_vec());
        Ok(match (d.output.kind, &item[..]) {
            (OutputKind::Embeddings, &[tokens, dim]) => Encoded::Embeddings(Embeddings {
                n,
                tokens,
                dim,
                data,
            }),
            _ => Encoded::Latents(Latents {
                n,
                shape: item,
                data,
            }),
        })
    }
}

#[pymethods]
impl Tokenizer {
    /// Opens the model at `path` (a file or a diffusers / save_pretrained folder).
    #[staticmethod]
    #[pyo3(signature = (path, config=None, preset=None, size=None, patch=None, sample_seed=None, tile=None, raw=false, precision="auto", bf16_encoder=false, layer=None, patches_only=false, pooled=false))]
    #[allow(clippy::too_many_arguments)]
    fn from_pretrained(
        py: Python<'_>,
        path: PathBuf,
        config: Option<PathBuf>,
        preset: Option<String>,
        size: Option<u32>,
        patch: Option<usize>,
        sample_seed: Option<u64>,
        tile: Option<usize>,
        raw: bool,
        precision: &str,
        bf16_encoder: bool,
        layer: Option<isize>,
        patches_only: bool,
        pooled: bool,
    ) -> PyResult<Self> {
        let o = OpenOptions {
            config,
            size,
            precision: precision
                .parse()
                .map_err(|e: String| PyValueError::new_err(format!("precision: {e}")))?,
            bf16_encoder,
            raw,
            preset,
            patch,
            sample_seed,
            tile,
            layer,
            patches_only,
            pooled,
        };
        let inner = py
            .detach(|| imgseq_models::open(&path, &o))
            .map_err(to_py)?;
        Ok(Self {
            inner,
            description: std::sync::OnceLock::new(),
        })
    }

    /// The family as users see it (`taming VQGAN`, `AutoencoderKL`, ...).
    #[getter]
    fn family(&self) -> String {
        self.inner.label()
    }

    /// `"tokens"` (integer codes), `"latents"` (float32 latents of a continuous-latent
    /// model) or `"embeddings"` (float32 (tokens, dim) of an embeddings model).
    #[getter]
    fn kind(&self) -> &'static str {
        let d = self.inner.describe();
        match (self.is_discrete(), d.latent.is_none(), d.output.kind) {
            (true, _, _) => "tokens",
            (false, true, OutputKind::Embeddings) => "embeddings",
            _ => "latents",
        }
    }

    #[getter]
    fn size(&self) -> u32 {
        self.spec().size
    }

    /// The codebook size of a discrete tokenizer; `None` for a continuous one.
    #[getter]
    fn n_codes(&self) -> Option<usize> {
        self.inner.codebook_size()
    }

    /// The tokenizer's description (family, config, weights and their SHA-256, preprocessing,
    /// output, precision) as JSON text; `imgseq.Tokenizer.description` gives it as a dict.
    /// (The weights' SHA-256 is read when this is first asked for, not at open.)
    #[getter]
    fn description_json(&self, py: Python<'_>) -> PyResult<String> {
        if let Some(d) = self.description.get() {
            return Ok(d.clone());
        }
        let json = py
            .detach(|| -> imgseq_core::Result<String> {
                let d = self.inner.describe_with_weights()?;
                serde_json::to_string(&d).map_err(|e| imgseq_core::Error::invalid(e.to_string()))
            })
            .map_err(to_py)?;
        Ok(self.description.get_or_init(|| json).clone())
    }

    /// Images (n, h, w, 3) RGB, (n, h, w, 1) gray or one (h, w, 3) uint8 → discrete
    /// tokenizers: (n, gh, gw) int64 codes; AutoencoderKL:
    /// (n, C, h, w) float32 scaled latents, or (n, N, p²·C) with `patch`; `batch_size` images
    /// per forward pass (its memory checked first). An empty batch gives an empty array.
    #[pyo3(signature = (images, upscale=false, batch_size=8))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        upscale: bool,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data, (n, h, w, c)) = crate::picture_batch(images)?;
        check_batch_size(batch_size).map_err(to_py)?;
        self.inner
            .check_batch(batch_size.min(n).max(1))
            .map_err(to_py)?;
        let spec = self.spec();
        let item = self.inner.describe().output.shape;
        if n == 0 {
            return Ok(match self.n_codes() {
                Some(_) => {
                    let empty = TokenGrid {
                        n: 0,
                        h: item[0],
                        w: item.get(1).copied().unwrap_or(1),
                        batched: true,
                        data: Vec::new(),
                    };
                    crate::token_array(py, &empty)
                }
                None => floats(py, &[&[0][..], &item[..]].concat(), Vec::new()),
            });
        }
        let parts = py
            .detach(|| -> imgseq_core::Result<Vec<Encoded>> {
                // The one image → model input rule (the family's crop, the model's channels),
                // as `imgseq encode` applies it to files.
                let plane = h * w * c;
                let pics = (0..n)
                    .map(|i| {
                        spec.from_pixels(i, &data[i * plane..(i + 1) * plane], (h, w, c), upscale)
                    })
                    .collect::<imgseq_core::Result<Vec<RgbImage>>>()?;
                pics.chunks(batch_size)
                    .map(|chunk| self.inner.encode_pictures(chunk))
                    .collect()
            })
            .map_err(to_py)?;
        let mut parts = parts.into_iter();
        let mut all = parts
            .next()
            .ok_or_else(|| PyValueError::new_err("images: no batch encoded"))?;
        for p in parts {
            all.extend(p).map_err(to_py)?;
        }
        Ok(match all {
            Encoded::Tokens(mut g) => {
                g.batched = true;
                crate::token_array(py, &g)
            }
            e => {
                let shape: Vec<usize> = std::iter::once(n).chain(item).collect();
                floats(py, &shape, e.into_values().unwrap_or_default())
            }
        })
    }

    /// What `encode` gives (integer tokens of any integer dtype, or float32 latents) → uint8
    /// images (n, H, W, 3), `batch_size` images per decoder pass.
    #[pyo3(signature = (latents, batch_size=8))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        latents: &Bound<'py, PyAny>,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_batch_size(batch_size).map_err(to_py)?;
        let imgs = if self.is_discrete() {
            self.decode_tokens(py, latents, batch_size)?
        } else {
            let e = self.continuous(latents)?;
            py.detach(|| self.inner.decode_encoded(&e)).map_err(to_py)?
        };
        Ok(pictures(py, imgs))
    }

    /// The weights' source as given (a file or a folder).
    #[getter]
    fn weights(&self) -> PathBuf {
        self.inner.source.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(family={:?}, weights={:?}, size={})",
            self.family(),
            self.inner.source.display().to_string(),
            self.size()
        )
    }
}

/// Float32 values as an array of `shape`.
fn floats<'py>(py: Python<'py>, shape: &[usize], data: Vec<f32>) -> Bound<'py, PyAny> {
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .expect("shape matches")
        .into_pyarray(py)
        .into_any()
}

/// Pictures of one size as a uint8 (n, H, W, 3) array.
fn pictures(py: Python<'_>, imgs: Vec<RgbImage>) -> Bound<'_, PyAny> {
    let (n, hh, ww) = (
        imgs.len(),
        imgs.first().map_or(0, |i| i.height() as usize),
        imgs.first().map_or(0, |i| i.width() as usize),
    );
    let flat: Vec<u8> = imgs.into_iter().flat_map(|i| i.into_raw()).collect();
    ArrayD::from_shape_vec(IxDyn(&[n, hh, ww, 3]), flat)
        .expect("shape matches")
        .into_pyarray(py)
        .into_any()
}

/// Adds the class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tokenizer>()
}
