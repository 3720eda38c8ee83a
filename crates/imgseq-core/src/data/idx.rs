//! IDX files (MNIST / Fashion-MNIST), plain or gzipped (detected by the `1f 8b` magic).
//!
//! Images: magic `0x00000803`, then `n, rows, cols` as big-endian `u32`, then `n*rows*cols`
//! bytes. Labels: magic `0x00000801`, then `n`, then `n` bytes.

use super::{Dataset, Split};
use crate::{Error, Result};
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

fn open(path: &Path) -> Result<Box<dyn Read>> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 2];
    let n = read_full(&mut f, &mut magic).map_err(|e| Error::io(path, e))?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let r = std::io::BufReader::new(head.chain(f));
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(r)))
    } else {
        Ok(Box::new(r))
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

/// Reads an IDX file of unsigned bytes with the given magic and number of dimensions; returns
/// `(dims, data)`.
fn read_idx(path: &Path, magic: u32, what: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    let mut r = open(path)?;
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
    let size = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::format(path, format!("IDX dimensions {dims:?} are too large")))?;
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

/// Reads an IDX image file; returns `(n, rows, cols, pixels)`.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<(usize, usize, usize, Vec<u8>)> {
    let path = path.as_ref();
    let (d, data) = read_idx(path, IMAGES_MAGIC, "image")?;
    if d[1] == 0 || d[2] == 0 {
        return Err(Error::format(
            path,
            format!("images have an empty size {}x{}", d[1], d[2]),
        ));
    }
    Ok((d[0], d[1], d[2], data))
}

/// Reads an IDX label file.
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>> {
    Ok(read_idx(path.as_ref(), LABELS_MAGIC, "label")?.1)
}

/// Loads an IDX image file and its label file as a one-channel [`Dataset`].
pub fn load_idx_pair(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
    class_names: &[&str],
) -> Result<Dataset> {
    let (ip, lp) = (images.as_ref(), labels.as_ref());
    let (n, rows, cols, pixels) = read_idx_images(ip)?;
    let labels = read_idx_labels(lp)?;
    if labels.len() != n {
        return Err(Error::format(
            lp,
            format!(
                "{} labels, but {} has {n} images",
                labels.len(),
                ip.display()
            ),
        ));
    }
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
