//! Gray (one-channel) tokenizers in every `vq` command, and Fashion-MNIST's IDX files as a
//! data source: a tiny gray VQGAN trained on a synthetic IDX set, then encode, decode,
//! roundtrip, tokenize (labels, class names, keys, the ViT's canvas), detokenize and eval
//! with the shipped ViT as judge.

use crate::common;
use common::{fails, ok};

use flate2::write::GzEncoder;
use image::{GrayImage, Luma, Rgb, RgbImage};
use std::io::Write;
use std::path::{Path, PathBuf};

const N: usize = 12;

const TINY_GRAY: &str = r#"{"embed_dim": 8, "n_embed": 16, "ddconfig": {"ch": 32,
 "ch_mult": [1, 1, 1], "num_res_blocks": 1, "attn_resolutions": [], "z_channels": 8,
 "double_z": false, "resolution": 32, "in_channels": 1, "out_ch": 1, "dropout": 0.0}}"#;

/// The 28×28 picture `i` of the synthetic set: a bright rectangle whose size depends on `i`.
fn picture(i: usize) -> GrayImage {
    GrayImage::from_fn(28, 28, |x, y| {
        let (w, h) = (6 + (i as u32 % 4) * 4, 8 + (i as u32 % 3) * 5);
        let inside = (14 - w / 2..14 + w / 2).contains(&x) && (14 - h / 2..14 + h / 2).contains(&y);
        Luma([if inside {
            200 + (x % 7) as u8 * 5
        } else {
            (y / 4) as u8
        }])
    })
}

/// A folder named like Fashion-MNIST's with `t10k-images-idx3-ubyte` (plain) and
/// `t10k-labels-idx1-ubyte.gz` (gzipped) of [`N`] synthetic images, labels `i % 10`.
fn idx_fixture(dir: &Path) -> PathBuf {
    let d = dir.join("fashion-mnist");
    std::fs::create_dir_all(&d).unwrap();
    let mut imgs = [0x803u32, N as u32, 28, 28]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect::<Vec<u8>>();
    for i in 0..N {
        imgs.extend_from_slice(picture(i).as_raw());
    }
    std::fs::write(d.join("t10k-images-idx3-ubyte"), imgs).unwrap();
    let mut labels = [0x801u32, N as u32]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect::<Vec<u8>>();
    labels.extend((0..N).map(|i| (i % 10) as u8));
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&labels).unwrap();
    std::fs::write(d.join("t10k-labels-idx1-ubyte.gz"), gz.finish().unwrap()).unwrap();
    d.join("t10k-images-idx3-ubyte")
}

/// A gray model trained for 2 steps on the fixture: (run folder, weights path).
fn tiny_gray_model(dir: &Path, idx: &Path) -> PathBuf {
    let cfg = dir.join("tiny_gray.json");
    std::fs::write(&cfg, TINY_GRAY).unwrap();
    let run = dir.join("run");
    ok(&[
        "vq",
        "train",
        "--data",
        idx.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--ae-warmup",
        "0",
        "--kmeans-rows",
        "64",
        "--checkpoint-every",
        "2",
    ]);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("training.json")).unwrap()).unwrap();
    // IDX data takes the Fashion-MNIST recipe: whole 32×32 canvases, no colour shuffling.
    assert_eq!(saved["crop"], 32, "{saved}");
    assert_eq!(saved["shuffle_channels"], false, "{saved}");
    run.join("model.safetensors")
}

fn is_gray_png(p: &Path) -> bool {
    matches!(image::open(p).unwrap(), image::DynamicImage::ImageLuma8(_))
}

fn accuracy_line(out: &str) -> String {
    out.lines()
        .find(|l| l.starts_with("judge "))
        .unwrap_or_else(|| panic!("no judge line in {out}"))
        .to_string()
}

