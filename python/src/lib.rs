//! `imgseq._imgseq`: the compiled half of the `imgseq` Python package.
//!
//! NumPy arrays in and out; the model work runs with the GIL released; library errors become
//! Python exceptions carrying the library's one-line message (`FileNotFoundError` /
//! `PermissionError` / `OSError` for files that cannot be read, `ValueError` for bad input or
//! bad file content, `TypeError` for arrays of the wrong dtype, `RuntimeError` for a failed
//! tensor operation). The Python wrapper (`imgseq/__init__.py`) supplies the default weights.

use candle_core::{Device, Tensor};
use image::{DynamicImage, GrayImage, RgbImage};
use imgseq_core::image_io;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::Error;
use imgseq_kernels::PrecisionRequest;
use imgseq_vit::inference::Classifier;
use imgseq_vqgan::{TokenGrid, VqModel, VqTokenizer};
use numpy::ndarray::{Array3, Array4};
use numpy::{
    IntoPyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{
    PyFileNotFoundError, PyOSError, PyPermissionError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use std::path::PathBuf;

mod lfq;
mod tokenizer;

/// A library error as the Python exception of its kind, with the library's message.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match &e {
        Error::Io { err, .. } => match err.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
            std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
            _ => PyOSError::new_err(msg),
        },
        Error::Candle(_) => PyRuntimeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// `x` as a NumPy array (any object that is not one is a `TypeError`).
fn as_array<'py>(x: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
    x.cast::<PyUntypedArray>().cloned().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a numpy array, got {}",
            x.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    })
}

fn dtype_name(a: &Bound<'_, PyUntypedArray>) -> String {
    a.dtype().to_string()
}

/// Refuses an array whose logical size — elements by shape, whatever its strides: a
/// broadcast (zero-stride) view of one pixel can stand for 10¹⁰ of them — times `per_item`
/// bytes (the copies made of it) does not fit the memory budget; before anything is copied.
fn check_logical_size(shape: &[usize], per_item: u128, what: &str) -> PyResult<()> {
    let count = shape
        .iter()
        .try_fold(1u128, |a, &d| a.checked_mul(d as u128))
        .unwrap_or(u128::MAX);
    imgseq_core::budget::check_memory(count.saturating_mul(per_item)).map_err(|e| {
        PyValueError::new_err(format!(
            "{what}: an array of shape {shape:?} ({count} elements) {e}"
        ))
    })
}

/// A batch of RGB pictures: uint8 (n, h, w, 3), or one (h, w, 3) picture as a batch of one;
/// its bytes and (n, h, w).
pub(crate) fn rgb_batch(images: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, usize, usize, usize)> {
    let (data, shape) = u8_array(images, "images", "(n, h, w, 3)")?;
    let (n, h, w) = match shape[..] {
        [n, h, w, 3] => (n, h, w),
        [h, w, 3] => (1, h, w),
        _ => {
            return Err(PyValueError::new_err(format!(
                "images must have shape (n, h, w, 3) or (h, w, 3), got {shape:?}"
            )))
        }
    };
    Ok((data, n, h, w))
}

/// The bytes of a uint8 array (C order) and its shape.
fn u8_array(x: &Bound<'_, PyAny>, what: &str, expected: &str) -> PyResult<(Vec<u8>, Vec<usize>)> {
    let a = as_array(x, what)?;
    let Ok(a) = a.cast::<PyArrayDyn<u8>>() else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a uint8 array {expected}, got dtype {}",
            dtype_name(&a)
        )));
    };
    // The bytes, their pictures and the model input made of them (f32).
    check_logical_size(a.shape(), 8, what)?;
    let ro = a.readonly();
    let view = ro.as_array();
    let shape = view.shape().to_vec();
    let data = view.as_standard_layout().iter().copied().collect();
    Ok((data, shape))
}

