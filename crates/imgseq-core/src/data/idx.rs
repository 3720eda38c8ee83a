//! IDX files (MNIST / Fashion-MNIST), plain or gzipped (detected by the `1f 8b` magic).
//!
//! Images: magic `0x00000803`, then `n, rows, cols` as big-endian `u32`, then `n*rows*cols`
//! bytes. Labels: magic `0x00000801`, then `n`, then `n` bytes.

use super::{Dataset, Split};
use crate::{Error, Result};
use image::GrayImage;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the Debian package `dataset-fashion-mnist` installs the files.
pub const FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST class names, by label.
pub const FASHION_MNIST_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;

/// Largest data part of an IDX file read (EMNIST's largest split is ~550 MB).
pub const MAX_IDX_BYTES: usize = 1 << 30;

/// Most bytes a gzip member can inflate to per compressed byte (deflate's limit is ~1032).
const MAX_GZIP_RATIO: u64 = 1100;

/// An opened IDX file: a reader positioned at the data, the file's (compressed) length and
/// whether it is gzipped.
struct Opened {
    r: Box<dyn Read>,
    file_len: u64,
    gzip: bool,
}

fn open(path: &Path) -> Result<Opened> {
    let (f, file_len) = crate::weights::open_regular_file(path)?;
    // No more than the length the file had when opened (it may grow while being read).
    Opened::new(path, Box::new(f.take(file_len)), file_len)
}

impl Opened {
    /// `src` holds the `file_len` bytes of an IDX file, plain or gzipped.
    fn new(path: &Path, mut src: Box<dyn Read>, file_len: u64) -> Result<Self> {
        let mut magic = [0u8; 2];
        let n = read_full(&mut *src, &mut magic).map_err(|e| Error::io(path, e))?;
        let head = std::io::Cursor::new(magic[..n].to_vec());
        let r = std::io::BufReader::new(head.chain(src));
        let gzip = n == 2 && magic == [0x1f, 0x8b];
        let r: Box<dyn Read> = if gzip {
            Box::new(flate2::bufread::MultiGzDecoder::new(r))
        } else {
            Box::new(r)
        };
        Ok(Opened { r, file_len, gzip })
    }

    fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let len = bytes.len() as u64;
        Self::new(path, Box::new(std::io::Cursor::new(bytes)), len)
    }
}

/// Reads as many bytes as possible into `buf` (short only at end of input).
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn read_err(path: &Path, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::InvalidInput
        | std::io::ErrorKind::InvalidData
        | std::io::ErrorKind::UnexpectedEof => {
            Error::format(path, format!("corrupt or truncated gzip data ({e})"))
        }
        _ => Error::io(path, e),
    }
}

/// The header of an IDX file of unsigned bytes, read and checked against the file's size
/// and [`MAX_IDX_BYTES`]; the data is not read yet.
struct Header {
    r: Box<dyn Read>,
    dims: Vec<usize>,
    /// Bytes of data the header announces.
    size: usize,
}

fn read_header(path: &Path, opened: Opened, magic: u32, what: &str) -> Result<Header> {
    let Opened {
        mut r,
        file_len,
        gzip,
    } = opened;
    let ndim = (magic & 0xff) as usize;
    let mut head = vec![0u8; 4 + 4 * ndim];
    let got = read_full(&mut *r, &mut head).map_err(|e| read_err(path, e))?;
    if got >= 4 {
        let m = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if m != magic {
            let hint = match m {
                IMAGES_MAGIC => " (this is an IDX image file)",
                LABELS_MAGIC => " (this is an IDX label file)",
                _ => "",
            };
            return Err(Error::format(
                path,
                format!("not an IDX {what} file: magic 0x{m:08x}, expected 0x{magic:08x}{hint}"),
            ));
        }
    }
    if got < head.len() {
        return Err(Error::format(
            path,
            format!("truncated IDX header ({got} of {} bytes)", head.len()),
        ));
    }
    let dims: Vec<usize> = head[4..]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let too_large = || Error::format(path, format!("IDX dimensions {dims:?} are too large"));
    let size = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_large)?;
    if size > MAX_IDX_BYTES {
        return Err(Error::format(
            path,
            format!(
                "the header announces {dims:?} ({size} bytes of data), more than imgseq reads \
                 ({MAX_IDX_BYTES})"
            ),
        ));
    }
    // What the file can hold at most, checked before anything is inflated.
    let room = if gzip {
        file_len.saturating_mul(MAX_GZIP_RATIO)
    } else {
        file_len.saturating_sub(head.len() as u64)
    };
    if size as u64 > room {
        return Err(Error::format(
            path,
            format!(
                "truncated: the header announces {dims:?} ({size} bytes of data), a \
                 {file_len}-byte {}file cannot hold them",
                if gzip { "gzip " } else { "" }
            ),
        ));
    }
    Ok(Header { r, dims, size })
}