#[test]
fn gray_tokenizer_in_every_vq_command_and_idx_as_a_source() {
    let d = tempfile::tempdir().unwrap();
    let idx = idx_fixture(d.path());
    let w = tiny_gray_model(d.path(), &idx);
    let (ws, idx_s) = (w.to_str().unwrap(), idx.to_str().unwrap());

    // A colour picture through a gray model: read as its luma, written as gray PNGs.
    let photo = d.path().join("photo.png");
    RgbImage::from_fn(40, 36, |x, y| Rgb([(x * 6) as u8, (y * 7) as u8, 90]))
        .save(&photo)
        .unwrap();
    let rt = d.path().join("rt");
    let out = ok(&[
        "vq",
        "roundtrip",
        photo.to_str().unwrap(),
        "--weights",
        ws,
        "-o",
        rt.to_str().unwrap(),
    ]);
    assert!(
        out.contains("tokens: 64 (8x8 grid"),
        "default size is the model's 32: {out}"
    );
    assert!(is_gray_png(&rt.join("recon.png")) && is_gray_png(&rt.join("side_by_side.png")));

    // Tokenize the IDX file: keys, labels, class names, the ViT's canvas.
    let tok = d.path().join("tok");
    ok(&[
        "vq",
        "tokenize",
        idx_s,
        "--weights",
        ws,
        "--shard-size",
        "5",
        "-o",
        tok.to_str().unwrap(),
    ]);
    let mut samples = Vec::new();
    for s in 0..3 {
        samples.extend(
            imgseq_shards::shard::read_shard(&tok.join(format!("shard-{s:06}.tar"))).unwrap(),
        );
    }
    assert_eq!(samples.len(), N);
    let s3 = &samples[3];
    assert_eq!(s3.key, "t10k-00003");
    assert_eq!((s3.h, s3.w), (8, 8));
    assert_eq!(s3.json["label"], 3);
    assert_eq!(s3.json["class"], "Dress");
    assert_eq!(s3.json["canvas_offset"], serde_json::json!([2, 2]));

    // The same picture centred by hand and encoded as a file gives the same tokens.
    let mut canvas = GrayImage::new(32, 32);
    image::imageops::replace(&mut canvas, &picture(3), 2, 2);
    let png = d.path().join("centred.png");
    canvas.save(&png).unwrap();
    let npy = d.path().join("t.npy");
    ok(&[
        "vq",
        "encode",
        png.to_str().unwrap(),
        "--weights",
        ws,
        "-o",
        npy.to_str().unwrap(),
    ]);
    let grid = imgseq_vqgan::TokenGrid::read(&npy).unwrap();
    assert_eq!(
        grid.data, s3.tokens,
        "tokenize and encode disagree on the same picture"
    );

    // Decode and detokenize write gray pictures.
    let dec = d.path().join("dec.png");
    ok(&[
        "vq",
        "decode",
        npy.to_str().unwrap(),
        "--weights",
        ws,
        "-o",
        dec.to_str().unwrap(),
    ]);
    assert!(is_gray_png(&dec));
    let det = d.path().join("det");
    ok(&[
        "vq",
        "detokenize",
        tok.to_str().unwrap(),
        "--weights",
        ws,
        "--limit",
        "2",
        "-o",
        det.to_str().unwrap(),
    ]);
    assert!(is_gray_png(&det.join("t10k-00001.png")));

    // The judge: the ViT's accuracy on the originals is what `vit eval` gives on the same
    // files (same canvas, same labels; `vit eval` prints 2 decimals), and the gap is the
    // difference of the two figures.
    let vit = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../weights/vit-fashion-mnist-gray"
    );
    let out = ok(&[
        "vq",
        "eval",
        idx_s,
        "--weights",
        ws,
        "--judge",
        vit,
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let j = &r["judged"];
    assert_eq!(r["images"], N);
    assert_eq!(r["tokens_per_image"], 64);
    let vit_out = ok(&[
        "vit",
        "eval",
        "--data",
        idx.parent().unwrap().to_str().unwrap(),
        "--weights",
        vit,
    ]);
    let vit_acc: f64 = vit_out
        .lines()
        .find_map(|l| l.strip_prefix("accuracy: "))
        .and_then(|a| a.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("{vit_out}"));
    let orig = j["original_accuracy"].as_f64().unwrap();
    assert!(
        (100.0 * orig - vit_acc).abs() <= 0.005,
        "{j} vs vit eval {vit_acc}%"
    );
    let recon = j["reconstruction_accuracy"].as_f64().unwrap();
    // The judge is the library's, as `gpt judge`'s: it also gives the Fréchet distance of the
    // reconstructions' CLS features to the originals'.
    let fd = j["fd_reconstructions"].as_f64().unwrap();
    assert!(fd.is_finite() && fd >= 0.0, "{j}");
    assert!(
        (j["gap"].as_f64().unwrap() - (recon - orig)).abs() < 1e-12,
        "{j}"
    );
    let text = ok(&[
        "vq",
        "eval",
        idx_s,
        "--weights",
        ws,
        "--judge",
        vit,
        "--limit",
        "4",
    ]);
    assert!(accuracy_line(&text).contains("(gap "), "{text}");
    assert!(text.contains("images: 4 at 32x32"), "{text}");

    // Without labels there is nothing to judge; a missing label file is named.
    let folder = d.path().join("pngs");
    std::fs::create_dir_all(&folder).unwrap();
    canvas.save(folder.join("a.png")).unwrap();
    let e = fails(&[
        "vq",
        "eval",
        folder.to_str().unwrap(),
        "--weights",
        ws,
        "--judge",
        vit,
    ]);
    assert!(e.contains("--judge needs labelled images"), "{e}");
    std::fs::remove_file(idx.with_file_name("t10k-labels-idx1-ubyte.gz")).unwrap();
    let e = fails(&[
        "vq",
        "tokenize",
        idx_s,
        "--weights",
        ws,
        "-o",
        d.path().join("tok2").to_str().unwrap(),
    ]);
    assert!(
        e.contains("t10k-images-idx3-ubyte") && e.contains("labels-idx1-ubyte"),
        "{e}"
    );
}
