//! Parity with transformers' image processors (PIL backend; `scripts/hf_tower_fixtures.py`
//! through `make_{clip,siglip,dinov2}_fixtures.py`): each picture file of
//! `tests/fixtures/processor/` (wide, tall, square, smaller than the crop), prepared by the
//! tower's own input rule read from its folder's `preprocessor_config.json`, gives the
//! processor's 8-bit picture byte for byte, its `pixel_values` within 1e-6 and, run through the
//! tower from the file, transformers' `last_hidden_state` on those `pixel_values` within 1e-4
//! relative. CLIP's `full/` folder has a processor other than the released one (shortest edge
//! 40, bilinear), so the config is what decides.

use candle_core::{DType, Device, Tensor};
use imgseq_core::input::Crop;
use imgseq_core::resample::Filter;
use imgseq_core::tokenizer::{Encoded, Tokenizer};
use imgseq_vit::tower::{Pixels, Tower, VisionModel};
use imgseq_vit::{clip, dinov2, siglip};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const PICTURES: [&str; 4] = ["wide", "tall", "square", "small"];

fn fx(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(path)
}

fn io(family: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx(family).join("processor.safetensors"), &Device::Cpu).unwrap()
}

fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Checks every picture through the tower `model` reading `pixels` against the fixtures of
/// `folder` in `io`; returns the worst (pixel_values absolute, hidden state relative).
fn check<M: VisionModel>(
    model: M,
    pixels: Pixels,
    io: &HashMap<String, Tensor>,
    folder: &str,
) -> (f32, f32) {
    let t = Tower {
        model,
        layer: None,
        patches_only: false,
        pooled: false,
        pixels,
    };
    let (mut worst_px, mut worst_h) = (0f32, 0f32);
    for pic in PICTURES {
        let key = |what: &str| format!("{folder}.{pic}.{what}");
        let path = fx("processor").join(format!("{pic}.png"));
        let imgs = t.load(&[path], true).unwrap();
        let want_u8 = io[&key("uint8")].flatten_all().unwrap();
        let want_u8 = want_u8
            .to_dtype(DType::U8)
            .unwrap()
            .to_vec1::<u8>()
            .unwrap();
        assert_eq!(
            imgs[0].as_raw(),
            &want_u8,
            "{folder} {pic}: the 8-bit picture differs from the processor's"
        );
        let x = t.input_tensor(&imgs).unwrap();
        let px = max_abs(&x, &io[&key("pixel_values")]);
        assert!(px <= 1e-6, "{folder} {pic}: pixel_values differ by {px}");
        let want = &io[&key("last_hidden_state")];
        let Encoded::Embeddings(e) = t.encode_pictures(&imgs).unwrap() else {
            panic!("a tower gives embeddings")
        };
        let got = Tensor::from_vec(e.data, (e.n, e.tokens, e.dim), &Device::Cpu).unwrap();
        let m = want
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let rel = max_abs(&got, want) / m;
        assert!(
            rel < 1e-4,
            "{folder} {pic}: last_hidden_state relative {rel}"
        );
        (worst_px, worst_h) = (worst_px.max(px), worst_h.max(rel));
    }
    eprintln!("{folder}: pixel_values max |diff| {worst_px:e}, last_hidden_state rel {worst_h:e}");
    (worst_px, worst_h)
}

#[test]
fn clip_pictures_from_files_match_the_clip_image_processor() {
    let io = io("clip");
    for (folder, want) in [
        (
            "vision",
            Crop::ShortestEdgeCrop {
                resize: 32,
                filter: Filter::Bicubic,
            },
        ),
        (
            "full",
            Crop::ShortestEdgeCrop {
                resize: 40,
                filter: Filter::Bilinear,
            },
        ),
    ] {
        let src = fx("clip").join(folder);
        let model = clip::load(&src, &Device::Cpu).unwrap();
        let pixels = clip::pixels(&model.cfg, &src).unwrap();
        assert_eq!((pixels.size, pixels.crop), (32, want), "{folder}");
        check(model, pixels, &io, folder);
    }
}

#[test]
fn siglip_pictures_from_files_match_the_siglip_image_processor() {
    let io = io("siglip");
    for folder in ["vision", "full"] {
        let src = fx("siglip").join(folder);
        let model = siglip::load(&src, &Device::Cpu).unwrap();
        let pixels = siglip::pixels(&model.cfg, &src).unwrap();
        let want = Crop::ResizeSquare {
            filter: Filter::Bicubic,
        };
        assert_eq!((pixels.size, pixels.crop), (36, want), "{folder}");
        check(model, pixels, &io, folder);
    }
}

#[test]
fn dinov2_pictures_from_files_match_the_bit_image_processor() {
    let io = io("dinov2");
    for folder in ["plain", "registers"] {
        let src = fx("dinov2").join(folder);
        let model = dinov2::load(&src, &Device::Cpu).unwrap();
        let pixels = dinov2::pixels(&src, None).unwrap();
        assert_eq!((pixels.size, pixels.crop.resize_side()), (40, Some(46)));
        assert_eq!(pixels.mean, dinov2::DINOV2_MEAN);
        check(model, pixels, &io, folder);
    }
}

#[test]
fn a_processor_at_another_side_than_the_tower_is_refused_naming_its_file() {
    let d = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fx("clip/vision").join(f), d.path().join(f)).unwrap();
    }
    std::fs::write(
        d.path().join("preprocessor_config.json"),
        r#"{"size": {"shortest_edge": 48}, "crop_size": 48}"#,
    )
    .unwrap();
    let model = clip::load(d.path(), &Device::Cpu).unwrap();
    let e = clip::pixels(&model.cfg, d.path()).unwrap_err().to_string();
    assert!(
        e.contains("preprocessor_config.json") && e.contains("48x48"),
        "{e}"
    );
    // Without the file: the released processor at the tower's side.
    std::fs::remove_file(d.path().join("preprocessor_config.json")).unwrap();
    let p = clip::pixels(&model.cfg, d.path()).unwrap();
    assert_eq!(
        p.crop,
        Crop::ShortestEdgeCrop {
            resize: 32,
            filter: Filter::Bicubic
        }
    );
}
