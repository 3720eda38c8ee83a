//! Image files in and out, preprocessing, and conversion to and from candle tensors.
//!
//! * Loading refuses images larger than [`MAX_SIDE`]×[`MAX_SIDE`] or needing more than
//!   [`MAX_ALLOC`] bytes *before* decoding them, and every error names the file.
//! * VQGAN preprocessing is [`resize_shorter_center_crop`] (taming's `SmallestMaxSize` +
//!   `CenterCrop`), ViT preprocessing is [`resize_exact`] or [`letterbox`].
//! * Tensors are `(c, h, w)` `f32` in [`PixelRange::ZeroOne`] (`x / 255`) or
//!   [`PixelRange::MinusOneOne`] (taming: `x / 127.5 - 1`).
//!
//! The helpers are generic over 8-bit pixel types, so they work on both [`RgbImage`] and
//! [`GrayImage`].

use crate::fsutil::write_bytes_atomic;
use crate::pillow;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use image::imageops::FilterType;
use image::{
    DynamicImage, GrayImage, ImageBuffer, ImageError, ImageReader, Limits, Luma, Pixel,
    PixelWithColorType, Rgb, RgbImage,
};
use std::path::Path;

/// Largest accepted width and height of an input image.
pub const MAX_SIDE: u32 = 16384;
/// Largest memory the decoder may allocate for one image.
pub const MAX_ALLOC: u64 = 1 << 30;
/// Resampling filter used by all resizing helpers.
pub const FILTER: FilterType = FilterType::CatmullRom;
/// File extensions (lower case) recognised as images.
pub const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp", "bmp"];
/// An 8-bit image buffer with any pixel type (`RgbImage`, `GrayImage`, ...).
pub type Image8<P> = ImageBuffer<P, Vec<u8>>;

/// How pixel values map to tensor values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PixelRange {
    /// `x / 255`, in `[0, 1]`.
    #[serde(rename = "[0, 1]")]
    ZeroOne,
    /// `x / 127.5 - 1`, in `[-1, 1]` (taming-transformers).
    #[serde(rename = "[-1, 1]")]
    MinusOneOne,
}

impl PixelRange {
    /// The 8-bit → tensor rule in words (`pixels/127.5 - 1`).
    pub fn describe(self) -> &'static str {
        match self {
            PixelRange::ZeroOne => "pixels/255",
            PixelRange::MinusOneOne => "pixels/127.5 - 1",
        }
    }

    /// Converts one 8-bit value.
    #[inline]
    pub fn to_f32(self, x: u8) -> f32 {
        match self {
            PixelRange::ZeroOne => x as f32 / 255.0,
            PixelRange::MinusOneOne => x as f32 / 127.5 - 1.0,
        }
    }

    /// Converts back with clamping and rounding (NaN becomes 0).
    #[inline]
    pub fn to_u8(self, x: f32) -> u8 {
        let unit = match self {
            PixelRange::ZeroOne => x.clamp(0.0, 1.0),
            PixelRange::MinusOneOne => (x.clamp(-1.0, 1.0) + 1.0) / 2.0,
        };
        // `as u8` saturates and maps NaN to 0.
        (unit * 255.0).round() as u8
    }
}

fn decode_error(path: &Path, e: ImageError) -> Error {
    match e {
        ImageError::Limits(l) => Error::format(
            path,
            format!(
                "image is too large to decode ({l}; limits: {MAX_SIDE}x{MAX_SIDE} pixels, {} MiB)",
                MAX_ALLOC >> 20
            ),
        ),
        ImageError::Unsupported(u) => Error::format(
            path,
            format!("unsupported image format ({u}); supported: png, jpeg, webp, bmp"),
        ),
        e => Error::format(path, format!("corrupt or truncated image ({e})")),
    }
}

fn reader(path: &Path) -> Result<ImageReader<std::io::BufReader<std::fs::File>>> {
    let r = ImageReader::open(path).map_err(|e| Error::io(path, e))?;
    let r = r.with_guessed_format().map_err(|e| Error::io(path, e))?;
    if r.format().is_none() {
        return Err(Error::format(
            path,
            "not an image (expected png, jpeg, webp or bmp)",
        ));
    }
    Ok(r)
}

/// Reads only the header of an image file and returns its `(width, height)`.
pub fn image_dimensions(path: impl AsRef<Path>) -> Result<(u32, u32)> {
    let path = path.as_ref();
    let r = reader(path)?;
    let jpeg = r.format() == Some(image::ImageFormat::Jpeg);
    match r.into_dimensions() {
        Ok(dims) => Ok(dims),
        // libjpeg reads what the generic header reader cannot (arithmetic coding, ...).
        Err(_) if jpeg => pillow::jpeg_dimensions(path, &read_limited(path)?),
        Err(e) => Err(decode_error(path, e)),
    }
}

