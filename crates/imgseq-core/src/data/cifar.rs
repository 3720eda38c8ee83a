//! CIFAR-10, binary version (`cifar-10-batches-bin`): records of one label byte followed by
//! 3072 pixel bytes (red, green and blue planes of 32×32, row-major), which is already the
//! `(c, h, w)` layout of a [`Dataset`].

use super::{Dataset, Split};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// CIFAR-10 class names, used when `batches.meta.txt` is absent.
pub const CIFAR10_CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];

const SIDE: usize = 32;
const PIXELS: usize = 3 * SIDE * SIDE;
const RECORD: usize = 1 + PIXELS;

/// Reads one CIFAR-10 binary batch file; returns `(images (n, 3, 32, 32), labels)`.
pub fn read_cifar_batch(path: impl AsRef<Path>) -> Result<(Vec<u8>, Vec<u8>)> {
    let path = path.as_ref();
    let bytes = crate::weights::read_regular_file(path, MAX_BATCH_BYTES, "a CIFAR-10 batch")?;
    parse_cifar_batch(path, &bytes)
}

/// Largest CIFAR batch file read (the real ones hold 10,000 records, 30.7 MB).
pub const MAX_BATCH_BYTES: u64 = 1 << 30;

/// Parses the bytes of a CIFAR-10 binary batch; `path` is only used in messages.
pub fn parse_cifar_batch(path: &Path, bytes: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD) {
        return Err(Error::format(
            path,
            format!(
                "not a CIFAR-10 binary batch: size {} is not a positive multiple of {RECORD} \
                 (1 label byte + 3x32x32 pixels)",
                bytes.len()
            ),
        ));
    }
    let n = bytes.len() / RECORD;
    let mut images = Vec::with_capacity(n * PIXELS);
    let mut labels = Vec::with_capacity(n);
    for (i, rec) in bytes.chunks_exact(RECORD).enumerate() {
        if rec[0] > 9 {
            return Err(Error::format(
                path,
                format!(
                    "record {i}: label {} is not a CIFAR-10 class (0..9)",
                    rec[0]
                ),
            ));
        }
        labels.push(rec[0]);
        images.extend_from_slice(&rec[1..]);
    }
    Ok((images, labels))
}

/// What the `cifar` fuzz target runs (and the corpus replay test). Must never panic.
#[doc(hidden)]
pub fn fuzz_cifar_bytes(data: &[u8]) {
    let p = Path::new("fuzz.bin");
    if let Ok((images, labels)) = parse_cifar_batch(p, data) {
        let labels = labels.into_iter().map(u16::from).collect();
        let names = CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect();
        let _ = Dataset::new(images, labels, (3, SIDE, SIDE), names);
    }
}

/// Class names from `batches.meta.txt` (one per line, blank lines ignored).
pub fn read_meta(path: impl AsRef<Path>) -> Result<Vec<String>> {
    let path = path.as_ref();
    let bytes = crate::weights::read_regular_file(path, 1 << 20, "a class-name list")?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::format(path, "not UTF-8 text (expected one class name a line)"))?;
    let names: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if names.len() != 10 {
        return Err(Error::format(
            path,
            format!("expected 10 class names, found {}", names.len()),
        ));
    }
    Ok(names)
}

/// `dir` itself, or its `cifar-10-batches-bin` subfolder when it has one.
fn batches_dir(dir: &Path) -> PathBuf {
    let sub = dir.join("cifar-10-batches-bin");
    if sub.is_dir() {
        sub
    } else {
        dir.to_path_buf()
    }
}

/// Loads CIFAR-10 (50000 train images from `data_batch_1..5.bin`, 10000 test images from
/// `test_batch.bin`, 3×32×32) from `dir` or `dir/cifar-10-batches-bin`. Class names come
/// from `batches.meta.txt` when present.
pub fn cifar10(dir: &Path, split: Split) -> Result<Dataset> {
    let dir = batches_dir(dir);
    let files: Vec<PathBuf> = match split {
        Split::Train => (1..=5)
            .map(|i| dir.join(format!("data_batch_{i}.bin")))
            .collect(),
        Split::Test => vec![dir.join("test_batch.bin")],
    };
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for f in &files {
        if !f.is_file() {
            return Err(Error::format(
                f,
                "not found (expected the binary version of CIFAR-10: data_batch_1.bin .. \
                 data_batch_5.bin, test_batch.bin)",
            ));
        }
        let (i, l) = read_cifar_batch(f)?;
        images.extend_from_slice(&i);
        labels.extend(l.into_iter().map(u16::from));
    }
    let meta = dir.join("batches.meta.txt");
    let class_names = if meta.is_file() {
        read_meta(&meta)?
    } else {
        CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect()
    };
    Dataset::new(images, labels, (3, SIDE, SIDE), class_names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(labels: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for (i, &l) in labels.iter().enumerate() {
            v.push(l);
            // R plane = i, G plane = 100 + i, B plane = 200 + i
            for c in 0..3u8 {
                v.extend(std::iter::repeat_n(c * 100 + i as u8, SIDE * SIDE));
            }
        }
        v
    }

    #[test]
    fn reads_batches_and_meta() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&sub).unwrap();
        for i in 1..=5 {
            std::fs::write(sub.join(format!("data_batch_{i}.bin")), batch(&[i, 9])).unwrap();
        }
        std::fs::write(sub.join("test_batch.bin"), batch(&[3])).unwrap();
        let train = cifar10(d.path(), Split::Train).unwrap();
        assert_eq!(
            (train.n, train.channels, train.height, train.width),
            (10, 3, 32, 32)
        );
        assert_eq!(train.labels, vec![1, 9, 2, 9, 3, 9, 4, 9, 5, 9]);
        assert_eq!(train.class_names[0], "airplane");
        let img = train.image(1);
        assert_eq!((img[0], img[1024], img[2048]), (1, 101, 201));
        let rgb = train.to_image(1).unwrap();
        assert_eq!(rgb.as_rgb8().unwrap().get_pixel(31, 31).0, [1, 101, 201]);

        let names: String = (0..10).map(|i| format!("c{i}\n")).collect();
        std::fs::write(sub.join("batches.meta.txt"), names + "\n").unwrap();
        let test = cifar10(&sub, Split::Test).unwrap();
        assert_eq!(test.n, 1);
        assert_eq!(test.class_names[3], "c3");
        std::fs::write(sub.join("batches.meta.txt"), "a\nb\n").unwrap();
        let e = cifar10(&sub, Split::Test).unwrap_err().to_string();
        assert!(
            e.contains("batches.meta.txt") && e.contains("10 class names"),
            "{e}"
        );
    }

    #[test]
    fn bad_batches_are_named_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("test_batch.bin");
        let mut b = batch(&[1, 2]);
        b.pop();
        std::fs::write(&p, &b).unwrap();
        let e = cifar10(d.path(), Split::Test).unwrap_err().to_string();
        assert!(e.contains("test_batch.bin") && e.contains("3073"), "{e}");
        std::fs::write(&p, b"").unwrap();
        assert!(read_cifar_batch(&p).is_err());
        std::fs::write(&p, batch(&[1, 10])).unwrap();
        let e = read_cifar_batch(&p).unwrap_err().to_string();
        assert!(e.contains("record 1") && e.contains("label 10"), "{e}");
        let e = cifar10(d.path(), Split::Train).unwrap_err().to_string();
        assert!(
            e.contains("data_batch_1.bin") && e.contains("not found"),
            "{e}"
        );
    }
}
