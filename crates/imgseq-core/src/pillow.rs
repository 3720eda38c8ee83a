//! Pixels as Pillow gives them: the reference pipelines (taming's, LlamaGen's `extract_codes`,
//! diffusers', transformers' image processors) read pictures with `Image.open(p).convert("RGB")`,
//! so imgseq decodes and converts with the same rules, byte for byte:
//!
//! * **JPEG** through libjpeg-turbo's decoder (the library Pillow's wheels bundle, here built
//!   from source by cargo), with Pillow's settings: the accurate integer IDCT, fancy
//!   up-sampling, the library's colour conversion; CMYK and YCCK files as Pillow reads them
//!   (Adobe polarity, inverted, always) and converted to RGB with Pillow's `cmyk2rgb`.
//! * **16-bit PNG**: colour and gray+alpha files keep the high byte of each sample (Pillow's
//!   `;16B` raw modes); a 16-bit gray file is Pillow's `I;16`, whose conversion to 8 bits
//!   clips at 255 (Pillow's rule, not a rescale).
//! * **EXIF orientation** is not applied (Pillow does not, unless `ImageOps.exif_transpose`
//!   is called); [`set_exif_transpose`] turns it on for the whole process, as
//!   `exif_transpose` would.
//!
//! Checked against Pillow's own pixels on a committed set of files written by several
//! encoders (`scripts/make_pillow_fixtures.py`, `tests/pillow_pixels.rs`).

use crate::{Error, Result};
use image::{DynamicImage, GrayImage, RgbImage};
use mozjpeg_sys as jpeg;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether decoded pictures are turned by their EXIF orientation ([`set_exif_transpose`]).
static EXIF_TRANSPOSE: AtomicBool = AtomicBool::new(false);

/// Turns pictures upright by their EXIF orientation tag, for every decode in this process
/// (`ImageOps.exif_transpose`); off by default, as in Pillow.
pub fn set_exif_transpose(on: bool) {
    EXIF_TRANSPOSE.store(on, Ordering::Relaxed);
}

/// Whether [`set_exif_transpose`] is on.
pub fn exif_transpose() -> bool {
    EXIF_TRANSPOSE.load(Ordering::Relaxed)
}

/// An error raised inside libjpeg, carried out of the C code by unwinding.
struct JpegFailure(String);