/// Bytes a decode of a `w`×`h` image may hold at once: the decoder's buffer (at most 8 bytes a
/// pixel, 16-bit RGBA) and its 8-bit RGB copy.
pub fn decode_bytes(w: u32, h: u32) -> u128 {
    u128::from(w) * u128::from(h) * (8 + 3)
}

/// The budget's share ([`crate::budget::reserve`]) for decoding a `w`×`h` image: decodes
/// running side by side (a batch read by several threads) wait until their sum fits, and an
/// image whose header declares more than the whole share is refused before decoding (two
/// 34-byte WebPs declaring 16383² no longer decode at once into 2 GiB each).
fn reserve_decode(path: &Path, w: u32, h: u32) -> Result<crate::budget::Reserved> {
    crate::budget::reserve(decode_bytes(w, h)).map_err(|why| {
        Error::format(
            path,
            format!("image is {w}x{h} pixels, too large to decode: it {why}"),
        )
    })
}

/// Decodes an image file, refusing huge images before decoding.
pub fn load_dynamic(path: impl AsRef<Path>) -> Result<DynamicImage> {
    let path = path.as_ref();
    // The header first, so that a huge or broken file is refused before it is read whole.
    image_dimensions(path)?;
    decode_dynamic_bytes(path, &read_limited(path)?)
}

/// Decodes an image held in memory (a tar member, a Parquet cell, a file's bytes) with the
/// checks every decode gets: format from the content, size and allocation limits, truncated
/// JPEG refused; JPEG decoded as Pillow decodes it ([`crate::pillow`]), EXIF orientation
/// applied only when [`crate::pillow::set_exif_transpose`] asked for it. `name` is what
/// messages call it.
pub fn decode_dynamic_bytes(name: &Path, bytes: &[u8]) -> Result<DynamicImage> {
    decode_bytes_upright(name, bytes, pillow::exif_transpose())
}

/// [`decode_dynamic_bytes`], turned by the EXIF orientation when `upright`
/// (`ImageOps.exif_transpose`) whatever the process-wide setting.
pub fn decode_bytes_upright(name: &Path, bytes: &[u8], upright: bool) -> Result<DynamicImage> {
    let (format, (w, h)) = header_of_bytes(name, bytes)?;
    if w > MAX_SIDE || h > MAX_SIDE {
        return Err(Error::format(
            name,
            format!("image is {w}x{h} pixels, larger than the {MAX_SIDE}x{MAX_SIDE} limit"),
        ));
    }
    if w == 0 || h == 0 {
        return Err(Error::format(name, format!("image is empty ({w}x{h})")));
    }
    let _held = reserve_decode(name, w, h)?;
    let mut img = if format == image::ImageFormat::Jpeg {
        // libjpeg fills a truncated scan with gray and only warns: check that the data ends
        // with an end-of-image marker after its last scan (Pillow refuses such files too).
        if !jpeg_is_complete(bytes) {
            return Err(Error::format(
                name,
                "corrupt or truncated image (the JPEG data ends before its end-of-image marker)",
            ));
        }
        pillow::decode_jpeg(name, bytes)?
    } else {
        let mut limits = Limits::default();
        limits.max_image_width = Some(MAX_SIDE);
        limits.max_image_height = Some(MAX_SIDE);
        limits.max_alloc = Some(MAX_ALLOC);
        let mut r = ImageReader::with_format(std::io::Cursor::new(bytes), format);
        r.limits(limits);
        r.decode().map_err(|e| decode_error(name, e))?
    };
    if upright {
        if let Some(o) = pillow::orientation_of(bytes, format) {
            img.apply_orientation(o);
        }
    }
    Ok(img)
}

/// Decodes an image held in memory as 8-bit RGB ([`decode_dynamic_bytes`], then Pillow's
/// `convert("RGB")`).
pub fn decode_rgb_bytes(name: &Path, bytes: &[u8]) -> Result<RgbImage> {
    Ok(pillow::to_rgb8(decode_dynamic_bytes(name, bytes)?))
}

/// The format and `(width, height)` of an image held in memory, from its header alone (no
/// pixel is decoded): what a service checks against its pixel limit before decoding.
pub fn header_of_bytes(name: &Path, bytes: &[u8]) -> Result<(image::ImageFormat, (u32, u32))> {
    let r = ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| Error::io(name, e))?;
    let Some(format) = r.format() else {
        return Err(Error::format(
            name,
            "not an image (expected png, jpeg, webp or bmp)",
        ));
    };
    if format == image::ImageFormat::Jpeg {
        return Ok((format, pillow::jpeg_dimensions(name, bytes)?));
    }
    let dims = r.into_dimensions().map_err(|e| decode_error(name, e))?;
    Ok((format, dims))
}

