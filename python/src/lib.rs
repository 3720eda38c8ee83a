//! `imgseq._imgseq`: the compiled half of the `imgseq` Python package.
//!
//! NumPy arrays in and out; the model work runs with the GIL released; library errors become
//! Python exceptions carrying the library's one-line message (`FileNotFoundError` /
//! `PermissionError` / `OSError` for files that cannot be read, `ValueError` for bad input or
//! bad file content, `TypeError` for arrays of the wrong dtype, `RuntimeError` for a failed
//! tensor operation). The Python wrapper (`imgseq/__init__.py`) supplies the default weights.

use candle_core::Tensor;
use image::{DynamicImage, GrayImage, RgbImage};
use imgseq_core::image_io;
use imgseq_core::tokens::TokenGrid;
use imgseq_core::Error;
use imgseq_kernels::PrecisionRequest;
use imgseq_vit::inference::Classifier;
use numpy::ndarray::Array3;
use numpy::{
    IntoPyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{
    PyFileNotFoundError, PyOSError, PyPermissionError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use std::path::PathBuf;

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

/// A batch's (n, h, w, channels).
pub(crate) type BatchDims = (usize, usize, usize, usize);

/// A batch of pictures: uint8 (n, h, w, 3) RGB or (n, h, w, 1) gray, or one (h, w, 3) RGB
/// picture as a batch of one; its bytes and (n, h, w, channels).
pub(crate) fn picture_batch(images: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, BatchDims)> {
    const SHAPE: &str = "(n, h, w, 3)";
    let (data, shape) = u8_array(images, "images", SHAPE)?;
    let dims = match shape[..] {
        [n, h, w, c @ (1 | 3)] => (n, h, w, c),
        [h, w, 3] => (1, h, w, 3),
        _ => {
            return Err(PyValueError::new_err(format!(
                "images must have shape {SHAPE} (RGB) or (n, h, w, 1) (gray), got {shape:?}"
            )))
        }
    };
    Ok((data, dims))
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

/// Token grids as a numpy (n, h, w) int64 array.
pub(crate) fn token_array<'py>(py: Python<'py>, grid: &TokenGrid) -> Bound<'py, PyAny> {
    let shape = (grid.n, grid.h, grid.w);
    // The one token dtype rule (docs/formats.md): int64 at every API, as the CLI's `.npy`, the
    // service and PyTorch's embedding indices; only shards store the smallest type.
    let a = Array3::from_shape_vec(shape, grid.data.clone()).expect("shape matches");
    a.into_pyarray(py).into_any()
}

/// `precision="f32"|"bf16"|"auto"`, as the CLI's `--precision`.
fn precision_request(s: &str) -> PyResult<PrecisionRequest> {
    s.parse()
        .map_err(|e: String| PyValueError::new_err(format!("precision: {e}")))
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

/// The catalogue of released tokenizers (`imgseq models`), as JSON.
#[pyfunction]
fn catalogue_json() -> PyResult<String> {
    serde_json::to_string(imgseq_models::catalogue::CATALOGUE)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

#[pymodule]
fn _imgseq(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ViT>()?;
    m.add_function(wrap_pyfunction!(catalogue_json, m)?)?;
    tokenizer::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