/// libjpeg's fatal-error hook: formats the message and unwinds to [`decode_jpeg`]'s
/// `catch_unwind` (no panic message is printed: `resume_unwind` skips the panic hook).
unsafe extern "C-unwind" fn error_exit(cinfo: &mut jpeg::jpeg_common_struct) {
    let mut buf = [0u8; 80];
    // SAFETY: `err` was set to a live `jpeg_error_mgr` by `decode_jpeg` and libjpeg's own
    // `format_message` fills an 80-byte buffer with a NUL-terminated string.
    let msg = unsafe {
        let err = &*cinfo.err;
        if let Some(format) = err.format_message {
            format(cinfo, &buf);
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    };
    buf.fill(0);
    std::panic::resume_unwind(Box::new(JpegFailure(msg)));
}

/// Warnings ("corrupt JPEG data: extraneous bytes") are not printed, and decoding goes on,
/// as in Pillow.
unsafe extern "C-unwind" fn output_message(_cinfo: &mut jpeg::jpeg_common_struct) {}

/// libjpeg's decompressor with its error manager, freed on drop.
struct Decompressor {
    cinfo: jpeg::jpeg_decompress_struct,
    err: jpeg::jpeg_error_mgr,
}

impl Decompressor {
    /// A decompressor reading `bytes`, its header read; unwinds with [`JpegFailure`] on a
    /// fatal error (the box is then dropped, freeing libjpeg's memory).
    ///
    /// # Safety
    /// `bytes` must outlive the decompressor.
    unsafe fn open(bytes: &[u8]) -> Box<Self> {
        // SAFETY: the structs are zeroed, then set up by libjpeg's own constructors; the box
        // keeps `cinfo.err` pointing at `err`.
        unsafe {
            let mut d: Box<Decompressor> = Box::new(std::mem::zeroed());
            let err = jpeg::jpeg_std_error(&mut d.err);
            err.error_exit = Some(error_exit);
            err.output_message = Some(output_message);
            d.cinfo.common.err = &mut d.err;
            jpeg::jpeg_create_decompress(&mut d.cinfo);
            jpeg::jpeg_mem_src(&mut d.cinfo, bytes.as_ptr(), bytes.len() as _);
            jpeg::jpeg_read_header(&mut d.cinfo, 1);
            d
        }
    }
}

/// `f()`, with a libjpeg failure inside it turned into a one-line error naming `name`.
fn caught<T>(name: &Path, f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T> {
    std::panic::catch_unwind(f).map_err(|payload| {
        let why = payload
            .downcast::<JpegFailure>()
            .map(|f| f.0)
            .unwrap_or_else(|_| "the JPEG decoder failed".into());
        Error::format(name, format!("corrupt or truncated image ({why})"))
    })
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: created by `jpeg_create_decompress`; destroying twice is never done.
        unsafe { jpeg::jpeg_destroy_decompress(&mut self.cinfo) };
    }
}

/// The pixels libjpeg gives for one file, before Pillow's mode conversion.
enum Decoded {
    Gray(GrayImage),
    Rgb(RgbImage),
    /// CMYK samples as stored (Pillow inverts them: Adobe polarity).
    Cmyk {
        w: u32,
        h: u32,
        data: Vec<u8>,
    },
}

/// Decodes JPEG data as Pillow does (see the module notes); `name` is what errors call it.
/// The caller checks size limits and truncation first.
pub fn decode_jpeg(name: &Path, bytes: &[u8]) -> Result<DynamicImage> {
    let rgb_or_gray = match caught(name, || decode_jpeg_raw(bytes))?? {
        Decoded::Gray(g) => DynamicImage::ImageLuma8(g),
        Decoded::Rgb(c) => DynamicImage::ImageRgb8(c),
        Decoded::Cmyk { w, h, data } => DynamicImage::ImageRgb8(cmyk_inverted_to_rgb(w, h, &data)),
    };
    Ok(rgb_or_gray)
}

/// libjpeg's decode of `bytes`; unwinds with [`JpegFailure`] on a fatal error.
fn decode_jpeg_raw(bytes: &[u8]) -> Result<Decoded> {
    // SAFETY: `bytes` outlives `d`; every scanline pointer points into `out` with room for
    // one row.
    unsafe {
        let mut d = Decompressor::open(bytes);
        // Pillow's layers → mode → libjpeg output space (JpegImagePlugin / JpegDecode.c).
        let (space, comps) = match d.cinfo.num_components {
            1 => (jpeg::J_COLOR_SPACE::JCS_GRAYSCALE, 1usize),
            3 => (jpeg::J_COLOR_SPACE::JCS_RGB, 3),
            4 => (jpeg::J_COLOR_SPACE::JCS_CMYK, 4),
            n => {
                return Err(Error::invalid(format!(
                    "JPEG with {n} components (Pillow reads 1, 3 or 4)"
                )))
            }
        };
        d.cinfo.out_color_space = space;
        d.cinfo.dct_method = jpeg::J_DCT_METHOD::JDCT_ISLOW;
        d.cinfo.do_fancy_upsampling = 1;
        jpeg::jpeg_start_decompress(&mut d.cinfo);
        let (w, h) = (d.cinfo.output_width, d.cinfo.output_height);
        let row = w as usize * comps;
        let mut out = vec![0u8; row * h as usize];
        while d.cinfo.output_scanline < h {
            let at = d.cinfo.output_scanline as usize * row;
            let mut rows = [out[at..].as_mut_ptr()];
            jpeg::jpeg_read_scanlines(&mut d.cinfo, rows.as_mut_ptr(), 1);
        }
        jpeg::jpeg_finish_decompress(&mut d.cinfo);
        Ok(match comps {
            1 => Decoded::Gray(GrayImage::from_raw(w, h, out).expect("sized above")),
            3 => Decoded::Rgb(RgbImage::from_raw(w, h, out).expect("sized above")),
            _ => Decoded::Cmyk { w, h, data: out },
        })
    }
}

/// Pillow's `MULDIV255`: `a * b / 255`, rounded, in integers.
fn muldiv255(a: u32, b: u32) -> u32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// CMYK samples as libjpeg gives them (Adobe-inverted) to RGB, as Pillow's `CMYK;I` unpacking
/// followed by `convert("RGB")` (`cmyk2rgb`, no colour management).
fn cmyk_inverted_to_rgb(w: u32, h: u32, data: &[u8]) -> RgbImage {
    let mut rgb = Vec::with_capacity(w as usize * h as usize * 3);
    for p in data.chunks_exact(4) {
        // Inverted on reading: c = 255 - stored, k = 255 - stored, so 255 - k = stored.
        let nk = u32::from(p[3]);
        for &s in &p[..3] {
            let c = u32::from(255 - s);
            rgb.push(nk.saturating_sub(muldiv255(c, nk)) as u8);
        }
    }
    RgbImage::from_raw(w, h, rgb).expect("sized from the input")
}

/// `img` as Pillow's `convert("RGB")` gives it after opening the same file: 16-bit colour
/// keeps the high byte, 16-bit gray clips at 255, alpha is dropped, gray is replicated.
pub fn to_rgb8(img: DynamicImage) -> RgbImage {
    match img {
        DynamicImage::ImageRgb8(i) => i,
        DynamicImage::ImageLuma16(_) => DynamicImage::ImageLuma8(to_l8(img)).to_rgb8(),
        DynamicImage::ImageRgb16(i) => {
            let (w, h) = i.dimensions();
            let data = i.as_raw().iter().map(|&v| (v >> 8) as u8).collect();
            RgbImage::from_raw(w, h, data).expect("same size")
        }
        DynamicImage::ImageRgba16(i) => {
            let (w, h) = i.dimensions();
            let data = i
                .as_raw()
                .chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]].map(|v| (v >> 8) as u8))
                .collect();
            RgbImage::from_raw(w, h, data).expect("same size")
        }
        DynamicImage::ImageLumaA16(_) => DynamicImage::ImageLuma8(to_l8(img)).to_rgb8(),
        other => other.to_rgb8(),
    }
}