/// The bytes of an image file of at most [`MAX_ALLOC`] bytes.
fn read_limited(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = Vec::new();
    f.take(MAX_ALLOC + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_ALLOC {
        return Err(Error::format(
            path,
            format!("image file is larger than {} MiB", MAX_ALLOC >> 20),
        ));
    }
    Ok(bytes)
}

/// Whether JPEG data has an end-of-image marker (`FF D9`) after its last start-of-scan
/// (`FF DA`). Inside entropy-coded data a `FF` byte is always followed by `00` or a restart
/// marker, so neither pair can appear there by chance.
pub fn jpeg_is_complete(bytes: &[u8]) -> bool {
    let last = |m: u8| bytes.windows(2).rposition(|w| w == [0xFF, m]);
    match (last(0xDA), last(0xD9)) {
        (Some(sos), Some(eoi)) => eoi > sos,
        _ => false,
    }
}

/// Loads an image as 8-bit RGB (alpha is dropped, gray is replicated).
pub fn load_rgb(path: impl AsRef<Path>) -> Result<RgbImage> {
    Ok(pillow::to_rgb8(load_dynamic(path)?))
}

/// Converts RGB to gray with ITU-R 601 luma, bit-exact with PIL's `convert("L")`
/// (which torchvision's `Grayscale` and the Fashion-MNIST-style pipelines use).
pub fn rgb_to_gray(img: &RgbImage) -> GrayImage {
    let (w, h) = img.dimensions();
    let data = img.as_raw().chunks_exact(3).map(luma).collect();
    GrayImage::from_raw(w, h, data).expect("buffer size matches")
}

/// The ITU-R 601 luma of one RGB pixel `[r, g, b]`, as [`rgb_to_gray`] computes it (a gray
/// pixel, r = g = b, keeps its value).
pub fn luma(p: &[u8]) -> u8 {
    ((p[0] as u32 * 19595 + p[1] as u32 * 38470 + p[2] as u32 * 7471 + 0x8000) >> 16) as u8
}

/// Loads an image as 8-bit gray: gray files are taken as they are, colour files are converted
/// with [`rgb_to_gray`].
pub fn load_gray(path: impl AsRef<Path>) -> Result<GrayImage> {
    Ok(to_gray(load_dynamic(path)?))
}

/// Gray as [`load_gray`] makes it: gray images keep their levels, colour ones go through
/// [`rgb_to_gray`] (PIL's `convert("L")`).
fn to_gray(img: DynamicImage) -> GrayImage {
    match img {
        DynamicImage::ImageLuma8(i) => i,
        i @ (DynamicImage::ImageLuma16(_)
        | DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageLumaA16(_)) => pillow::to_l8(i),
        other => rgb_to_gray(&pillow::to_rgb8(other)),
    }
}

/// `img` with `channels` = 1 ([`DynamicImage::ImageLuma8`], as [`load_gray`]) or 3
/// ([`DynamicImage::ImageRgb8`]: gray replicated into three equal channels, as PIL's
/// `convert("RGB")` and so HF's image pipeline do).
pub fn with_channels(img: DynamicImage, channels: usize) -> Result<DynamicImage> {
    match (channels, img) {
        (1, i @ DynamicImage::ImageLuma8(_)) | (3, i @ DynamicImage::ImageRgb8(_)) => Ok(i),
        (1, i) => Ok(DynamicImage::ImageLuma8(to_gray(i))),
        (3, i) => Ok(DynamicImage::ImageRgb8(pillow::to_rgb8(i))),
        (c, _) => Err(Error::invalid(format!(
            "images can be loaded with 1 or 3 channels, not {c}"
        ))),
    }
}

/// Loads an image with `channels` = 1 ([`DynamicImage::ImageLuma8`]) or 3
/// ([`DynamicImage::ImageRgb8`]) ([`with_channels`]).
pub fn load_image(path: impl AsRef<Path>, channels: usize) -> Result<DynamicImage> {
    if channels != 1 && channels != 3 {
        return Err(Error::invalid(format!(
            "images can be loaded with 1 or 3 channels, not {channels}"
        )));
    }
    with_channels(load_dynamic(path)?, channels)
}

/// Whether an image of `width`×`height` must be upscaled to give a `size`×`size` crop.
pub fn image_too_small(width: u32, height: u32, size: u32) -> bool {
    width.min(height) < size
}

/// Fails (naming the file and both sizes) when the shorter side of a `width`×`height` image
/// is smaller than `size`, unless `allow_upscale`.
pub fn check_min_size(
    path: impl AsRef<Path>,
    width: u32,
    height: u32,
    size: u32,
    allow_upscale: bool,
) -> Result<()> {
    if !allow_upscale && image_too_small(width, height, size) {
        return Err(Error::format(
            path,
            format!(
                "image is {width}x{height}, its shorter side {} is smaller than the requested \
                 size {size} (upscaling was not allowed)",
                width.min(height)
            ),
        ));
    }
    Ok(())
}

/// VQGAN input: loads an RGB image, checks its size with [`check_min_size`] and returns
/// [`resize_shorter_center_crop`] of it.
pub fn load_rgb_square(path: impl AsRef<Path>, size: u32, allow_upscale: bool) -> Result<RgbImage> {
    let path = path.as_ref();
    let img = load_rgb(path)?;
    check_min_size(path, img.width(), img.height(), size, allow_upscale)?;
    resize_shorter_center_crop(&img, size)
}

fn check_size(what: &str, w: u32, h: u32) -> Result<()> {
    if w == 0 || h == 0 {
        return Err(Error::bad_data(format!(
            "{what}: size must be positive, got {w}x{h}"
        )));
    }
    if w > MAX_SIDE || h > MAX_SIDE {
        return Err(Error::resource_limit(format!(
            "{what}: size {w}x{h} is larger than {MAX_SIDE}x{MAX_SIDE}"
        )));
    }
    Ok(())
}

/// Resizes to exactly `width`×`height` (aspect ratio not kept).
pub fn resize_exact<P>(img: &Image8<P>, width: u32, height: u32) -> Result<Image8<P>>
where
    P: Pixel<Subpixel = u8> + 'static,
{
    check_size("resize", width, height)?;
    if img.width() == 0 || img.height() == 0 {
        return Err(Error::bad_data("resize: the image is empty"));
    }
    Ok(image::imageops::resize(img, width, height, FILTER))
}

/// Resizes so that the shorter side is `size` (longer side rounded), then takes the centered
/// `size`×`size` crop (offsets rounded down, as albumentations' `CenterCrop`).
pub fn resize_shorter_center_crop<P>(img: &Image8<P>, size: u32) -> Result<Image8<P>>
where
    P: Pixel<Subpixel = u8> + 'static,
{
    check_size("center crop", size, size)?;
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 {
        return Err(Error::bad_data("center crop: the image is empty"));
    }
    let short = w.min(h) as f64;
    let scale = size as f64 / short;
    let (nw, nh) = if w <= h {
        (size, ((h as f64 * scale).round() as u32).max(size))
    } else {
        (((w as f64 * scale).round() as u32).max(size), size)
    };
    let x = (nw - size) / 2;
    let y = (nh - size) / 2;
    // Only the crop is resized: the same bytes as resizing whole with [`FILTER`] and cropping,
    // without the whole (an up-scaled sliver's would be gigabytes).
    Ok(crate::catmull_rom::resize_window(
        img,
        (nw, nh),
        x..x + size,
        y..y + size,
    ))
}

/// Fits the image inside `size`×`size` keeping its aspect ratio and pads the rest with
/// `fill`, centered.
pub fn letterbox<P>(img: &Image8<P>, size: u32, fill: P) -> Result<Image8<P>>
where
    P: Pixel<Subpixel = u8> + 'static,
{
    check_size("letterbox", size, size)?;
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 {
        return Err(Error::bad_data("letterbox: the image is empty"));
    }
    let scale = (size as f64 / w as f64).min(size as f64 / h as f64);
    let nw = ((w as f64 * scale).round() as u32).clamp(1, size);
    let nh = ((h as f64 * scale).round() as u32).clamp(1, size);
    let resized = image::imageops::resize(img, nw, nh, FILTER);
    let mut out = ImageBuffer::from_pixel(size, size, fill);
    image::imageops::replace(
        &mut out,
        &resized,
        ((size - nw) / 2) as i64,
        ((size - nh) / 2) as i64,
    );
    Ok(out)
}

/// How [`fit_dynamic`] brings an image to `size`×`size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// [`resize_exact`] (aspect ratio not kept).
    Exact,
    /// [`letterbox`] with the given gray level as fill (replicated for RGB).
    Letterbox(u8),
    /// [`resize_shorter_center_crop`].
    CenterCrop,
}

