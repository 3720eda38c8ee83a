//! `LFQTokenizer`: an Open-MAGVIT2 (lookup-free quantization) checkpoint in Python, with the
//! same tokens as `imgseq vq encode --weights X.ckpt` (the one image → input rule, the same
//! library calls).

use super::{int_array, to_py};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_lfq::{load_model, LfqTokenizer, WeightSet};
use numpy::ndarray::Array4;
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// An Open-MAGVIT2 tokenizer: images → tokens of `bits` bits (< 2^bits) → images.
#[pyclass(module = "imgseq._imgseq", frozen)]
pub struct LFQTokenizer {
    tok: LfqTokenizer,
    weights: PathBuf,
}

#[pymethods]
impl LFQTokenizer {
    /// `weights`: their Lightning `.ckpt`; `config`: their yaml (default: `X.yaml` beside
    /// `X.ckpt`, else the settings read off the weights); `raw`: the raw weights instead of
    /// the EMA copies; `size`: the input side (default: the yaml's test size, else 256).
    #[new]
    #[pyo3(signature = (weights, config=None, raw=false, size=None))]
    fn new(
        py: Python<'_>,
        weights: PathBuf,
        config: Option<PathBuf>,
        raw: bool,
        size: Option<u32>,
    ) -> PyResult<Self> {
        let config = config.or_else(|| imgseq_lfq::load::default_config_path(&weights));
        let which = if raw {
            WeightSet::Raw
        } else {
            WeightSet::Default
        };
        let tok = py
            .detach(|| -> imgseq_core::Result<LfqTokenizer> {
                LfqTokenizer::new(load_model(&weights, config.as_deref(), which)?, size)
            })
            .map_err(to_py)?;
        Ok(Self { tok, weights })
    }

    /// Number of codes, 2^bits.
    #[getter]
    fn n_codes(&self) -> usize {
        self.tok.model.config().codebook_size()
    }

    /// Bits per token (= latent channels).
    #[getter]
    fn bits(&self) -> usize {
        self.tok.model.config().bits()
    }

    /// Whether the EMA copies of the weights run.
    #[getter]
    fn ema(&self) -> bool {
        self.tok.model.ema
    }

    /// The square input side.
    #[getter]
    fn size(&self) -> u32 {
        self.tok.size
    }

    /// Pixels per token side.
    #[getter]
    fn downsample_factor(&self) -> usize {
        self.tok.model.config().downsample_factor()
    }

    /// uint8 images (n, h, w, 3) or (h, w, 3) → int64 tokens (n, h/f, w/f) of the
    /// `size`×`size` crops.
    #[pyo3(signature = (images, batch_size=8, upscale=false))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        batch_size: usize,
        upscale: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data, n, h, w) = crate::rgb_batch(images)?;
        let spec = self.tok.input();
        let g = spec.size as usize / self.tok.model.config().downsample_factor();
        let grid = py
            .detach(|| -> imgseq_core::Result<TokenGrid> {
                let plane = h * w * 3;
                let mut all = TokenGrid {
                    n: 0,
                    h: g,
                    w: g,
                    batched: true,
                    data: Vec::new(),
                };
                for start in (0..n).step_by(batch_size.max(1)) {
                    let pics = (start..n.min(start + batch_size.max(1)))
                        .map(|i| {
                            let px = &data[i * plane..(i + 1) * plane];
                            spec.from_pixels(i, px, (h, w, 3), upscale)
                        })
                        .collect::<imgseq_core::Result<Vec<_>>>()?;
                    let t = self.tok.encode_pictures(&pics)?.into_tokens()?;
                    all.n += t.n;
                    all.data.extend(t.data);
                }
                Ok(all)
            })
            .map_err(to_py)?;
        Ok(crate::token_array(py, &grid, self.n_codes()))
    }

    /// Integer tokens (n, h, w) or (h, w) → uint8 images (n, f·h, f·w, 3).
    #[pyo3(signature = (tokens, batch_size=8))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        tokens: &Bound<'py, PyAny>,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data, shape) = int_array(tokens, "tokens")?;
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
        grid.check_codebook("tokens", self.n_codes())
            .map_err(to_py)?;
        let imgs = py
            .detach(|| self.tok.decode_batched(&grid, batch_size, false))
            .map_err(to_py)?;
        let f = self.downsample_factor();
        let mut out = Vec::with_capacity(n * h * f * w * f * 3);
        for img in imgs {
            out.extend_from_slice(img.as_raw());
        }
        let a = Array4::from_shape_vec((n, h * f, w * f, 3), out).expect("shape matches");
        Ok(a.into_pyarray(py).into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "LFQTokenizer(weights={:?}, size={}, bits={}, ema={})",
            self.weights.display().to_string(),
            self.tok.size,
            self.bits(),
            self.tok.model.ema
        )
    }
}
