//! `imgseq vq encode | decode | roundtrip` and `imgseq weights inspect` on an Open-MAGVIT2
//! (LFQ) Lightning checkpoint (`scripts/make_lfq_fixtures.py`): the CLI's tokens are the
//! library's, EMA by default and raw with `--raw`, and bad combinations are one-line errors.

use crate::common::{fails, ok};
use imgseq_core::npy;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_lfq::{load_model, LfqTokenizer, WeightSet};
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/lfq")
        .join(name)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn picture(dir: &Path) -> PathBuf {
    let p = dir.join("a.png");
    image::RgbImage::from_fn(48, 40, |x, y| {
        image::Rgb([(x * 5) as u8, (y * 6) as u8, 128])
    })
    .save(&p)
    .unwrap();
    p
}

/// The library's tokens of the picture file (the yaml beside the checkpoint: size 32).
fn library_tokens(img: &Path, which: WeightSet) -> Vec<i64> {
    let m = load_model(&fx("tiny.ckpt"), Some(&fx("tiny.yaml")), which).unwrap();
    let t = LfqTokenizer::new(m, None).unwrap();
    let pics = t.load(&[img.to_path_buf()], false).unwrap();
    t.encode_pictures(&pics)
        .unwrap()
        .into_tokens()
        .unwrap()
        .data
}

#[test]
fn inspect_names_the_family() {
    let out = ok(&["weights", "inspect", &s(&fx("tiny.ckpt"))]);
    assert!(out.contains("family: Open-MAGVIT2 LFQ"), "{out}");
}

#[test]
fn encode_roundtrip_and_decode_agree_with_the_library() {
    let d = tempfile::tempdir().unwrap();
    let img = picture(d.path());
    let ckpt = s(&fx("tiny.ckpt"));
    let t = d.path().join("t.npy");
    ok(&["vq", "encode", &s(&img), "--weights", &ckpt, "-o", &s(&t)]);
    let (shape, toks) = npy::read_npy_i64(&t).unwrap();
    assert_eq!(shape, vec![16, 16]);
    assert_eq!(toks, library_tokens(&img, WeightSet::Default));
    let r = d.path().join("rt");
    let out = ok(&[
        "vq",
        "roundtrip",
        &s(&img),
        "--weights",
        &ckpt,
        "-o",
        &s(&r),
    ]);
    assert!(out.contains("tokens: 256 (16x16 grid"), "{out}");
    assert_eq!(npy::read_npy_i64(r.join("tokens.npy")).unwrap().1, toks);
    // `vq decode` of the tokens gives roundtrip's reconstruction, pixel for pixel.
    let png = d.path().join("d.png");
    ok(&["vq", "decode", &s(&t), "--weights", &ckpt, "-o", &s(&png)]);
    // `vq edit --weights` checks the tokens against the 2^18 codes.
    let e = d.path().join("e.npy");
    ok(&[
        "vq",
        "edit",
        &s(&t),
        "--swap",
        "0,0:15,15",
        "--weights",
        &ckpt,
        "-o",
        &s(&e),
    ]);
    let edited = npy::read_npy_i64(&e).unwrap().1;
    assert_eq!((edited[0], edited[255]), (toks[255], toks[0]));
    let a = image::open(&png).unwrap().to_rgb8();
    let b = image::open(r.join("recon.png")).unwrap().to_rgb8();
    assert_eq!(a, b);
}

#[test]
fn raw_flag_runs_the_raw_weights() {
    let d = tempfile::tempdir().unwrap();
    let img = picture(d.path());
    let t = d.path().join("t.npy");
    let ckpt = s(&fx("tiny.ckpt"));
    ok(&[
        "vq",
        "encode",
        &s(&img),
        "--weights",
        &ckpt,
        "--raw",
        "-o",
        &s(&t),
    ]);
    let raw = library_tokens(&img, WeightSet::Raw);
    assert_eq!(npy::read_npy_i64(&t).unwrap().1, raw);
    assert_ne!(raw, library_tokens(&img, WeightSet::Ema));
}