/// The values of an integer array as i64 (values past i64::MAX saturate: they are out of any
/// codebook anyway) and its shape.
pub(crate) fn int_array(x: &Bound<'_, PyAny>, what: &str) -> PyResult<(Vec<i64>, Vec<usize>)> {
    let a = as_array(x, what)?;
    let dt = a.dtype();
    let kind = dt.kind();
    if kind != b'i' && kind != b'u' {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an integer array, got dtype {}",
            dtype_name(&a)
        )));
    }
    // The values as i64, and the tokens made of them.
    check_logical_size(a.shape(), 16, what)?;
    macro_rules! take {
        ($($t:ty),*) => {$(
            if let Ok(arr) = a.cast::<PyArrayDyn<$t>>() {
                let ro = arr.readonly();
                let v = ro.as_array();
                let shape = v.shape().to_vec();
                let data = v
                    .as_standard_layout()
                    .iter()
                    .map(|&t| i64::try_from(t).unwrap_or(i64::MAX))
                    .collect();
                return Ok((data, shape));
            }
        )*};
    }
    take!(i64, i32, i16, i8, u64, u32, u16, u8);
    Err(PyTypeError::new_err(format!(
        "{what}: unsupported integer dtype {}",
        dtype_name(&a)
    )))
}

/// Token grids as a numpy (n, h, w) array in the codebook's storage dtype
/// ([`imgseq_core::tokens::TokenDtype`]: uint16 up to 65,536 codes, else int32), as shards
/// store them.
pub(crate) fn token_array<'py>(
    py: Python<'py>,
    grid: &TokenGrid,
    n_codes: usize,
) -> Bound<'py, PyAny> {
    let shape = (grid.n, grid.h, grid.w);
    match imgseq_core::tokens::TokenDtype::for_codebook(n_codes) {
        imgseq_core::tokens::TokenDtype::U16 => {
            let v: Vec<u16> = grid.data.iter().map(|&t| t as u16).collect();
            let a = Array3::from_shape_vec(shape, v).expect("shape matches");
            a.into_pyarray(py).into_any()
        }
        imgseq_core::tokens::TokenDtype::I32 => {
            let v: Vec<i32> = grid.data.iter().map(|&t| t as i32).collect();
            let a = Array3::from_shape_vec(shape, v).expect("shape matches");
            a.into_pyarray(py).into_any()
        }
    }
}

/// `precision="f32"|"bf16"|"auto"`, as the CLI's `--precision`.
fn precision_request(s: &str) -> PyResult<PrecisionRequest> {
    s.parse()
        .map_err(|e: String| PyValueError::new_err(format!("precision: {e}")))
}

/// A VQGAN tokenizer: images → integer token grids → images.
#[pyclass(module = "imgseq._imgseq", frozen)]
struct VQTokenizer {
    tok: VqTokenizer,
    weights: PathBuf,
}

impl VQTokenizer {
    /// Tokens of the model's input pictures, as (n, gh, gw) i64.
    fn encode_pictures(&self, imgs: &[RgbImage], batch: usize) -> imgseq_core::Result<TokenGrid> {
        let mut all = TokenGrid {
            n: 0,
            h: 0,
            w: 0,
            batched: true,
            data: Vec::new(),
        };
        for chunk in imgs.chunks(batch) {
            let g = self.tok.encode_pictures(chunk)?.into_tokens()?;
            (all.n, all.h, all.w) = (all.n + g.n, g.h, g.w);
            all.data.extend(g.data);
        }
        Ok(all)
    }
}

#[pymethods]
impl VQTokenizer {
    #[new]
    #[pyo3(signature = (weights, config=None, size=384, precision="auto", bf16_encoder=false))]
    fn new(
        py: Python<'_>,
        weights: PathBuf,
        config: Option<PathBuf>,
        size: u32,
        precision: &str,
        bf16_encoder: bool,
    ) -> PyResult<Self> {
        let request = precision_request(precision)?;
        let model = py
            .detach(|| -> imgseq_core::Result<VqModel> {
                let mut m = imgseq_vqgan::load_model(&weights, config.as_deref(), &Device::Cpu)?;
                m.choose_precision(request)?;
                if bf16_encoder {
                    m.set_encoder_precision(imgseq_kernels::Precision::Bf16)?;
                }
                Ok(m)
            })
            .map_err(to_py)?;
        let tok = VqTokenizer::new(model, size).map_err(to_py)?;
        Ok(Self { tok, weights })
    }

