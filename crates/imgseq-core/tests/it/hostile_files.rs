//! Hostile data files (issue 10): devices, FIFOs, decompression bombs and headers that lie.
//! Each gives a one-line error naming the file, before anything large is read or inflated.

use imgseq_core::data::cifar::read_cifar_batch;
use imgseq_core::data::idx::{load_idx_pair, read_idx_images, FASHION_MNIST_CLASSES};
use imgseq_core::npy::read_npy;
use imgseq_core::weights::load_tensors;
use std::io::Write;
use std::path::{Path, PathBuf};

fn one_line(e: impl std::fmt::Display, path: &Path) -> String {
    let e = e.to_string();
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

fn idx_header(magic: u32, dims: &[u32]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn fifo(dir: &Path, name: &str) -> Option<PathBuf> {
    let p = dir.join(name);
    let ok = std::process::Command::new("mkfifo")
        .arg(&p)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(p)
}

#[test]
fn readers_refuse_devices_fifos_and_folders() {
    let d = tempfile::tempdir().unwrap();
    let mut paths: Vec<PathBuf> = vec!["/dev/zero".into(), "/dev/null".into()];
    paths.extend(fifo(d.path(), "f"));
    for p in &paths {
        let errs = [
            read_npy(p).unwrap_err().to_string(),
            read_idx_images(p).unwrap_err().to_string(),
            read_cifar_batch(p).unwrap_err().to_string(),
            load_tensors(p, &candle_core::Device::Cpu)
                .unwrap_err()
                .to_string(),
        ];
        for e in errs {
            assert!(one_line(&e, p).ends_with("not a regular file"), "{e}");
        }
    }
    let e = read_npy(d.path()).unwrap_err();
    assert!(one_line(e, d.path()).contains("a directory"));
}

#[test]
fn idx_label_count_is_compared_before_the_images_are_inflated() {
    // 10,000 images announced, but the gzip holds only 8 KB of them: were the data inflated
    // first this would say "truncated"; the label file's count is checked before.
    let d = tempfile::tempdir().unwrap();
    let ip = d.path().join("imgs.gz");
    let lp = d.path().join("labs");
    let mut imgs = idx_header(0x803, &[10_000, 28, 28]);
    let mut x = 0x2545_f491u32;
    imgs.extend((0..8192).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    }));
    std::fs::write(&ip, gz(&imgs)).unwrap();
    let mut labs = idx_header(0x801, &[10]);
    labs.extend_from_slice(&[0; 10]);
    std::fs::write(&lp, labs).unwrap();
    let e = load_idx_pair(&ip, &lp, &FASHION_MNIST_CLASSES).unwrap_err();
    assert!(one_line(e, &lp).contains("10 labels, but"));
}

#[test]
fn idx_gzip_bomb_declaring_4_million_images_is_refused_before_inflating() {
    // 4,000,000 × 28 × 28 = 3.1 GB announced: over the cap, refused from the header alone.
    let d = tempfile::tempdir().unwrap();
    let ip = d.path().join("bomb.gz");
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&idx_header(0x803, &[4_000_000, 28, 28]))
        .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        z.write_all(&zeros).unwrap();
    }
    std::fs::write(&ip, z.finish().unwrap()).unwrap();
    let e = one_line(read_idx_images(&ip).unwrap_err(), &ip);
    assert!(e.contains("more than imgseq reads"), "{e}");
    // A header announcing more than a gzip of this size can inflate to is refused at once.
    std::fs::write(&ip, gz(&idx_header(0x803, &[1000, 1000, 1000]))).unwrap();
    let e = one_line(read_idx_images(&ip).unwrap_err(), &ip);
    assert!(e.contains("cannot hold"), "{e}");
}

#[test]
fn npy_header_lies_are_errors_before_allocating() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.npy");
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n";
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    std::fs::write(&p, b).unwrap();
    one_line(read_npy(&p).unwrap_err(), &p);
}

/// Fuzzing finding (npy, crash-f20c63b4): a dtype whose first character is multi-byte made
/// `parse_descr` slice inside a character and panic.
#[test]
fn npy_dtype_starting_with_a_multibyte_character_is_an_error_not_a_panic() {
    let header = "{'descr': '\u{30a}4', 'fortran_order': False, 'shape': (), }";
    let mut b = b"\x93NUMPY\x03\x00".to_vec();
    b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
    let e = imgseq_core::npy::parse_npy("t.npy", &b).unwrap_err();
    assert!(one_line(e, Path::new("t.npy")).contains("unsupported dtype"));
}