/// Reads the data the header announces (through `take`, so no more is ever inflated) and
/// checks that nothing follows it.
fn read_data(path: &Path, h: Header) -> Result<(Vec<usize>, Vec<u8>)> {
    let Header { mut r, dims, size } = h;
    // Do not trust the header for the allocation; grow as data arrives.
    let mut data = Vec::with_capacity(size.min(64 << 20));
    (&mut r)
        .take(size as u64)
        .read_to_end(&mut data)
        .map_err(|e| read_err(path, e))?;
    if data.len() < size {
        return Err(Error::format(
            path,
            format!(
                "truncated: the header announces {dims:?} ({size} bytes of data), the file has \
                 {}",
                data.len()
            ),
        ));
    }
    let mut extra = [0u8; 1];
    if read_full(&mut *r, &mut extra).map_err(|e| read_err(path, e))? > 0 {
        return Err(Error::format(
            path,
            format!("unexpected data after the {size} bytes announced by the header {dims:?}"),
        ));
    }
    Ok((dims, data))
}

/// Reads an IDX file of unsigned bytes with the given magic and number of dimensions; returns
/// `(dims, data)`.
fn read_idx(path: &Path, magic: u32, what: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    read_data(path, read_header(path, open(path)?, magic, what)?)
}

fn check_image_dims(path: &Path, d: &[usize]) -> Result<()> {
    if d[1] == 0 || d[2] == 0 {
        return Err(Error::format(
            path,
            format!("images have an empty size {}x{}", d[1], d[2]),
        ));
    }
    Ok(())
}

/// Reads an IDX image file; returns `(n, rows, cols, pixels)`.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<(usize, usize, usize, Vec<u8>)> {
    let path = path.as_ref();
    let (d, data) = read_idx(path, IMAGES_MAGIC, "image")?;
    check_image_dims(path, &d)?;
    Ok((d[0], d[1], d[2], data))
}

/// Reads an IDX label file.
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>> {
    Ok(read_idx(path.as_ref(), LABELS_MAGIC, "label")?.1)
}

/// Whether `path` is named like an IDX image file (`…idx3-ubyte`, optionally `.gz`): how the
/// data commands tell one from an image folder or a list.
pub fn is_idx_images_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.trim_end_matches(".gz").ends_with("idx3-ubyte"))
}

/// The label file of an IDX image file: `X-images-idx3-ubyte[.gz]` → the existing one of
/// `X-labels-idx1-ubyte.gz` and `X-labels-idx1-ubyte` beside it.
pub fn sibling_labels(images: &Path) -> Result<PathBuf> {
    let name = images.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name.trim_end_matches(".gz");
    let Some(prefix) = stem.strip_suffix("images-idx3-ubyte") else {
        return Err(Error::format(
            images,
            "not named like an IDX image file (…-images-idx3-ubyte[.gz]), so its labels cannot be found",
        ));
    };
    let base = format!("{prefix}labels-idx1-ubyte");
    let dir = images.parent().unwrap_or(Path::new("."));
    for cand in [format!("{base}.gz"), base.clone()] {
        let p = dir.join(cand);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::format(
        images,
        format!("its label file {base}[.gz] is not beside it"),
    ))
}

/// The images of an IDX image file, each centred on a zero `side`×`side` canvas (offsets
/// `(side − h)/2`, `(side − w)/2`: the ViT's `pad_to`, so the two see the same pixels).
pub fn load_idx_images_centered(path: impl AsRef<Path>, side: usize) -> Result<Vec<GrayImage>> {
    let path = path.as_ref();
    let (n, h, w, data) = read_idx_images(path)?;
    if h > side || w > side {
        return Err(Error::format(
            path,
            format!("images are {h}x{w}, larger than the {side}x{side} canvas"),
        ));
    }
    // Each image grows to the canvas: 3M 1x1 images (3 KB of gzip) would take 3 GB at 32².
    crate::budget::check_memory((n as u128) * (side * side) as u128 + n as u128 * 64).map_err(
        |e| {
            Error::format(
                path,
                format!("{n} images on a {side}x{side} canvas: holding them {e}"),
            )
        },
    )?;
    let (oy, ox) = ((side - h) / 2, (side - w) / 2);
    Ok((0..n)
        .map(|i| {
            let src = &data[i * h * w..(i + 1) * h * w];
            let mut img = GrayImage::new(side as u32, side as u32);
            let dst: &mut [u8] = &mut img;
            for y in 0..h {
                let d = (y + oy) * side + ox;
                dst[d..d + w].copy_from_slice(&src[y * w..(y + 1) * w]);
            }
            img
        })
        .collect())
}

