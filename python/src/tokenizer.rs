//! `imgseq.Tokenizer.from_pretrained(path)`: any family the Rust side reads, told by its
//! weights — a VQ model (taming, LlamaGen, diffusers `VQModel`, Janus, IBQ), an Open-MAGVIT2
//! (LFQ) checkpoint (integer token grids in the codebook's dtype, uint16 or int32, as shards
//! store them) or an `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs: float32 latents or patch
//! sequences). NumPy in and out, equal to `imgseq vq encode` / `imgseq vae encode` of the same
//! pictures.

use crate::to_py;
use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::Tokenizer as _;
use imgseq_core::tokens::TokenGrid;
use imgseq_lfq::{LfqTokenizer, WeightSet};
use imgseq_vqgan::kl::{self, patch, Draw, KlPreset, KlTokenizer};
use imgseq_vqgan::VqTokenizer;
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

/// Integer codes (VQ) or float32 latents (KL).
type Values = Result<Vec<i64>, Vec<f32>>;

enum Inner {
    Vq(VqTokenizer),
    Lfq(LfqTokenizer),
    Kl(KlTokenizer),
}

/// An image tokenizer of any family.
#[pyclass(module = "imgseq._imgseq", frozen)]
pub struct Tokenizer {
    inner: Inner,
    weights: PathBuf,
    patch: Option<usize>,
}

impl Tokenizer {
    fn spec(&self) -> InputSpec {
        self.discrete()
            .map_or_else(|| self.kl().expect("KL").input(), |t| t.input())
    }

    /// The discrete tokenizer (VQ families, LFQ), if it is one.
    fn discrete(&self) -> Option<&(dyn imgseq_core::tokenizer::Tokenizer + Sync)> {
        match &self.inner {
            Inner::Vq(t) => Some(t),
            Inner::Lfq(t) => Some(t),
            Inner::Kl(_) => None,
        }
    }

    fn kl(&self) -> Option<&KlTokenizer> {
        match &self.inner {
            Inner::Kl(t) => Some(t),
            _ => None,
        }
    }

    /// Integer tokens (n, h, w) or (h, w) → pictures, every token checked against the
    /// codebook first.
    fn decode_tokens(
        &self,
        py: Python<'_>,
        t: &(dyn imgseq_core::tokenizer::Tokenizer + Sync),
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<RgbImage>> {
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
        let n_codes = t.codebook_size().unwrap_or(0);
        grid.check_codebook("tokens", n_codes).map_err(to_py)?;
        py.detach(|| t.decode(&grid)).map_err(to_py)
    }
}

#[pymethods]
impl Tokenizer {
    /// Opens the model at `path` (a file or a diffusers / save_pretrained folder).
    #[staticmethod]
    #[pyo3(signature = (path, config=None, preset=None, size=None, patch=None, sample_seed=None, tile=None, raw=false))]
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
    ) -> PyResult<Self> {
        let preset = preset
            .as_deref()
            .map(KlPreset::from_name)
            .transpose()
            .map_err(to_py)?;
        let is_lfq = preset.is_none() && imgseq_lfq::is_lfq_checkpoint(&path);
        let is_kl =
            !is_lfq && (preset.is_some() || kl::is_kl_file(&path).map_err(to_py)?.is_some());
        if raw && !is_lfq {
            return Err(PyValueError::new_err(
                "raw: applies to Open-MAGVIT2 checkpoints (their raw weights instead of EMA)",
            ));
        }
        let inner = py
            .detach(|| -> imgseq_core::Result<Inner> {
                if is_lfq {
                    let config = config
                        .clone()
                        .or_else(|| imgseq_lfq::load::default_config_path(&path));
                    let which = if raw {
                        WeightSet::Raw
                    } else {
                        WeightSet::Default
                    };
                    let m = imgseq_lfq::load_model(&path, config.as_deref(), which)?;
                    Ok(Inner::Lfq(LfqTokenizer::new(m, size)?))
                } else if is_kl {
                    let m = kl::load_kl(&path, config.as_deref(), preset, &Device::Cpu)?;
                    let mut t = KlTokenizer::new(m, size.unwrap_or(256), patch.unwrap_or(1))?;
                    t.draw = sample_seed.map_or(Draw::Mean, Draw::Sample);
                    t.tile = tile;
                    Ok(Inner::Kl(t))
                } else {
                    let m = imgseq_vqgan::load_model(&path, config.as_deref(), &Device::Cpu)?;
                    Ok(Inner::Vq(VqTokenizer::new(m, size.unwrap_or(384))?))
                }
            })
            .map_err(to_py)?;
        if patch.is_some() && !matches!(inner, Inner::Kl(_)) {
            return Err(PyValueError::new_err(
                "patch: a VQ model's tokens are a grid of codes",
            ));
        }
        Ok(Self {
            inner,
            weights: path,
            patch,
        })
    }