/// Brings a gray or RGB image (as returned by [`load_image`]) to `size`×`size`. Other pixel
/// types are converted to RGB first.
pub fn fit_dynamic(img: &DynamicImage, size: u32, fit: Fit) -> Result<DynamicImage> {
    fn go<P: Pixel<Subpixel = u8> + 'static>(
        i: &Image8<P>,
        size: u32,
        fit: Fit,
        fill: P,
    ) -> Result<Image8<P>> {
        match fit {
            Fit::Exact => resize_exact(i, size, size),
            Fit::Letterbox(_) => letterbox(i, size, fill),
            Fit::CenterCrop => resize_shorter_center_crop(i, size),
        }
    }
    let g = match fit {
        Fit::Letterbox(g) => g,
        _ => 0,
    };
    Ok(match img {
        DynamicImage::ImageLuma8(i) => DynamicImage::ImageLuma8(go(i, size, fit, Luma([g]))?),
        DynamicImage::ImageRgb8(i) => DynamicImage::ImageRgb8(go(i, size, fit, Rgb([g, g, g]))?),
        other => DynamicImage::ImageRgb8(go(&other.to_rgb8(), size, fit, Rgb([g, g, g]))?),
    })
}

/// Images that can be laid out as `(c, h, w)` bytes.
pub trait AsChw {
    /// Returns `(channels, height, width, bytes in CHW order)`.
    fn to_chw_u8(&self) -> (usize, usize, usize, Vec<u8>);
}