    /// Number of codebook entries (tokens are 0 ≤ t < n_codes).
    #[getter]
    fn n_codes(&self) -> usize {
        self.tok.model.config().n_embed
    }

    /// The arithmetic of the decoding convs (`f32` or `bf16`).
    #[getter]
    fn precision(&self) -> &'static str {
        self.tok.model.precision().name()
    }

    /// The arithmetic of the encoding convs (`f32` unless `bf16_encoder=True`).
    #[getter]
    fn encoder_precision(&self) -> &'static str {
        self.tok.model.encoder_precision().name()
    }

    /// The square input side images are resized and cropped to.
    #[getter]
    fn size(&self) -> u32 {
        self.tok.size
    }

    /// Pixels per token side (16 for taming's f16 models).
    #[getter]
    fn downsample_factor(&self) -> usize {
        self.tok.model.config().downsample_factor()
    }

    /// Channels the model reads (1: gray, 3: RGB).
    #[getter]
    fn channels(&self) -> usize {
        self.tok.input().channels
    }

    /// The crop rule's name (`shorter_side`, `adm_center_crop`).
    #[getter]
    fn crop(&self) -> &'static str {
        self.tok.input().crop.name()
    }

    /// The weights file the model was loaded from.
    #[getter]
    fn weights(&self) -> PathBuf {
        self.weights.clone()
    }

    /// Token grid (rows, columns) of a `size`×`size` input (default: this tokenizer's size).
    #[pyo3(signature = (size=None))]
    fn grid(&self, size: Option<usize>) -> PyResult<(usize, usize)> {
        let s = size.unwrap_or(self.tok.size as usize);
        self.tok.model.config().check_input_size(s).map_err(to_py)?;
        let g = s / self.tok.model.config().downsample_factor();
        Ok((g, g))
    }

    #[pyo3(signature = (images, batch_size=8, upscale=false))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        batch_size: usize,
        upscale: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        const SHAPE: &str = "(n, h, w, 3)";
        let (data, shape) = u8_array(images, "images", SHAPE)?;
        let (n, h, w, c) = match shape[..] {
            [n, h, w, c @ (1 | 3)] => (n, h, w, c),
            [h, w, 3] => (1, h, w, 3),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "images must have shape {SHAPE} (RGB) or (n, h, w, 1) (gray), got {shape:?}"
                )))
            }
        };
        imgseq_vqgan::inference::check_batch(batch_size).map_err(to_py)?;
        let spec = self.tok.input();
        let cfg = self.tok.model.config();
        let s = spec.size as usize;
        cfg.check_memory(batch_size.min(n).max(1), s, s, Some(s))
            .map_err(to_py)?;
        let grid = py
            .detach(|| -> imgseq_core::Result<TokenGrid> {
                // The one image → model input rule (the family's crop, the model's channels),
                // as `imgseq vq encode` applies it to files.
                let plane = h * w * c;
                let square = (0..n)
                    .map(|i| {
                        let px = &data[i * plane..(i + 1) * plane];
                        spec.from_pixels(i, px, (h, w, c), upscale)
                    })
                    .collect::<imgseq_core::Result<Vec<_>>>()?;
                if n == 0 {
                    let g = s / cfg.downsample_factor();
                    return Ok(TokenGrid {
                        n: 0,
                        h: g,
                        w: g,
                        batched: true,
                        data: Vec::new(),
                    });
                }
                self.encode_pictures(&square, batch_size)
            })
            .map_err(to_py)?;
        Ok(token_array(py, &grid, self.tok.model.config().n_embed))
    }

    #[pyo3(signature = (tokens, batch_size=8))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        tokens: &Bound<'py, PyAny>,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data, shape) = int_array(tokens, "tokens")?;
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
        grid.check_codebook("tokens", self.tok.model.config().n_embed)
            .map_err(to_py)?;
        let imgs = py
            .detach(|| {
                imgseq_vqgan::inference::decode_tokens(&self.tok.model, &grid, batch_size, false)
            })
            .map_err(to_py)?;
        let f = self.tok.model.config().downsample_factor();
        let (hp, wp) = (h * f, w * f);
        let mut out = Vec::with_capacity(n * hp * wp * 3);
        for img in imgs {
            out.extend_from_slice(img.as_raw());
        }
        let a = Array4::from_shape_vec((n, hp, wp, 3), out).expect("shape matches");
        Ok(a.into_pyarray(py).into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "VQTokenizer(weights={:?}, size={}, n_codes={})",
            self.weights.display().to_string(),
            self.tok.size,
            self.tok.model.config().n_embed
        )
    }
}