/// Loads an IDX image file and its label file as a one-channel [`Dataset`].
pub fn load_idx_pair(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
    class_names: &[&str],
) -> Result<Dataset> {
    let (ip, lp) = (images.as_ref(), labels.as_ref());
    load_opened_pair(ip, open(ip)?, lp, || open(lp), class_names)
}

/// What the `idx` fuzz target runs (and the corpus replay test): the bytes split at the
/// offset in their first two bytes into an image file and a label file (each plain or
/// gzipped), loaded as a pair and each on its own. Must never panic.
#[doc(hidden)]
pub fn fuzz_idx_bytes(data: &[u8]) {
    let Some((split, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let at = (u16::from_le_bytes(*split) as usize).min(rest.len());
    let (imgs, labs) = rest.split_at(at);
    let (ip, lp) = (Path::new("fuzz-images"), Path::new("fuzz-labels"));
    let open = |p, b: &[u8]| Opened::from_bytes(p, b.to_vec());
    if let Ok(i) = open(ip, imgs) {
        let _ = load_opened_pair(ip, i, lp, || open(lp, labs), &FASHION_MNIST_CLASSES);
    }
    for (p, b, magic) in [(ip, imgs, IMAGES_MAGIC), (lp, labs, LABELS_MAGIC)] {
        if let Ok(o) = open(p, b) {
            let _ = read_header(p, o, magic, "fuzz").and_then(|h| read_data(p, h));
        }
    }
}

/// [`load_idx_pair`] on opened files; the label file is opened only once the image header
/// has been checked.
fn load_opened_pair(
    ip: &Path,
    images: Opened,
    lp: &Path,
    labels: impl FnOnce() -> Result<Opened>,
    class_names: &[&str],
) -> Result<Dataset> {
    // Both headers first: counts that disagree are an error before any data is inflated.
    let ih = read_header(ip, images, IMAGES_MAGIC, "image")?;
    check_image_dims(ip, &ih.dims)?;
    let lh = read_header(lp, labels()?, LABELS_MAGIC, "label")?;
    let n = ih.dims[0];
    if lh.dims[0] != n {
        return Err(Error::format(
            lp,
            format!("{} labels, but {} has {n} images", lh.dims[0], ip.display()),
        ));
    }
    let (d, pixels) = read_data(ip, ih)?;
    let (rows, cols) = (d[1], d[2]);
    let labels = read_data(lp, lh)?.1;
    if let Some((i, &l)) = labels
        .iter()
        .enumerate()
        .find(|(_, &l)| l as usize >= class_names.len())
    {
        return Err(Error::format(
            lp,
            format!(
                "label {l} of item {i} is not a class id (0..{})",
                class_names.len()
            ),
        ));
    }
    Dataset::new(
        pixels,
        labels.into_iter().map(u16::from).collect(),
        (1, rows, cols),
        class_names.iter().map(|s| s.to_string()).collect(),
    )
}

fn find(dir: &Path, name: &str) -> Result<PathBuf> {
    let gz = dir.join(format!("{name}.gz"));
    if gz.is_file() {
        return Ok(gz);
    }
    let plain = dir.join(name);
    if plain.is_file() {
        return Ok(plain);
    }
    Err(Error::format(
        dir,
        format!(
            "Fashion-MNIST file {name}.gz not found; install the Debian package \
             dataset-fashion-mnist or name the folder that holds the files"
        ),
    ))
}

/// Loads Fashion-MNIST (60000 train / 10000 test images, 1×28×28) from `dir` (default
/// [`FASHION_MNIST_DIR`]). Files may be gzipped (`train-images-idx3-ubyte.gz`, ...) or not.
pub fn fashion_mnist(dir: Option<&Path>, split: Split) -> Result<Dataset> {
    let dir = dir.unwrap_or(Path::new(FASHION_MNIST_DIR));
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let images = find(dir, &format!("{prefix}-images-idx3-ubyte"))?;
    let labels = find(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
    load_idx_pair(images, labels, &FASHION_MNIST_CLASSES)
}

/// The images of an IDX image file (Fashion-MNIST) centred on a zero `side`×`side` canvas
/// ([`load_idx_images_centered`], the ViT's geometry), as gray RGB images (r = g = b: a
/// one-channel model reads back the stored pixels).
pub fn load_idx_rgb_centered(path: &Path, side: usize) -> Result<Vec<image::RgbImage>> {
    use rayon::prelude::*;
    let gray = load_idx_images_centered(path, side)?;
    Ok(gray
        .into_par_iter()
        .map(|g| image::DynamicImage::ImageLuma8(g).to_rgb8())
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    pub(crate) fn idx_images(n: usize, rows: usize, cols: usize) -> Vec<u8> {
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [n, rows, cols] {
            v.extend_from_slice(&(d as u32).to_be_bytes());
        }
        v.extend((0..n * rows * cols).map(|i| (i % 251) as u8));
        v
    }

    pub(crate) fn idx_labels(labels: &[u8]) -> Vec<u8> {
        let mut v = LABELS_MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&(labels.len() as u32).to_be_bytes());
        v.extend_from_slice(labels);
        v
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn idx_images_centred_on_the_canvas_and_their_labels_found_beside_them() {
        let d = tempfile::tempdir().unwrap();
        let ip = d.path().join("t10k-images-idx3-ubyte.gz");
        std::fs::write(&ip, gz(&idx_images(2, 3, 4))).unwrap();
        let imgs = load_idx_images_centered(&ip, 8).unwrap();
        assert_eq!(imgs.len(), 2);
        let (_, _, _, raw) = read_idx_images(&ip).unwrap();
        for (i, img) in imgs.iter().enumerate() {
            assert_eq!(img.dimensions(), (8, 8));
            for y in 0..8u32 {
                for x in 0..8u32 {
                    // Offsets ((8 − 3)/2, (8 − 4)/2) = (2, 2): the ViT's pad_to.
                    let inside = (2..5).contains(&y) && (2..6).contains(&x);
                    let want = if inside {
                        raw[i * 12 + (y as usize - 2) * 4 + (x as usize - 2)]
                    } else {
                        0
                    };
                    assert_eq!(img.get_pixel(x, y).0[0], want, "image {i} at ({x}, {y})");
                }
            }
        }
        let e = load_idx_images_centered(&ip, 3).unwrap_err().to_string();
        assert!(
            e.contains("t10k-images") && e.contains("larger than the 3x3"),
            "{e}"
        );

        assert!(is_idx_images_name(&ip));
        assert!(is_idx_images_name(Path::new("a/train-images-idx3-ubyte")));
        assert!(!is_idx_images_name(Path::new("train-labels-idx1-ubyte.gz")));
        assert!(!is_idx_images_name(Path::new("photos")));
        let e = sibling_labels(&ip).unwrap_err().to_string();
        assert!(
            e.contains("t10k-labels-idx1-ubyte[.gz] is not beside it"),
            "{e}"
        );
        let plain = d.path().join("t10k-labels-idx1-ubyte");
        std::fs::write(&plain, idx_labels(&[1, 2])).unwrap();
        assert_eq!(sibling_labels(&ip).unwrap(), plain);
        let gzipped = d.path().join("t10k-labels-idx1-ubyte.gz");
        std::fs::write(&gzipped, gz(&idx_labels(&[1, 2]))).unwrap();
        assert_eq!(
            sibling_labels(&ip).unwrap(),
            gzipped,
            "the .gz is preferred"
        );
        let e = sibling_labels(Path::new("images.bin"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("images.bin: not named like an IDX image file"),
            "{e}"
        );
    }

    #[test]
    fn reads_plain_and_gzipped() {
        let d = tempfile::tempdir().unwrap();
        let imgs = idx_images(3, 4, 5);
        let labs = idx_labels(&[0, 9, 4]);
        for (zip, suffix) in [(false, ""), (true, ".gz")] {
            let ip = d.path().join(format!("i{suffix}"));
            let lp = d.path().join(format!("l{suffix}"));
            let w = |p: &Path, b: &[u8]| std::fs::write(p, if zip { gz(b) } else { b.to_vec() });
            w(&ip, &imgs).unwrap();
            w(&lp, &labs).unwrap();
            let ds = load_idx_pair(&ip, &lp, &FASHION_MNIST_CLASSES).unwrap();
            assert_eq!((ds.n, ds.channels, ds.height, ds.width), (3, 1, 4, 5));
            assert_eq!(ds.labels, vec![0, 9, 4]);
            assert_eq!(ds.image(1)[0], 20);
            assert_eq!(ds.class_names[9], "Ankle boot");
        }
    }

    #[test]
    fn fashion_mnist_dir_layout() {
        let d = tempfile::tempdir().unwrap();
        let e = fashion_mnist(Some(d.path()), Split::Test)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t10k-images-idx3-ubyte.gz")
                && e.contains("dataset-fashion-mnist")
                && e.contains("folder that holds"),
            "{e}"
        );
        std::fs::write(
            d.path().join("t10k-images-idx3-ubyte.gz"),
            gz(&idx_images(2, 28, 28)),
        )
        .unwrap();
        std::fs::write(d.path().join("t10k-labels-idx1-ubyte"), idx_labels(&[1, 2])).unwrap();
        let ds = fashion_mnist(Some(d.path()), Split::Test).unwrap();
        assert_eq!(ds.n, 2);
    }

    #[test]
    fn bad_files_are_named_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n);
        let imgs = idx_images(3, 4, 5);
        std::fs::write(p("imgs"), &imgs).unwrap();
        std::fs::write(p("labs"), idx_labels(&[0, 1])).unwrap();
        // wrong magic: labels passed as images and the other way round
        let e = read_idx_images(p("labs")).unwrap_err().to_string();
        assert!(
            e.contains("labs") && e.contains("magic 0x00000801") && e.contains("label file"),
            "{e}"
        );
        let e = read_idx_labels(p("imgs")).unwrap_err().to_string();
        assert!(e.contains("expected 0x00000801"), "{e}");
        // count mismatch
        let e = load_idx_pair(p("imgs"), p("labs"), &FASHION_MNIST_CLASSES)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("labs") && e.contains("2 labels") && e.contains("3 images"),
            "{e}"
        );
        // truncated (plain and gzip)
        std::fs::write(p("cut"), &imgs[..imgs.len() - 7]).unwrap();
        let e = read_idx_images(p("cut")).unwrap_err().to_string();
        assert!(e.contains("cut") && e.contains("truncated"), "{e}");
        let z = gz(&imgs);
        std::fs::write(p("cut.gz"), &z[..z.len() / 2]).unwrap();
        let e = read_idx_images(p("cut.gz")).unwrap_err().to_string();
        assert!(e.contains("cut.gz") && e.contains("truncated"), "{e}");
        std::fs::write(p("hdr"), &imgs[..9]).unwrap();
        assert!(read_idx_images(p("hdr"))
            .unwrap_err()
            .to_string()
            .contains("truncated IDX header"));
        std::fs::write(p("empty"), b"").unwrap();
        assert!(read_idx_images(p("empty")).is_err());
        // trailing data
        let mut long = imgs.clone();
        long.push(0);
        std::fs::write(p("long"), &long).unwrap();
        assert!(read_idx_images(p("long"))
            .unwrap_err()
            .to_string()
            .contains("unexpected data"));
        // corrupt gzip
        let mut bad = gz(&imgs);
        for b in bad.iter_mut().skip(12).take(20) {
            *b ^= 0x5a;
        }
        std::fs::write(p("bad.gz"), &bad).unwrap();
        let e = read_idx_images(p("bad.gz")).unwrap_err().to_string();
        assert!(e.contains("bad.gz"), "{e}");
        // huge header, tiny file: no huge allocation, just "truncated"
        let mut huge = IMAGES_MAGIC.to_be_bytes().to_vec();
        for dd in [u32::MAX, 60000, 60000] {
            huge.extend_from_slice(&dd.to_be_bytes());
        }
        std::fs::write(p("huge"), &huge).unwrap();
        assert!(read_idx_images(p("huge")).is_err());
        // label out of range
        std::fs::write(p("labs3"), idx_labels(&[0, 1, 10])).unwrap();
        let e = load_idx_pair(p("imgs"), p("labs3"), &FASHION_MNIST_CLASSES)
            .unwrap_err()
            .to_string();
        assert!(e.contains("label 10"), "{e}");
        // missing
        assert!(matches!(read_idx_labels(p("nope")), Err(Error::Io { .. })));
    }

    #[test]
    fn real_fashion_mnist_if_installed() {
        let dir = Path::new(FASHION_MNIST_DIR);
        if !dir.is_dir() {
            eprintln!(
                "note: {FASHION_MNIST_DIR} absent (Debian package dataset-fashion-mnist); skipped"
            );
            return;
        }
        let train = fashion_mnist(None, Split::Train).unwrap();
        assert_eq!(
            (train.n, train.channels, train.height, train.width),
            (60000, 1, 28, 28)
        );
        assert_eq!(train.class_counts(), vec![6000; 10]);
        let test = fashion_mnist(None, Split::Test).unwrap();
        assert_eq!((test.n, test.height, test.width), (10000, 28, 28));
        assert_eq!(test.class_counts(), vec![1000; 10]);
        let (m, s) = train.channel_mean_std();
        assert!(
            (m[0] - 0.2860).abs() < 1e-3 && (s[0] - 0.3530).abs() < 1e-3,
            "{m:?} {s:?}"
        );
    }
}
