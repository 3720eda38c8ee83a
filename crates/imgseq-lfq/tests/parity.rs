//! Parity with the `open-magvit2` package's own classes on random weights
//! (`scripts/make_lfq_fixtures.py` writes the fixtures; no PyTorch here): the Lightning
//! checkpoint and yaml load, tokens are identical, decodes are within 40 dB of theirs, the
//! EMA / raw choice and the factorised tokens match, and bad inputs give one-line errors.

use candle_core::{Device, Tensor};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_lfq::{load_model, LfqModel, LfqTokenizer, WeightSet};
use std::collections::HashMap;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lfq")
}

fn io() -> HashMap<String, Tensor> {
    imgseq_core::weights::load_tensors(dir().join("io.safetensors"), &Device::Cpu).unwrap()
}

fn model(which: WeightSet, yaml: bool) -> LfqModel {
    let y = dir().join("tiny.yaml");
    load_model(&dir().join("tiny.ckpt"), yaml.then_some(y.as_path()), which).unwrap()
}

fn ints(t: &Tensor) -> Vec<i64> {
    t.flatten_all().unwrap().to_vec1::<i64>().unwrap()
}

/// PSNR in dB of two images in [-1, 1] (peak-to-peak 2).
fn psnr(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    imgseq_core::metrics::psnr_tensor(a, b, 2.0).unwrap()
}

fn grid_of(t: &Tensor) -> TokenGrid {
    let (n, h, w) = t.dims3().unwrap();
    TokenGrid {
        n,
        h,
        w,
        batched: true,
        data: ints(t),
    }
}

fn check_weight_set(m: &LfqModel, io: &HashMap<String, Tensor>, s: &str) {
    let x = &io["x"];
    let h = m.encode_latent(x).unwrap();
    let dh = (&h - &io[&format!("h_{s}")]).unwrap().abs().unwrap();
    let max_dh = dh
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let g = m.encode(x).unwrap();
    let want = grid_of(&io[&format!("indices_{s}")]);
    assert_eq!((g.n, g.h, g.w), (want.n, want.h, want.w));
    let same = g
        .data
        .iter()
        .zip(&want.data)
        .filter(|(a, b)| a == b)
        .count();
    assert_eq!(
        same,
        want.data.len(),
        "{s}: tokens differ (latent max diff {max_dh:e})"
    );
    // The factorised [9, 9] tokens of their LFQ(token_factorization=True).
    let (pre, post) = m.quantizer().factorize_grid(&g);
    assert_eq!(
        pre.data,
        ints(&io[&format!("pre_{s}")]),
        "{s}: first 9 bits"
    );
    assert_eq!(
        post.data,
        ints(&io[&format!("post_{s}")]),
        "{s}: last 9 bits"
    );
    // Decoding the tokens vs their decoder on get_codebook_entry(indices), on the
    // straight-through latent of their forward, and on the two factorised halves.
    let dec = m.decode(&g).unwrap();
    let joined = m.quantizer().unfactorize_grid(&pre, &post).unwrap();
    let dec_f = m.decode(&joined).unwrap();
    for (name, ours) in [("codes", &dec), ("recon", &dec), ("fact", &dec_f)] {
        let p = psnr(ours, &io[&format!("{name}_{s}")]);
        eprintln!("{s} {name}: {p:.1} dB, latent max diff {max_dh:.2e}");
        assert!(p >= 40.0, "{s} {name}: {p:.1} dB");
    }
}

#[test]
fn ema_weights_by_default_match_their_ema_scope() {
    let m = model(WeightSet::Default, true);
    assert!(m.ema);
    check_weight_set(&m, &io(), "ema");
}

#[test]
fn raw_weights_match_their_model_outside_ema_scope() {
    let m = model(WeightSet::Raw, true);
    assert!(!m.ema);
    let io = io();
    check_weight_set(&m, &io, "raw");
    // The two weight sets really differ (else the test above could not tell them apart).
    assert_ne!(ints(&io["indices_raw"]), ints(&io["indices_ema"]));
}

#[test]
fn settings_read_off_the_weights_equal_the_yaml() {
    let with = model(WeightSet::Default, true);
    let without = model(WeightSet::Default, false);
    let mut c = without.config().clone();
    c.size = with.config().size;
    assert_eq!(&c, with.config());
    assert!(without.ema, "EMA copies present: their default");
    let io = io();
    assert_eq!(
        without.encode(&io["x"]).unwrap().data,
        ints(&io["indices_ema"])
    );
}

#[test]
fn random_tokens_decode_like_their_get_codebook_entry() {
    let m = model(WeightSet::Ema, true);
    let io = io();
    let p = psnr(
        &m.decode(&grid_of(&io["tokens"])).unwrap(),
        &io["tokens_dec"],
    );
    eprintln!("random tokens: {p:.1} dB");
    assert!(p >= 40.0, "{p:.1} dB");
}

