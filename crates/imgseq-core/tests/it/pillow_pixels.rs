//! Decoded pixels against Pillow's own (`Image.open(p).convert("RGB")` / `convert("L")`) on
//! pictures written by several encoders — Pillow, libjpeg-turbo's cjpeg, mozjpeg, imagecodecs;
//! 4:2:0 / 4:2:2 / 4:4:4 / 4:4:0 / 4:1:1, progressive, restart markers, arithmetic coding,
//! RGB, gray, CMYK and YCCK JPEG; 16-bit, palette and low-depth PNG (fixtures from
//! scripts/make_pillow_fixtures.py). Byte for byte: the reference pipelines' tokens depend on it.

use imgseq_core::image_io::{decode_bytes_upright, load_gray, load_rgb};
use imgseq_core::pillow;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pillow")
}

fn manifest() -> Vec<serde_json::Value> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap();
    m["files"].as_array().unwrap().clone()
}

/// How many bytes differ, and the largest difference.
fn diff(got: &[u8], want: &[u8]) -> (usize, u8) {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).fold((0, 0), |(n, m), (&a, &b)| {
        let d = a.abs_diff(b);
        (n + usize::from(d != 0), m.max(d))
    })
}

#[test]
fn decoded_rgb_equals_pillow_byte_for_byte() {
    let files = manifest();
    assert!(files.len() >= 20, "fixture set too small: {}", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let name = f["name"].as_str().unwrap();
        let img = load_rgb(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (img.width(), img.height()),
            (
                f["width"].as_u64().unwrap() as u32,
                f["height"].as_u64().unwrap() as u32
            ),
            "{name}"
        );
        let want = std::fs::read(fixtures().join(format!("{name}.rgb"))).unwrap();
        let (n, max) = diff(img.as_raw(), &want);
        if n > 0 {
            bad.push(format!("{name}: {n} bytes differ (max {max})"));
        }
    }
    assert!(
        bad.is_empty(),
        "RGB differs from Pillow's:\n{}",
        bad.join("\n")
    );
}

#[test]
fn decoded_gray_equals_pillow_convert_l() {
    let mut bad = Vec::new();
    for f in &manifest() {
        let name = f["name"].as_str().unwrap();
        let img = load_gray(fixtures().join(name)).unwrap();
        let want = std::fs::read(fixtures().join(format!("{name}.l"))).unwrap();
        let (n, max) = diff(img.as_raw(), &want);
        if n > 0 {
            bad.push(format!("{name}: {n} bytes differ (max {max})"));
        }
    }
    assert!(
        bad.is_empty(),
        "gray differs from Pillow's:\n{}",
        bad.join("\n")
    );
}

#[test]
fn exif_orientation_is_ignored_by_default_and_applied_on_request() {
    let rotated: Vec<_> = manifest()
        .into_iter()
        .filter(|f| f.get("upright").is_some())
        .collect();
    assert!(
        !rotated.is_empty(),
        "the fixtures hold an EXIF-rotated picture"
    );
    for f in rotated {
        let name = f["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join(name)).unwrap();
        let as_stored =
            pillow::to_rgb8(decode_bytes_upright(Path::new(name), &bytes, false).unwrap());
        let want = std::fs::read(fixtures().join(format!("{name}.rgb"))).unwrap();
        assert_eq!(as_stored.as_raw(), &want, "{name}: not applied by default");
        let up = pillow::to_rgb8(decode_bytes_upright(Path::new(name), &bytes, true).unwrap());
        let wh = f["upright"].as_array().unwrap();
        assert_eq!(
            (up.width() as u64, up.height() as u64),
            (wh[0].as_u64().unwrap(), wh[1].as_u64().unwrap())
        );
        let want = std::fs::read(fixtures().join(format!("{name}.upright.rgb"))).unwrap();
        assert_eq!(up.as_raw(), &want, "{name}: ImageOps.exif_transpose");
    }
}

#[test]
fn corrupt_jpeg_is_a_one_line_error_not_a_panic() {
    let good = std::fs::read(fixtures().join("pillow_420.jpg")).unwrap();
    // A broken Huffman table inside an otherwise complete file: libjpeg's fatal error comes
    // back as an error naming the file.
    let dht = good.windows(2).position(|w| w == [0xFF, 0xC4]).unwrap();
    let mut bad = good.clone();
    bad[dht + 4] = 0x7F; // table class/id out of range
    let err = decode_bytes_upright(Path::new("bad.jpg"), &bad, false).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bad.jpg") && !msg.contains('\n'), "{msg}");
    // Truncated: refused before decoding.
    let cut = &good[..good.len() / 2];
    let msg = decode_bytes_upright(Path::new("cut.jpg"), cut, false)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("cut.jpg") && msg.contains("truncated"),
        "{msg}"
    );
}