/// A gray or gray+alpha `img` as Pillow's `convert("L")` gives it after opening the same
/// file (`I;16` clips at 255, `LA;16B` keeps the high byte); other images unchanged in
/// meaning, via [`DynamicImage::to_luma8`].
pub fn to_l8(img: DynamicImage) -> GrayImage {
    match img {
        DynamicImage::ImageLuma8(i) => i,
        DynamicImage::ImageLuma16(i) => {
            let (w, h) = i.dimensions();
            let data = i.as_raw().iter().map(|&v| v.min(255) as u8).collect();
            GrayImage::from_raw(w, h, data).expect("same size")
        }
        DynamicImage::ImageLumaA16(i) => {
            let (w, h) = i.dimensions();
            let data = i
                .as_raw()
                .chunks_exact(2)
                .map(|p| (p[0] >> 8) as u8)
                .collect();
            GrayImage::from_raw(w, h, data).expect("same size")
        }
        other => other.to_luma8(),
    }
}

/// The EXIF orientation of an image held in memory (JPEG, PNG `eXIf`, WebP), from its
/// header; `None` where it has none or it cannot be read.
pub fn orientation_of(
    bytes: &[u8],
    format: image::ImageFormat,
) -> Option<image::metadata::Orientation> {
    use image::ImageDecoder;
    let r = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
    let mut d = r.into_decoder().ok()?;
    d.orientation().ok()
}

/// The `(width, height)` libjpeg reads from JPEG data's header (for files whose header the
/// generic reader cannot parse, such as arithmetic-coded ones).
pub fn jpeg_dimensions(name: &Path, bytes: &[u8]) -> Result<(u32, u32)> {
    // SAFETY: `bytes` outlives the decompressor, which only reads the header.
    caught(name, || unsafe {
        let d = Decompressor::open(bytes);
        (d.cinfo.image_width, d.cinfo.image_height)
    })
}