/// A ViT image classifier and its continuous tokens.
#[pyclass(module = "imgseq._imgseq", frozen)]
struct ViT {
    m: Classifier,
    path: PathBuf,
}

impl ViT {
    /// Images (n, h, w) gray, (n, h, w, 1) or (n, h, w, 3) as the model's channels.
    fn images(&self, x: &Bound<'_, PyAny>) -> PyResult<Vec<DynamicImage>> {
        const SHAPE: &str = "(n, h, w) or (n, h, w, 3)";
        let (data, shape) = u8_array(x, "images", SHAPE)?;
        let (n, h, w, c) = match shape[..] {
            [n, h, w] => (n, h, w, 1),
            [n, h, w, c @ (1 | 3)] => (n, h, w, c),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "images must have shape {SHAPE}, got {shape:?}"
                )))
            }
        };
        if h == 0 || w == 0 {
            return Err(PyValueError::new_err(format!(
                "images must not be empty, got shape {shape:?}"
            )));
        }
        let plane = h * w * c;
        let channels = self.m.cfg.num_channels;
        (0..n)
            .map(|i| {
                let raw = data[i * plane..(i + 1) * plane].to_vec();
                let (w32, h32) = (w as u32, h as u32);
                let img = if c == 1 {
                    let g = GrayImage::from_raw(w32, h32, raw).expect("buffer size matches");
                    match channels {
                        1 => DynamicImage::ImageLuma8(g),
                        _ => DynamicImage::ImageRgb8(DynamicImage::ImageLuma8(g).to_rgb8()),
                    }
                } else {
                    let rgb = RgbImage::from_raw(w32, h32, raw).expect("buffer size matches");
                    match channels {
                        1 => DynamicImage::ImageLuma8(image_io::rgb_to_gray(&rgb)),
                        _ => DynamicImage::ImageRgb8(rgb),
                    }
                };
                Ok(img)
            })
            .collect()
    }
}

#[pymethods]
impl ViT {
    #[new]
    #[pyo3(signature = (weights, precision="auto"))]
    fn new(py: Python<'_>, weights: PathBuf, precision: &str) -> PyResult<Self> {
        let request = precision_request(precision)?;
        let m = py
            .detach(|| -> imgseq_core::Result<Classifier> {
                let mut m = Classifier::load(&weights)?;
                m.choose_precision(request)?;
                Ok(m)
            })
            .map_err(to_py)?;
        Ok(Self { m, path: weights })
    }

    /// Class names, by label index.
    #[getter]
    fn labels(&self) -> Vec<String> {
        (0..self.m.cfg.num_labels())
            .map(|i| self.m.cfg.label(i))
            .collect()
    }

    /// The model's input side (32 for the shipped Fashion-MNIST model).
    #[getter]
    fn image_size(&self) -> usize {
        self.m.cfg.image_size
    }