impl<P: Pixel<Subpixel = u8>> AsChw for Image8<P> {
    fn to_chw_u8(&self) -> (usize, usize, usize, Vec<u8>) {
        let c = P::CHANNEL_COUNT as usize;
        let (w, h) = (self.width() as usize, self.height() as usize);
        let hwc = self.as_raw();
        if c == 1 {
            return (1, h, w, hwc[..h * w].to_vec());
        }
        let mut out = vec![0u8; c * h * w];
        let plane = h * w;
        for (i, px) in hwc.chunks_exact(c).enumerate() {
            for (k, &v) in px.iter().enumerate() {
                out[k * plane + i] = v;
            }
        }
        (c, h, w, out)
    }
}

impl AsChw for DynamicImage {
    /// Gray images give one channel, everything else three (alpha dropped).
    fn to_chw_u8(&self) -> (usize, usize, usize, Vec<u8>) {
        match self {
            DynamicImage::ImageLuma8(i) => i.to_chw_u8(),
            DynamicImage::ImageRgb8(i) => i.to_chw_u8(),
            DynamicImage::ImageLuma16(_)
            | DynamicImage::ImageLumaA8(_)
            | DynamicImage::ImageLumaA16(_) => self.to_luma8().to_chw_u8(),
            other => other.to_rgb8().to_chw_u8(),
        }
    }
}

/// `(c, h, w)` bytes to a `(c, h, w)` `f32` tensor.
pub fn chw_u8_to_tensor(
    data: &[u8],
    (c, h, w): (usize, usize, usize),
    range: PixelRange,
    device: &Device,
) -> Result<Tensor> {
    if data.len() != c * h * w {
        return Err(Error::bad_data(format!(
            "image data has {} bytes, expected {c}x{h}x{w}",
            data.len()
        )));
    }
    let v: Vec<f32> = data.iter().map(|&x| range.to_f32(x)).collect();
    Ok(Tensor::from_vec(v, (c, h, w), device)?)
}

/// An image to a `(c, h, w)` `f32` tensor on `device`.
pub fn to_tensor_chw(img: &impl AsChw, range: PixelRange, device: &Device) -> Result<Tensor> {
    let (c, h, w, data) = img.to_chw_u8();
    chw_u8_to_tensor(&data, (c, h, w), range, device)
}

/// `(c, h, w)` `f32` values (c = 1 or 3) to an RGB image, clamped and rounded.
pub fn chw_f32_to_rgb(
    data: &[f32],
    (c, h, w): (usize, usize, usize),
    range: PixelRange,
) -> Result<RgbImage> {
    if c != 1 && c != 3 {
        return Err(Error::bad_data(format!(
            "an image tensor needs 1 or 3 channels, got {c}"
        )));
    }
    if data.len() != c * h * w {
        return Err(Error::bad_data(format!(
            "image data has {} values, expected {c}x{h}x{w}",
            data.len()
        )));
    }
    let (wu, hu) = (
        u32::try_from(w).map_err(|_| Error::resource_limit("image too wide"))?,
        u32::try_from(h).map_err(|_| Error::resource_limit("image too high"))?,
    );
    let plane = h * w;
    let mut out = Vec::with_capacity(3 * plane);
    for i in 0..plane {
        for k in 0..3 {
            let ch = if c == 1 { 0 } else { k };
            out.push(range.to_u8(data[ch * plane + i]));
        }
    }
    Ok(RgbImage::from_raw(wu, hu, out).expect("buffer size matches"))
}

/// A `(c, h, w)` or `(1, c, h, w)` tensor (c = 1 or 3, any float dtype, any device) to an
/// RGB image. For [`PixelRange::MinusOneOne`] this is taming's output conversion:
/// `clamp(-1, 1)`, `(x + 1) / 2`, `* 255`, rounded (taming's script truncates instead).
pub fn from_tensor_chw(t: &Tensor, range: PixelRange) -> Result<RgbImage> {
    let t = match t.rank() {
        3 => t.clone(),
        4 if t.dim(0)? == 1 => t.squeeze(0)?,
        _ => {
            return Err(Error::bad_data(format!(
                "expected an image tensor of shape (c, h, w) or (1, c, h, w), got {:?}",
                t.dims()
            )))
        }
    };
    let (c, h, w) = t.dims3()?;
    let v = t
        .to_dtype(DType::F32)?
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    chw_f32_to_rgb(&v, (c, h, w), range)
}

/// Writes an 8-bit gray or RGB image as PNG, atomically.
pub fn save_png<P>(path: impl AsRef<Path>, img: &Image8<P>) -> Result<()>
where
    P: Pixel<Subpixel = u8> + PixelWithColorType,
{
    save_as(path.as_ref(), img, image::ImageFormat::Png)
}