    /// The family as users see it (`taming VQGAN`, `AutoencoderKL`, ...).
    #[getter]
    fn family(&self) -> String {
        self.discrete()
            .map_or_else(|| self.kl().expect("KL").label(), |t| t.label())
    }

    /// `"tokens"` (integer codes) or `"latents"` (float32).
    #[getter]
    fn kind(&self) -> &'static str {
        if self.kl().is_some() {
            "latents"
        } else {
            "tokens"
        }
    }

    #[getter]
    fn size(&self) -> u32 {
        self.spec().size
    }

    /// The codebook size of a discrete tokenizer; `None` for an AutoencoderKL.
    #[getter]
    fn n_codes(&self) -> Option<usize> {
        self.discrete().and_then(|t| t.codebook_size())
    }

    /// Images (n, h, w, 3) or (h, w, 3) uint8 → VQ and LFQ: (n, gh, gw) codes, uint16 (int32
    /// past 65,536 codes); AutoencoderKL: (n, C, h, w) float32 scaled latents, or (n, N, p²·C)
    /// with `patch`.
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
        let out = py
            .detach(|| -> imgseq_core::Result<(Vec<usize>, Values)> {
                let plane = h * w * 3;
                let pics = (0..n)
                    .map(|i| {
                        spec.from_pixels(i, &data[i * plane..(i + 1) * plane], (h, w, 3), upscale)
                    })
                    .collect::<imgseq_core::Result<Vec<RgbImage>>>()?;
                match (self.discrete(), &self.inner) {
                    (Some(t), _) => {
                        let g = t.encode_pictures(&pics)?.into_tokens()?;
                        Ok((vec![g.n, g.h, g.w], Ok(g.data)))
                    }
                    (None, Inner::Kl(t)) => {
                        let x = t.input_tensor(&pics)?;
                        let (n, _, h, w) = x.dims4()?;
                        t.model.check_input(n, h, w, t.tile)?;
                        let z = t.model.encode(&x, t.draw, t.tile)?;
                        let z = match self.patch {
                            Some(p) => patch::patchify(&z, p)?,
                            None => z,
                        };
                        Ok((z.dims().to_vec(), Err(z.flatten_all()?.to_vec1()?)))
                    }
                    (None, _) => unreachable!("a tokenizer is discrete or KL"),
                }
            })
            .map_err(to_py)?;
        let (shape, values) = out;
        Ok(match values {
            Ok(data) => {
                let grid = TokenGrid {
                    n: shape[0],
                    h: shape[1],
                    w: shape[2],
                    batched: true,
                    data,
                };
                crate::token_array(py, &grid, self.n_codes().unwrap_or(0))
            }
            Err(v) => ArrayD::from_shape_vec(IxDyn(&shape), v)
                .expect("shape matches")
                .into_pyarray(py)
                .into_any(),
        })
    }

    /// What `encode` gives (integer tokens, or AutoencoderKL latents) → uint8 images
    /// (n, H, W, 3).
    fn decode<'py>(
        &self,
        py: Python<'py>,
        latents: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = match (self.discrete(), &self.inner) {
            (Some(d), _) => {
                let imgs = self.decode_tokens(py, d, latents)?;
                return Ok(pictures(py, imgs));
            }
            (None, Inner::Kl(t)) => t,
            (None, _) => unreachable!("a tokenizer is discrete or KL"),
        };
        let a = latents
            .cast::<PyArrayDyn<f32>>()
            .map_err(|_| PyTypeError::new_err("latents must be a float32 numpy array"))?;
        let ro = a.readonly();
        let view = ro.as_array();
        let shape = view.shape().to_vec();
        let data: Vec<f32> = view.as_standard_layout().iter().copied().collect();
        let c = t.model.config().latent_channels();
        let imgs = py
            .detach(|| -> imgseq_core::Result<Vec<RgbImage>> {
                let z = match (self.patch, &shape[..]) {
                    (None, [n, ch, h, w]) if *ch == c => {
                        Tensor::from_vec(data, (*n, c, *h, *w), &Device::Cpu)?
                    }
                    (Some(p), [n, tokens, dim]) if *dim == c * p * p => {
                        let g = t.grid();
                        let s = Tensor::from_vec(data, (*n, *tokens, *dim), &Device::Cpu)?;
                        patch::unpatchify(&s, c, g, g, p)?
                    }
                    _ => {
                        return Err(imgseq_core::Error::invalid(format!(
                            "latents: shape {shape:?} is not what encode gives ({})",
                            if self.patch.is_some() {
                                "(n, N, p²·C)"
                            } else {
                                "(n, C, h, w)"
                            }
                        )))
                    }
                };
                let x = t.model.decode(&z, t.tile)?;
                (0..x.dim(0)?)
                    .map(|i| image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
                    .collect()
            })
            .map_err(to_py)?;
        Ok(pictures(py, imgs))
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(family={:?}, weights={:?}, size={})",
            self.family(),
            self.weights.display().to_string(),
            self.size()
        )
    }
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