#[test]
fn bad_combinations_are_one_line_errors() {
    let d = tempfile::tempdir().unwrap();
    let img = s(&picture(d.path()));
    let o = s(&d.path().join("t.npy"));
    let taming = s(&fx("../vqgan/tiny.ckpt"));
    let e = fails(&[
        "vq",
        "encode",
        &img,
        "--weights",
        &taming,
        "--raw",
        "-o",
        &o,
    ]);
    assert!(
        e.contains("--raw applies to Lightning checkpoints with EMA copies"),
        "{e}"
    );
    let no_ema = s(&fx("no_ema.ckpt"));
    let yaml = d.path().join("c.yaml");
    let text = std::fs::read_to_string(fx("tiny.yaml")).unwrap();
    std::fs::write(&yaml, text.replace("      - 2\n      - 1\n", "      - 1\n")).unwrap();
    let e = fails(&[
        "vq",
        "encode",
        &img,
        "--weights",
        &no_ema,
        "--config",
        &s(&yaml),
        "-o",
        &o,
    ]);
    assert!(e.contains("no EMA weights") && e.contains("--raw"), "{e}");
    let e = fails(&[
        "vq",
        "encode",
        &img,
        "--weights",
        &s(&fx("tiny.ckpt")),
        "--size",
        "31",
        "-o",
        &o,
    ]);
    assert!(e.contains("31") && e.contains("multiple of 2"), "{e}");
    let lfq = s(&fx("tiny.ckpt"));
    let e = fails(&[
        "vq",
        "encode",
        &img,
        "--weights",
        &lfq,
        "--bf16-encoder",
        "-o",
        &o,
    ]);
    assert!(
        e.contains("--bf16-encoder") && e.contains("f32 only"),
        "{e}"
    );
    assert!(!Path::new(&o).exists());
}

#[test]
fn tokenize_shards_hold_vq_encodes_tokens_as_int32_and_eval_scores_roundtrips_picture() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("imgs");
    std::fs::create_dir_all(&src).unwrap();
    let img = picture(&src);
    let ckpt = s(&fx("tiny.ckpt"));
    let want = library_tokens(&img, WeightSet::Default);
    for format in ["wds", "parquet"] {
        let out = d.path().join(format);
        ok(&[
            "vq",
            "tokenize",
            &s(&src),
            "--weights",
            &ckpt,
            "--format",
            format,
            "-o",
            &s(&out),
        ]);
        let m = imgseq_shards::Manifest::read(&out.join("manifest.json")).unwrap();
        assert_eq!(m.tokenizer.n_codes, 1 << 18);
        assert_eq!(m.tokenizer.family, imgseq_lfq::NAME);
        let got = imgseq_shards::shard::read_shard(&out.join(&m.shards[0].name)).unwrap();
        assert_eq!((got[0].key.as_str(), got[0].h, got[0].w), ("a", 16, 16));
        assert_eq!(got[0].tokens, want, "{format}");
        assert!(want.iter().any(|&t| t >= 1 << 16), "a token past uint16");
    }
    // Detokenizing goes through the same loader: the shard's tokens decode to the picture
    // `vq decode` makes of them.
    let pics = d.path().join("pics");
    ok(&[
        "vq",
        "detokenize",
        &s(&d.path().join("wds")),
        "--weights",
        &ckpt,
        "-o",
        &s(&pics),
    ]);
    assert_eq!(
        image::image_dimensions(pics.join("a.png")).unwrap(),
        (32, 32)
    );
    // The tar member is int32 (2^18 codes do not fit uint16).
    let tar = std::fs::read(d.path().join("wds/shard-000000.tar")).unwrap();
    let at = tar.windows(6).position(|w| w == b"\x93NUMPY").unwrap();
    let header = String::from_utf8_lossy(&tar[at..at + 80]);
    assert!(header.contains("'<i4'"), "{header}");
    // `vq eval` of the one picture scores what `vq roundtrip` scores.
    let rt = ok(&[
        "vq",
        "roundtrip",
        &s(&img),
        "--weights",
        &ckpt,
        "-o",
        &s(&d.path().join("rt")),
    ]);
    let ev = ok(&["vq", "eval", &s(&src), "--weights", &ckpt]);
    let psnr = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("PSNR: "))
            .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
            .unwrap()
    };
    assert_eq!(psnr(&rt), psnr(&ev), "{rt}\n{ev}");
    assert!(
        ev.contains("of 262144 codes") && ev.contains("256 tokens per image"),
        "{ev}"
    );
}