/// The format an output image file gets from its extension (png, jpg/jpeg, webp — lossless —,
/// bmp; any case); any other extension, or none, is an error naming the file.
pub fn output_format(path: impl AsRef<Path>) -> Result<image::ImageFormat> {
    let path = path.as_ref();
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => Ok(image::ImageFormat::Png),
        "jpg" | "jpeg" => Ok(image::ImageFormat::Jpeg),
        "webp" => Ok(image::ImageFormat::WebP),
        "bmp" => Ok(image::ImageFormat::Bmp),
        "" => Err(Error::format(
            path,
            format!(
                "an output image needs an extension to choose its format ({})",
                IMAGE_EXTENSIONS.join(", ")
            ),
        )),
        e => Err(Error::format(
            path,
            format!(
                "cannot write images of extension `.{e}` (supported: {})",
                IMAGE_EXTENSIONS.join(", ")
            ),
        )),
    }
}

/// Writes an 8-bit gray or RGB image, atomically, in the format its extension names
/// ([`output_format`]).
pub fn save_image<P>(path: impl AsRef<Path>, img: &Image8<P>) -> Result<()>
where
    P: Pixel<Subpixel = u8> + PixelWithColorType,
{
    let path = path.as_ref();
    save_as(path, img, output_format(path)?)
}

fn save_as<P>(path: &Path, img: &Image8<P>, format: image::ImageFormat) -> Result<()>
where
    P: Pixel<Subpixel = u8> + PixelWithColorType,
{
    let mut buf = std::io::Cursor::new(Vec::new());
    img.write_to(&mut buf, format).map_err(|e| {
        Error::format(
            path,
            format!("cannot encode {} ({e})", format.extensions_str()[0]),
        )
    })?;
    write_bytes_atomic(path, buf.get_ref())
}

