//! `imgseq.Tokenizer.from_pretrained(path)`: any family the Rust side reads, told by its
//! weights — a VQ model (taming, LlamaGen, diffusers `VQModel`: integer token grids) or an
//! `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs: float32 latents or patch sequences). NumPy in
//! and out, equal to `imgseq vq encode` / `imgseq vae encode` of the same pictures.

use crate::to_py;
use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::Tokenizer as _;
use imgseq_vqgan::kl::{self, patch, Draw, KlPreset, KlTokenizer};
use imgseq_vqgan::VqTokenizer;
use numpy::ndarray::{Array3, ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

/// Integer codes (VQ) or float32 latents (KL).
type Values = Result<Vec<i64>, Vec<f32>>;

enum Inner {
    Vq(VqTokenizer),
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
        match &self.inner {
            Inner::Vq(t) => t.input(),
            Inner::Kl(t) => t.input(),
        }
    }
}

#[pymethods]
impl Tokenizer {
    /// Opens the model at `path` (a file or a diffusers / save_pretrained folder).
    #[staticmethod]
    #[pyo3(signature = (path, config=None, preset=None, size=None, patch=None, sample_seed=None, tile=None))]
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
    ) -> PyResult<Self> {
        let preset = preset
            .as_deref()
            .map(KlPreset::from_name)
            .transpose()
            .map_err(to_py)?;
        let is_kl = preset.is_some() || kl::is_kl_file(&path).map_err(to_py)?.is_some();
        let inner = py
            .detach(|| -> imgseq_core::Result<Inner> {
                if is_kl {
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
        if patch.is_some() && matches!(inner, Inner::Vq(_)) {
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
        match &self.inner {
            Inner::Vq(t) => t.label(),
            Inner::Kl(t) => t.label(),
        }
    }

    /// `"tokens"` (integer codes) or `"latents"` (float32).
    #[getter]
    fn kind(&self) -> &'static str {
        match &self.inner {
            Inner::Vq(_) => "tokens",
            Inner::Kl(_) => "latents",
        }
    }

    #[getter]
    fn size(&self) -> u32 {
        self.spec().size
    }

    /// Images (n, h, w, 3) or (h, w, 3) uint8 → VQ: (n, gh, gw) int64 codes; AutoencoderKL:
    /// (n, C, h, w) float32 scaled latents, or (n, N, p²·C) with `patch`.
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
                match &self.inner {
                    Inner::Vq(t) => {
                        let g = t.encode_pictures(&pics)?.into_tokens()?;
                        Ok((vec![g.n, g.h, g.w], Ok(g.data)))
                    }
                    Inner::Kl(t) => {
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
                }
            })
            .map_err(to_py)?;
        let (shape, values) = out;
        Ok(match values {
            Ok(t) => Array3::from_shape_vec((shape[0], shape[1], shape[2]), t)
                .expect("shape matches")
                .into_pyarray(py)
                .into_any(),
            Err(v) => ArrayD::from_shape_vec(IxDyn(&shape), v)
                .expect("shape matches")
                .into_pyarray(py)
                .into_any(),
        })
    }

    /// AutoencoderKL latents (as `encode` gives them) → uint8 images (n, H, W, 3).
    fn decode<'py>(
        &self,
        py: Python<'py>,
        latents: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Inner::Kl(t) = &self.inner else {
            return Err(PyValueError::new_err(
                "decode takes AutoencoderKL latents; decode VQ tokens with imgseq.VQTokenizer",
            ));
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
        let (n, hh, ww) = (
            imgs.len(),
            imgs[0].height() as usize,
            imgs[0].width() as usize,
        );
        let flat: Vec<u8> = imgs.into_iter().flat_map(|i| i.into_raw()).collect();
        Ok(ArrayD::from_shape_vec(IxDyn(&[n, hh, ww, 3]), flat)
            .expect("shape matches")
            .into_pyarray(py)
            .into_any())
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

/// Adds the class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tokenizer>()
}
