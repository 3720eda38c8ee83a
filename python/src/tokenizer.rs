//! `imgseq.Tokenizer.from_pretrained(path)`: any family the loader (`imgseq_models::open`)
//! reads, told by its weights — a VQ model (taming, LlamaGen, diffusers `VQModel`, Janus, IBQ), an Open-MAGVIT2
//! (LFQ) checkpoint (integer token grids in the codebook's dtype, uint16 or int32, as shards
//! store them) or an `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs: float32 latents or patch
//! sequences). NumPy in and out, equal to `imgseq vq encode` / `imgseq vae encode` of the same
//! pictures.

use crate::to_py;
use image::RgbImage;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::{Embeddings, Encoded, Latents, OutputKind, Tokenizer as _};
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
    /// Its description as JSON (weights hashed once, at open).
    description: String,
}

impl Tokenizer {
    fn spec(&self) -> InputSpec {
        self.inner.input()
    }

    fn is_discrete(&self) -> bool {
        self.inner.codebook_size().is_some()
    }

    /// Integer tokens (n, h, w) or (h, w) → pictures, every token checked against the
    /// codebook first.
    fn decode_tokens(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<RgbImage>> {
        let (data, shape) = crate::int_array(tokens, "tokens")?;
        let (n, h, w) = match shape[..] {
            [n, h, w] => (n, h, w),
            [h, w] => (1, h, w),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "tokens must have shape (n, h, w) or (h, w), got {shape:?}"
                )))
            }
        };
        let grid = TokenGrid {
            n,
            h,
            w,
            batched: true,
            data,
        };
        let n_codes = self.inner.codebook_size().unwrap_or(0);
        grid.check_codebook("tokens", n_codes).map_err(to_py)?;
        py.detach(|| self.inner.decode(&grid)).map_err(to_py)
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
    #[pyo3(signature = (path, config=None, preset=None, size=None, patch=None, sample_seed=None, tile=None, raw=false, precision="auto", bf16_encoder=false))]
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
        };
        let (inner, description) = py
            .detach(|| -> imgseq_core::Result<(Opened, String)> {
                let t = imgseq_models::open(&path, &o)?;
                let d = t.describe_with_weights()?;
                let json = serde_json::to_string(&d)
                    .map_err(|e| imgseq_core::Error::invalid(e.to_string()))?;
                Ok((t, json))
            })
            .map_err(to_py)?;
        Ok(Self { inner, description })
    }

    /// The family as users see it (`taming VQGAN`, `AutoencoderKL`, ...).
    #[getter]
    fn family(&self) -> String {
        self.inner.label()
    }

    /// `"tokens"` (integer codes) or `"latents"` (float32).
    #[getter]
    fn kind(&self) -> &'static str {
        if self.is_discrete() {
            "tokens"
        } else {
            "latents"
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
    #[getter]
    fn description_json(&self) -> &str {
        &self.description
    }

    /// Images (n, h, w, 3) or (h, w, 3) uint8 → discrete tokenizers: (n, gh, gw) codes,
    /// uint16 (int32 past 65,536 codes); AutoencoderKL: (n, C, h, w) float32 scaled latents,
    /// or (n, N, p²·C) with `patch`.
    #[pyo3(signature = (images, upscale=false))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        upscale: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data, n, h, w) = crate::rgb_batch(images)?;
        if n == 0 {
            return Err(PyValueError::new_err("images: no image"));
        }
        let spec = self.spec();
        let e = py
            .detach(|| -> imgseq_core::Result<Encoded> {
                let plane = h * w * 3;
                let pics = (0..n)
                    .map(|i| {
                        spec.from_pixels(i, &data[i * plane..(i + 1) * plane], (h, w, 3), upscale)
                    })
                    .collect::<imgseq_core::Result<Vec<RgbImage>>>()?;
                self.inner.check_batch(pics.len())?;
                self.inner.encode_pictures(&pics)
            })
            .map_err(to_py)?;
        Ok(match e {
            Encoded::Tokens(grid) => crate::token_array(py, &grid, self.n_codes().unwrap_or(0)),
            Encoded::Embeddings(Embeddings {
                n,
                tokens,
                dim,
                data,
            }) => floats(py, &[n, tokens, dim], data),
            Encoded::Latents(Latents { n, shape, data }) => {
                let full: Vec<usize> = std::iter::once(n).chain(shape).collect();
                floats(py, &full, data)
            }
        })
    }

    /// What `encode` gives (integer tokens, or float32 latents) → uint8 images (n, H, W, 3).
    fn decode<'py>(
        &self,
        py: Python<'py>,
        latents: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let imgs = if self.is_discrete() {
            self.decode_tokens(py, latents)?
        } else {
            let e = self.continuous(latents)?;
            py.detach(|| self.inner.decode_encoded(&e)).map_err(to_py)?
        };
        Ok(pictures(py, imgs))
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