    /// Channels the model takes (1: gray).
    #[getter]
    fn num_channels(&self) -> usize {
        self.m.cfg.num_channels
    }

    /// Width of a token embedding.
    #[getter]
    fn hidden_size(&self) -> usize {
        self.m.cfg.hidden_size
    }

    /// The checkpoint folder or weights file the model was loaded from.
    #[getter]
    fn weights(&self) -> PathBuf {
        self.path.clone()
    }

    #[pyo3(signature = (images, size=None, invert=false, batch_size=64))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        size: Option<usize>,
        invert: bool,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let imgs = self.images(images)?;
        let size = size.unwrap_or(self.m.cfg.image_size);
        self.m.cfg.check_input_size(size, size).map_err(to_py)?;
        if batch_size == 0 {
            return Err(to_py(Error::setting("batch_size", 0, "must be positive")));
        }
        let (rows, shape) = py
            .detach(|| -> imgseq_core::Result<(Vec<f32>, (usize, usize))> {
                let mut out = Vec::new();
                let mut shape = (0, 0);
                for chunk in imgs.chunks(batch_size) {
                    let x = self.m.preprocess(chunk, size, invert)?;
                    let e = self.m.embed(&x)?;
                    let (_, t, d) = e.tokens.dims3()?;
                    shape = (t, d);
                    out.extend(e.tokens.flatten_all()?.to_vec1::<f32>()?);
                }
                if imgs.is_empty() {
                    let (gh, gw) = self.m.cfg.check_input_size(size, size)?;
                    shape = (gh * gw + 1, self.m.cfg.hidden_size);
                }
                Ok((out, shape))
            })
            .map_err(to_py)?;
        let a =
            Array3::from_shape_vec((imgs.len(), shape.0, shape.1), rows).expect("shape matches");
        Ok(a.into_pyarray(py).into_any())
    }

    #[pyo3(signature = (images, k=1, invert=false, batch_size=64))]
    fn classify(
        &self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        k: usize,
        invert: bool,
        batch_size: usize,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        let imgs = self.images(images)?;
        if k == 0 {
            return Err(to_py(Error::setting("k", 0, "must be positive")));
        }
        if batch_size == 0 {
            return Err(to_py(Error::setting("batch_size", 0, "must be positive")));
        }
        let size = self.m.cfg.image_size;
        let top = py
            .detach(|| -> imgseq_core::Result<Vec<Vec<(usize, f32)>>> {
                let mut out = Vec::new();
                for chunk in imgs.chunks(batch_size) {
                    let x = self.m.preprocess(chunk, size, invert)?;
                    out.extend(self.m.top_k(&x, k)?);
                }
                Ok(out)
            })
            .map_err(to_py)?;
        Ok(top
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|(j, p)| (self.m.cfg.label(j), p))
                    .collect()
            })
            .collect())
    }

    /// Class probabilities (n, num_labels) float32.
    #[pyo3(signature = (images, invert=false))]
    fn probabilities<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        invert: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let imgs = self.images(images)?;
        let size = self.m.cfg.image_size;
        let labels = self.m.cfg.num_labels();
        let probs = py
            .detach(|| -> imgseq_core::Result<Vec<f32>> {
                if imgs.is_empty() {
                    return Ok(Vec::new());
                }
                let x = self.m.preprocess(&imgs, size, invert)?;
                let p: Tensor = self.m.probabilities(&x)?;
                Ok(p.flatten_all()?.to_vec1::<f32>()?)
            })
            .map_err(to_py)?;
        let a = numpy::ndarray::Array2::from_shape_vec((imgs.len(), labels), probs)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(a.into_pyarray(py).into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "ViT(weights={:?}, labels={})",
            self.path.display().to_string(),
            self.m.cfg.num_labels()
        )
    }
}

#[pymodule]
fn _imgseq(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VQTokenizer>()?;
    m.add_class::<lfq::LFQTokenizer>()?;
    m.add_class::<ViT>()?;
    tokenizer::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