#[test]
fn tokenizer_interface_round_trips_pictures() {
    let t = LfqTokenizer::new(model(WeightSet::Default, true), None).unwrap();
    assert_eq!(t.size, 32);
    assert_eq!(t.codebook_size(), Some(1 << 18));
    let img = image::RgbImage::from_fn(40, 32, |x, y| {
        image::Rgb([(x * 6) as u8, (y * 7) as u8, 90])
    });
    let pic = t
        .prepare(std::path::Path::new("a.png"), &img, false)
        .unwrap();
    let toks = t
        .encode_pictures(&[pic.clone(), pic])
        .unwrap()
        .into_tokens()
        .unwrap();
    assert_eq!((toks.n, toks.h, toks.w), (2, 16, 16));
    assert_eq!(toks.image(0), toks.image(1));
    let back = t.decode(&toks).unwrap();
    assert_eq!((back.len(), back[0].dimensions()), (2, (32, 32)));
}

fn err(r: imgseq_core::Result<LfqModel>) -> String {
    let e = r.err().expect("an error").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn yaml_with(from: &str, to: &str) -> tempfile::TempPath {
    let text = std::fs::read_to_string(dir().join("tiny.yaml")).unwrap();
    assert!(text.contains(from), "{from}");
    let f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(f.path(), text.replacen(from, to, 1)).unwrap();
    f.into_temp_path()
}

#[test]
fn config_that_does_not_fit_the_weights_is_a_one_line_error() {
    let ckpt = dir().join("tiny.ckpt");
    let cases = [
        (
            "num_res_blocks: 1",
            "num_res_blocks: 2",
            "missing tensor `encoder.down.0.block.1",
        ),
        (
            "  ch: 32",
            "  ch: 64",
            "has shape [32, 3, 3, 3], the model expects [64, 3, 3, 3]",
        ),
        (
            "  - 1\n",
            "  - 1\n      - 1\n",
            "missing tensor `encoder.down.1.downsample",
        ),
    ];
    for (from, to, want) in cases {
        let y = yaml_with(from, to);
        let e = err(load_model(&ckpt, Some(&y), WeightSet::Default));
        assert!(e.contains(want) && e.contains("tiny.ckpt"), "{want}: {e}");
    }
}

#[test]
fn checkpoint_without_ema_copies_needs_raw() {
    let ckpt = dir().join("no_ema.ckpt");
    // Their yaml sets use_ema: the EMA copies are missing.
    let y = yaml_with("ch_mult:\n      - 2\n      - 1", "ch_mult:\n      - 1");
    let e = err(load_model(&ckpt, Some(&y), WeightSet::Default));
    assert!(e.contains("no EMA weights") && e.contains("--raw"), "{e}");
    let m = load_model(&ckpt, Some(&y), WeightSet::Raw).unwrap();
    assert!(!m.ema);
    // Without a yaml the raw weights are the default (no copies to choose).
    let m = load_model(&ckpt, None, WeightSet::Default).unwrap();
    assert_eq!((m.ema, m.config().downsample_factor()), (false, 1));
}

#[test]
fn other_checkpoints_are_not_taken_for_open_magvit2() {
    let taming = dir().join("../vqgan/tiny.ckpt");
    assert!(!imgseq_lfq::is_lfq_checkpoint(&taming));
    assert!(imgseq_lfq::is_lfq_checkpoint(&dir().join("tiny.ckpt")));
    let e = err(load_model(&taming, None, WeightSet::Default));
    assert!(e.contains("not an Open-MAGVIT2 checkpoint"), "{e}");
}

/// The released layout (ch 128, ch_mult [1, 1, 2, 2, 4], 4 res blocks, 2^18 codes) on a 256²
/// image, from `make_lfq_fixtures.py --released DIR` (too large to commit): tokens identical,
/// decode ≥ 40 dB, and the encode / decode times.
#[test]
#[ignore = "needs IMGSEQ_LFQ_RELEASED=DIR from make_lfq_fixtures.py --released DIR"]
fn released_layout_matches_their_code() {
    let d = PathBuf::from(std::env::var("IMGSEQ_LFQ_RELEASED").expect("IMGSEQ_LFQ_RELEASED"));
    let (ckpt, yaml) = (d.join("released.ckpt"), d.join("released.yaml"));
    let m = load_model(&ckpt, Some(&yaml), WeightSet::Default).unwrap();
    let io = imgseq_core::weights::load_tensors(d.join("io.safetensors"), &Device::Cpu).unwrap();
    check_weight_set(&m, &io, "ema");
    let x = &io["x"];
    let (mut enc, mut dec) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let g = m.encode(x).unwrap();
        enc = enc.min(t.elapsed().as_secs_f64());
        let t = std::time::Instant::now();
        m.decode(&g).unwrap();
        dec = dec.min(t.elapsed().as_secs_f64());
    }
    eprintln!(
        "imgseq {:?}: encode {enc:.2} s, decode {dec:.2} s",
        x.dims()
    );
}
