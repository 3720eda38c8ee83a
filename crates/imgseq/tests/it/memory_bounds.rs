//! Small inputs that used to take more than 2 GB: each is now bounded (refused from its header
//! or read in constant memory), and the command's peak resident memory is measured. The files
//! are made here, a few kilobytes each on disk.

use crate::common::peak_rss_mib;
use crate::hostile_dataset_cli::shard_folder;
use crate::tokenize::{args, model_args, picture};
use imgseq_shards::manifest::{shard_name, MANIFEST};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn gz(b: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(b).unwrap();
    z.finish().unwrap()
}

/// An IDX header: magic, then each dimension as a big-endian u32.
fn idx_header(magic: u32, dims: &[u32]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v
}

#[test]
fn tokenize_refuses_an_idx_of_3_million_1x1_images_from_its_header_in_little_memory() {
    let d = tempfile::tempdir().unwrap();
    let n = 3_000_000u32;
    let mut imgs = idx_header(0x803, &[n, 1, 1]);
    imgs.resize(imgs.len() + n as usize, 0);
    let mut labels = idx_header(0x801, &[n]);
    labels.resize(labels.len() + n as usize, 0);
    let src = d.path().join("train-images-idx3-ubyte.gz");
    std::fs::write(&src, gz(&imgs)).unwrap();
    std::fs::write(d.path().join("train-labels-idx1-ubyte.gz"), gz(&labels)).unwrap();
    assert!(std::fs::metadata(&src).unwrap().len() < 10_000);
    let out = d.path().join("out");
    let m = model_args();
    let (done, err, peak) =
        peak_rss_mib(&args(&["vq", "tokenize", &s(&src)], &m, &["-o", &s(&out)]));
    assert!(!done, "{err}");
    assert!(
        err.contains("train-images-idx3-ubyte.gz")
            && err.contains("3000000 samples")
            && err.contains("IMGSEQ_MAX_MEMORY_GB"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(peak < 512.0, "peak RSS {peak:.0} MiB");
    assert!(!out.exists());
}

/// A 34-byte lossless WebP whose header declares `side`×`side` pixels (no image data).
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
fn tokenize_skips_two_34_byte_webps_declaring_16383_squared_in_one_batch_in_little_memory() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for name in ["a.webp", "b.webp"] {
        let w = webp_declaring(16383);
        assert_eq!(w.len(), 34);
        std::fs::write(src.join(name), w).unwrap();
    }
    picture(0).save(src.join("c.png")).unwrap();
    let out = d.path().join("out");
    let m = model_args();
    let (done, err, peak) =
        peak_rss_mib(&args(&["vq", "tokenize", &s(&src)], &m, &["-o", &s(&out)]));
    assert!(done, "{err}");
    let errors = std::fs::read_to_string(out.join("errors.jsonl")).unwrap();
    assert_eq!(errors.lines().count(), 2, "{errors}");
    assert!(
        errors.contains("16383x16383") && errors.contains("IMGSEQ_MAX_MEMORY_GB"),
        "{errors}"
    );
    assert!(peak < 512.0, "peak RSS {peak:.0} MiB");
}

/// Replaces shard 0 of `dir` by a sparse `.tar` of `n` members `KEY.tokens.npy`, each a
/// 2048×2048 uint16 grid of zeros (8 MiB, a hole on disk).
fn sparse_shard(dir: &Path, n: usize) -> u64 {
    let mut npy = imgseq_core::npy::npy_header("<u2", &[2048, 2048]);
    let data = 2048 * 2048 * 2;
    let size = (npy.len() + data) as u64;
    let mut f = std::fs::File::create(dir.join(shard_name(0))).unwrap();
    let mut pos = 0u64;
    for i in 0..n {
        let mut h = tar::Header::new_ustar();
        h.set_path(format!("k{i:04}.tokens.npy")).unwrap();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        f.seek(SeekFrom::Start(pos)).unwrap();
        f.write_all(h.as_bytes()).unwrap();
        f.write_all(&npy).unwrap();
        pos += 512 + size.div_ceil(512) * 512;
    }
    npy.clear();
    // Two zero blocks end the archive (a hole too).
    f.set_len(pos + 1024).unwrap();
    pos + 1024
}

#[test]
fn stats_reads_a_sparse_805_mb_shard_one_sample_at_a_time() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tok");
    shard_folder(&dir, &[(&["a"], 3)]);
    let bytes = sparse_shard(&dir, 96);
    assert!(bytes > 800_000_000, "{bytes}");
    // The manifest's tokenizer has 32 codes; zeros are in range.
    assert!(dir.join(MANIFEST).exists());
    let (done, err, peak) = peak_rss_mib(&["vq", "stats", &s(&dir), "--no-verify"]);
    assert!(done, "{err}");
    assert!(peak < 512.0, "peak RSS {peak:.0} MiB");
}

/// A 16384×1 RGB PNG (about a kilobyte), written with the `image` crate's encoder.
fn sliver_png(path: &Path) {
    let img = image::RgbImage::from_fn(16384, 1, |x, _| {
        image::Rgb([(x % 251) as u8, (x % 13 * 19) as u8, 128])
    });
    img.save(path).unwrap();
    assert!(std::fs::metadata(path).unwrap().len() < 64 * 1024);
}

/// `--upscale` of a 16384×1 sliver used to resize the whole picture before cropping: to a
/// shorter side of 128 here, 2,097,152×128 pixels (over 800 MB; at 384, over 6 GB). Now only
/// the crop is resized (about 90 MB peak, the model's), for the shorter-side rule (taming)
/// and ADM's (LlamaGen) alike.
#[test]
fn encode_upscales_a_16384x1_sliver_by_its_crop_in_little_memory() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("sliver.png");
    sliver_png(&src);
    let fx = |name: &str| {
        s(&Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name))
    };
    let taming = [
        "--weights".to_string(),
        fx("vqgan/tiny.safetensors"),
        "--config".into(),
        fx("vqgan/tiny_config.json"),
        "--precision".into(),
        "f32".into(),
    ];
    let llamagen = ["--weights".to_string(), fx("llamagen/vq_tiny.pt")];
    for (family, model) in [("taming", &taming[..]), ("llamagen", &llamagen[..])] {
        let out = d.path().join(format!("{family}.npy"));
        let (done, err, peak) = peak_rss_mib(&args(
            &["vq", "encode", &s(&src)],
            model,
            &["--size", "128", "--upscale", "-o", &s(&out)],
        ));
        assert!(done, "{family}: {err}");
        let (shape, tokens) = imgseq_core::npy::read_npy_i64(&out).unwrap();
        assert_eq!(shape.iter().product::<usize>(), tokens.len());
        assert!(peak < 256.0, "{family}: peak RSS {peak:.0} MiB");
    }
}

/// `weights inspect` read a whole safetensors file to list its tensors (206 MB peak for a
/// 200 MB sparse file): it reads the header now.
#[test]
fn weights_inspect_reads_a_sparse_200_mb_safetensors_header_only() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big.safetensors");
    let n = 50_000_000u64;
    let header = format!(
        r#"{{"encoder.conv_in.weight":{{"dtype":"F32","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        4 * n
    );
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.set_len(8 + header.len() as u64 + 4 * n).unwrap();
    drop(f);
    let (done, err, peak) = peak_rss_mib(&["weights", "inspect", &s(&p)]);
    assert!(done, "{err}");
    assert!(peak < 100.0, "peak RSS {peak:.0} MiB");
}