/// Places images left to right, top-aligned, separated by `gap` white columns, on a white
/// canvas as high as the tallest image (e.g. original | reconstruction).
pub fn side_by_side(imgs: &[RgbImage], gap: u32) -> RgbImage {
    let height = imgs.iter().map(|i| i.height()).max().unwrap_or(0);
    let width =
        imgs.iter().map(|i| i.width()).sum::<u32>() + gap * (imgs.len().saturating_sub(1) as u32);
    let mut out = RgbImage::from_pixel(width, height, Rgb([255, 255, 255]));
    let mut x = 0i64;
    for i in imgs {
        image::imageops::replace(&mut out, i, x, 0);
        x += i.width() as i64 + gap as i64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            Rgb([(x * 7 % 256) as u8, (y * 5 % 256) as u8, 77])
        })
    }

    fn png_header_only(w: u32, h: u32) -> Vec<u8> {
        let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = b"IHDR".to_vec();
        chunk.extend_from_slice(&w.to_be_bytes());
        chunk.extend_from_slice(&h.to_be_bytes());
        chunk.extend_from_slice(&[8, 2, 0, 0, 0]);
        let mut crc = flate2::Crc::new();
        crc.update(&chunk);
        v.extend_from_slice(&13u32.to_be_bytes());
        v.extend_from_slice(&chunk);
        v.extend_from_slice(&crc.sum().to_be_bytes());
        // An empty IDAT chunk, so that the decoder's header parsing completes.
        let mut crc = flate2::Crc::new();
        crc.update(b"IDAT");
        v.extend_from_slice(&0u32.to_be_bytes());
        v.extend_from_slice(b"IDAT");
        v.extend_from_slice(&crc.sum().to_be_bytes());
        v
    }

    #[test]
    fn load_errors_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing.png");
        let e = load_rgb(&missing).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(e.to_string().contains("missing.png"));

        let text = d.path().join("notes.txt");
        std::fs::write(&text, "hello, not an image").unwrap();
        let e = load_rgb(&text).unwrap_err().to_string();
        assert!(e.contains("notes.txt") && e.contains("not an image"), "{e}");

        let fake = d.path().join("fake.png");
        std::fs::write(&fake, "hello, not a png").unwrap();
        let e = load_rgb(&fake).unwrap_err().to_string();
        assert!(e.contains("fake.png") && e.contains("corrupt"), "{e}");

        let good = d.path().join("good.png");
        save_png(&good, &gradient(40, 30)).unwrap();
        let bytes = std::fs::read(&good).unwrap();
        let cut = d.path().join("cut.png");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let e = load_rgb(&cut).unwrap_err().to_string();
        assert!(e.starts_with(&cut.display().to_string()), "{e}");
        assert_eq!(e.lines().count(), 1);

        let huge = d.path().join("huge.png");
        std::fs::write(&huge, png_header_only(20000, 100)).unwrap();
        let e = load_rgb(&huge).unwrap_err().to_string();
        assert!(
            e.contains("huge.png") && e.contains("20000x100") && e.contains("limit"),
            "{e}"
        );
        // Within the side limit but 16384x16384 RGBA 16-bit would need 2 GiB.
        let big = d.path().join("big.png");
        let mut b = png_header_only(16384, 16384);
        b[24] = 16; // bit depth
        b[25] = 6; // RGBA
        let mut crc = flate2::Crc::new();
        crc.update(&b[12..29]);
        b[29..33].copy_from_slice(&crc.sum().to_be_bytes());
        std::fs::write(&big, b).unwrap();
        let e = load_rgb(&big).unwrap_err().to_string();
        assert!(e.contains("big.png") && e.contains("too large"), "{e}");
    }

    #[test]
    fn truncated_jpeg_is_an_error_and_outputs_follow_their_extension() {
        let d = tempfile::tempdir().unwrap();
        let jpg = d.path().join("a.jpg");
        save_image(&jpg, &gradient(64, 48)).unwrap();
        let bytes = std::fs::read(&jpg).unwrap();
        assert!(bytes.starts_with(&[0xFF, 0xD8]) && jpeg_is_complete(&bytes));
        assert_eq!(load_rgb(&jpg).unwrap().dimensions(), (64, 48));
        let cut = d.path().join("cut.jpg");
        std::fs::write(&cut, &bytes[..bytes.len() - 40]).unwrap();
        let e = load_rgb(&cut).unwrap_err().to_string();
        assert!(e.contains("cut.jpg") && e.contains("truncated"), "{e}");
        let e = save_image(d.path().join("a.gif"), &gradient(4, 4))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.gif") && e.contains("`.gif`"), "{e}");
        assert!(output_format("x").is_err());
    }

    #[test]
    fn load_image_channels() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.png");
        let img = RgbImage::from_fn(3, 2, |x, _| match x {
            0 => Rgb([255, 0, 0]),
            1 => Rgb([0, 255, 0]),
            _ => Rgb([10, 20, 30]),
        });
        save_png(&p, &img).unwrap();
        assert_eq!(load_rgb(&p).unwrap(), img);
        let g = load_image(&p, 1).unwrap();
        let g = g.as_luma8().unwrap();
        // PIL: L = R*299/1000 + G*587/1000 + B*114/1000
        assert_eq!(g.get_pixel(0, 0).0, [76]);
        assert_eq!(g.get_pixel(1, 0).0, [150]);
        assert_eq!(g.get_pixel(2, 1).0, [18]);
        assert!(load_image(&p, 3).unwrap().as_rgb8().is_some());
        assert!(load_image(&p, 2).is_err());
        // Gray PNG stays as it is.
        let gp = d.path().join("g.png");
        save_png(&gp, g).unwrap();
        assert_eq!(&load_gray(&gp).unwrap(), g);
        assert_eq!(load_rgb(&gp).unwrap().get_pixel(0, 0).0, [76, 76, 76]);
        assert_eq!(image_dimensions(&gp).unwrap(), (3, 2));
    }

    #[test]
    fn resizing() {
        let img = gradient(200, 100);
        let c = resize_shorter_center_crop(&img, 64).unwrap();
        assert_eq!(c.dimensions(), (64, 64));
        // Identity when already square at the right size.
        let sq = gradient(32, 32);
        assert_eq!(resize_shorter_center_crop(&sq, 32).unwrap(), sq);
        // A crop without resizing keeps the center pixels exactly.
        let wide = gradient(40, 32);
        let c = resize_shorter_center_crop(&wide, 32).unwrap();
        assert_eq!(c.get_pixel(0, 0), wide.get_pixel(4, 0));

        let l = letterbox(&img, 50, Rgb([9, 9, 9])).unwrap();
        assert_eq!(l.dimensions(), (50, 50));
        assert_eq!(l.get_pixel(25, 5).0, [9, 9, 9]);
        assert_eq!(l.get_pixel(25, 44).0, [9, 9, 9]);
        assert_ne!(l.get_pixel(25, 25).0, [9, 9, 9]);

        let e = resize_exact(&img, 10, 7).unwrap();
        assert_eq!(e.dimensions(), (10, 7));
        assert!(resize_exact(&img, 0, 7).is_err());
        assert!(resize_shorter_center_crop(&RgbImage::new(0, 5), 4).is_err());
        assert!(letterbox(&img, 0, Rgb([0, 0, 0])).is_err());

        let g = GrayImage::from_pixel(30, 20, Luma([100]));
        assert_eq!(letterbox(&g, 16, Luma([0])).unwrap().dimensions(), (16, 16));
        let dy = fit_dynamic(&DynamicImage::ImageLuma8(g), 8, Fit::CenterCrop).unwrap();
        assert_eq!(dy.as_luma8().unwrap().get_pixel(3, 3).0, [100]);
    }

    #[test]
    fn min_size_check() {
        assert!(image_too_small(200, 300, 256));
        assert!(!image_too_small(256, 300, 256));
        let e = check_min_size("a.jpg", 200, 300, 256, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("a.jpg: ") && e.contains("200x300") && e.contains("256"),
            "{e}"
        );
        check_min_size("a.jpg", 200, 300, 256, true).unwrap();
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("small.png");
        save_png(&p, &gradient(20, 30)).unwrap();
        assert!(load_rgb_square(&p, 24, false).is_err());
        assert_eq!(
            load_rgb_square(&p, 24, true).unwrap().dimensions(),
            (24, 24)
        );
    }

    #[test]
    fn tensor_round_trip() {
        let img = gradient(5, 4);
        for range in [PixelRange::ZeroOne, PixelRange::MinusOneOne] {
            let t = to_tensor_chw(&img, range, &Device::Cpu).unwrap();
            assert_eq!(t.dims(), &[3, 4, 5]);
            assert_eq!(from_tensor_chw(&t, range).unwrap(), img);
            assert_eq!(
                from_tensor_chw(&t.unsqueeze(0).unwrap(), range).unwrap(),
                img
            );
        }
        let t = to_tensor_chw(&img, PixelRange::MinusOneOne, &Device::Cpu).unwrap();
        let v = t.to_vec3::<f32>().unwrap();
        // channel 2 is 77 everywhere, x=1 of channel 0 is 7
        assert!((v[2][0][0] - (77.0 / 127.5 - 1.0)).abs() < 1e-6);
        assert!((v[0][0][1] - (7.0 / 127.5 - 1.0)).abs() < 1e-6);
        // Clamping and rounding.
        let t = Tensor::new(&[[[-3.0f32, 0.0, 2.0, f32::NAN]]], &Device::Cpu).unwrap();
        let o = from_tensor_chw(&t, PixelRange::MinusOneOne).unwrap();
        let px: Vec<u8> = o.pixels().map(|p| p.0[0]).collect();
        assert_eq!(px, vec![0, 128, 255, 0]);
        assert!(from_tensor_chw(
            &Tensor::zeros((2, 3, 3), DType::F32, &Device::Cpu).unwrap(),
            PixelRange::ZeroOne
        )
        .is_err());
        assert!(from_tensor_chw(
            &Tensor::zeros((3, 3), DType::F32, &Device::Cpu).unwrap(),
            PixelRange::ZeroOne
        )
        .is_err());
        let g = GrayImage::from_pixel(2, 2, Luma([51]));
        let t = to_tensor_chw(&g, PixelRange::ZeroOne, &Device::Cpu).unwrap();
        assert_eq!(t.dims(), &[1, 2, 2]);
        assert!(
            chw_u8_to_tensor(&[1, 2, 3], (1, 2, 2), PixelRange::ZeroOne, &Device::Cpu).is_err()
        );
    }

    #[test]
    fn side_by_side_and_save() {
        let a = RgbImage::from_pixel(3, 2, Rgb([0, 0, 0]));
        let b = RgbImage::from_pixel(2, 4, Rgb([1, 1, 1]));
        let s = side_by_side(&[a, b], 2);
        assert_eq!(s.dimensions(), (7, 4));
        assert_eq!(s.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(s.get_pixel(0, 3).0, [255, 255, 255]);
        assert_eq!(s.get_pixel(3, 0).0, [255, 255, 255]);
        assert_eq!(s.get_pixel(5, 3).0, [1, 1, 1]);
        assert_eq!(side_by_side(&[], 4).dimensions(), (0, 0));
        let d = tempfile::tempdir().unwrap();
        let e = save_png(d.path().join("no/such/dir/x.png"), &s).unwrap_err();
        assert!(matches!(e, Error::Io { .. }));
    }

    /// A 34-byte lossless WebP declaring `side`×`side` pixels, without image data.
    fn webp_declaring(side: u32) -> Vec<u8> {
        let bits = (side - 1) | ((side - 1) << 14);
        let mut vp8l = vec![0x2f];
        vp8l.extend(bits.to_le_bytes());
        vp8l.extend([0u8; 9]);
        let mut v = b"RIFF".to_vec();
        v.extend((4 + 8 + vp8l.len() as u32).to_le_bytes());
        v.extend(b"WEBPVP8L");
        v.extend((vp8l.len() as u32).to_le_bytes());
        v.extend(vp8l);
        v
    }

    #[test]
    fn webp_declaring_16383_squared_is_refused_from_its_header_before_decoding() {
        let b = webp_declaring(16383);
        assert_eq!(b.len(), 34);
        let p = Path::new("big.webp");
        assert_eq!(header_of_bytes(p, &b).unwrap().1, (16383, 16383));
        let e = decode_rgb_bytes(p, &b).unwrap_err().to_string();
        assert!(
            e.contains("big.webp")
                && e.contains("16383x16383")
                && e.contains("IMGSEQ_MAX_MEMORY_GB"),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("big.webp");
        std::fs::write(&f, &b).unwrap();
        let e = load_dynamic(&f).unwrap_err().to_string();
        assert!(e.contains("16383x16383"), "{e}");
    }
}
