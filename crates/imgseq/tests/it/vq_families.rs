//! `imgseq vq ...` and `imgseq weights ...` with the other tokenizer families' released
//! layouts (the parity fixtures of `scripts/make_{llamagen,diffusers}_fixtures.py`): a
//! LlamaGen `.pt` without config, a diffusers `VQModel` folder.

use crate::common;
use common::{fails, ok};

use imgseq_core::npy;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// LlamaGen's tokens of `photo.png` (ADM crop to 32², then the model), from the fixture.
fn llamagen_tokens() -> Vec<i64> {
    let io =
        candle_core::safetensors::load(fx("llamagen/io.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    io["indices"]
        .flatten_all()
        .unwrap()
        .to_vec1::<i64>()
        .unwrap()
}

fn read_tokens(p: &Path) -> Vec<i64> {
    npy::read_npy_i64(p).unwrap().1
}

#[test]
fn llamagen_pt_encodes_an_image_file_to_llamagens_tokens() {
    let d = tempfile::tempdir().unwrap();
    let pt = d.path().join("vq_ds16_c2i.pt");
    std::fs::copy(fx("llamagen/vq_tiny.pt"), &pt).unwrap();
    let photo = s(&fx("llamagen/photo.png"));
    let t = d.path().join("t.npy");
    ok(&[
        "vq",
        "encode",
        &photo,
        "--weights",
        &s(&pt),
        "--size",
        "32",
        "-o",
        &s(&t),
    ]);
    assert_eq!(read_tokens(&t), llamagen_tokens());
    // decode, roundtrip, edit with the same file.
    let r = d.path().join("r.png");
    ok(&["vq", "decode", &s(&t), "--weights", &s(&pt), "-o", &s(&r)]);
    assert_eq!(image::image_dimensions(&r).unwrap(), (32, 32));
    let out = ok(&[
        "vq",
        "roundtrip",
        &photo,
        "--weights",
        &s(&pt),
        "--size",
        "32",
        "-o",
        &s(&d.path().join("rt")),
    ]);
    assert!(out.contains("tokens: 256 (16x16 grid"), "{out}");
    assert_eq!(
        read_tokens(&d.path().join("rt/tokens.npy")),
        llamagen_tokens()
    );
    let e = d.path().join("e.npy");
    ok(&[
        "vq",
        "edit",
        &s(&t),
        "--swap",
        "0,0:1,1",
        "--weights",
        &s(&pt),
        "-o",
        &s(&e),
    ]);
    // inspect names the family; convert writes our layout that gives the same tokens.
    let out = ok(&["weights", "inspect", &s(&pt)]);
    assert!(
        out.contains("family: LlamaGen VQ") && out.contains("argparse.Namespace"),
        "{out}"
    );
    std::fs::create_dir(d.path().join("conv")).unwrap();
    let conv = d.path().join("conv/model.safetensors");
    let out = ok(&["weights", "convert", &s(&pt), "-o", &s(&conv)]);
    assert!(out.contains("LlamaGen VQ"), "{out}");
    let t2 = d.path().join("t2.npy");
    ok(&[
        "vq",
        "encode",
        &photo,
        "--weights",
        &s(&conv),
        "--size",
        "32",
        "-o",
        &s(&t2),
    ]);
    assert_eq!(read_tokens(&t2), llamagen_tokens());
}

#[test]
fn diffusers_folder_works_and_needs_its_config() {
    let d = tempfile::tempdir().unwrap();
    let photo = s(&fx("llamagen/photo.png"));
    let t = d.path().join("t.npy");
    let folder = s(&fx("diffusers/vq"));
    ok(&[
        "vq",
        "encode",
        &photo,
        "--weights",
        &folder,
        "--size",
        "16",
        "-o",
        &s(&t),
    ]);
    assert_eq!(read_tokens(&t).len(), 64);
    let r = d.path().join("r.png");
    ok(&["vq", "decode", &s(&t), "--weights", &folder, "-o", &s(&r)]);
    let out = ok(&["weights", "inspect", &folder]);
    assert!(out.contains("family: diffusers VQModel"), "{out}");
    let lone = d.path().join("diffusion_pytorch_model.safetensors");
    std::fs::copy(
        fx("diffusers/vq/diffusion_pytorch_model.safetensors"),
        &lone,
    )
    .unwrap();
    let e = fails(&[
        "vq",
        "encode",
        &photo,
        "--weights",
        &s(&lone),
        "--size",
        "16",
        "-o",
        &s(&t),
    ]);
    assert!(
        e.contains("needs its config.json") && e.contains("pass --config"),
        "{e}"
    );
}

#[test]
fn janus_folder_encodes_to_janus_tokens_and_is_named() {
    let d = tempfile::tempdir().unwrap();
    let folder = s(&fx("janus"));
    let photo = s(&fx("janus/photo.png"));
    let io = candle_core::safetensors::load(fx("janus/io.safetensors"), &candle_core::Device::Cpu)
        .unwrap();
    let want = io["indices_l2"]
        .flatten_all()
        .unwrap()
        .to_vec1::<i64>()
        .unwrap();
    let t = d.path().join("t.npy");
    let args = |w: &str, t: &Path| {
        let v = [
            "vq",
            "encode",
            &photo,
            "--weights",
            w,
            "--size",
            "32",
            "-o",
            &s(t),
        ];
        v.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    let run = |v: Vec<String>| ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    run(args(&folder, &t));
    assert_eq!(read_tokens(&t), want);
    let r = d.path().join("r.png");
    ok(&["vq", "decode", &s(&t), "--weights", &folder, "-o", &s(&r)]);
    assert_eq!(image::image_dimensions(&r).unwrap(), (32, 32));
    let out = ok(&["weights", "inspect", &folder]);
    assert!(out.contains("family: Janus VQ"), "{out}");
    std::fs::create_dir(d.path().join("conv")).unwrap();
    let conv = d.path().join("conv/model.safetensors");
    let out = ok(&["weights", "convert", &folder, "-o", &s(&conv)]);
    assert!(out.contains("Janus VQ"), "{out}");
    let t2 = d.path().join("t2.npy");
    run(args(&s(&conv), &t2));
    assert_eq!(read_tokens(&t2), want);
}

/// VAR's `.pth` through every CLI step: `encode` gives the 680 multi-scale codes the library
/// gives (a (1, 680) row), `decode` takes them and the first three scales alone (a (1, 14)
/// row), a dataset job records the family and its scales, a row that is no whole scales is
/// one line of error.
#[test]
fn var_pth_encodes_decodes_and_tokenizes_from_the_cli() {
    use imgseq_core::tokenizer::Tokenizer;
    let d = tempfile::tempdir().unwrap();
    let pth = s(&fx("var/tiny.pth"));
    let photo = s(&fx("janus/photo.png"));
    let t = d.path().join("t.npy");
    ok(&["encode", &photo, "--model", &pth, "-o", &s(&t)]);
    let (shape, got) = npy::read_npy_i64(&t).unwrap();
    assert_eq!(shape, vec![1, 680]);
    let lib = imgseq_models::open(Path::new(&pth), &Default::default()).unwrap();
    let paths = [fx("janus/photo.png")];
    let pics = lib.load(&paths, false).unwrap();
    let want = lib.encode_pictures(&pics).unwrap().into_tokens().unwrap();
    assert_eq!(got, want.data);
    let r = d.path().join("r.png");
    ok(&["decode", &s(&t), "--model", &pth, "-o", &s(&r)]);
    assert_eq!(image::image_dimensions(&r).unwrap(), (32, 32));
    let k3 = d.path().join("k3.npy");
    npy::write_npy_i64(&k3, &[1, 14], &got[..14]).unwrap();
    ok(&[
        "decode",
        &s(&k3),
        "--model",
        &pth,
        "-o",
        &s(&d.path().join("k3.png")),
    ]);
    let bad = d.path().join("bad.npy");
    npy::write_npy_i64(&bad, &[1, 600], &got[..600]).unwrap();
    let e = fails(&[
        "decode",
        &s(&bad),
        "--model",
        &pth,
        "-o",
        &s(&d.path().join("x.png")),
    ]);
    assert!(e.contains("first k scales") && e.contains("600"), "{e}");
    assert!(!d.path().join("x.png").exists());
    let job = d.path().join("job");
    ok(&[
        "tokenize",
        &s(&fx("janus")),
        "--model",
        &pth,
        "-o",
        &s(&job),
    ]);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(job.join("manifest.json")).unwrap()).unwrap();
    let tk = &m["tokenizer"];
    assert_eq!(tk["family"], "var");
    assert_eq!(tk["grid"], serde_json::json!([1, 680]));
    assert_eq!(
        tk["scales"],
        serde_json::json!([1, 2, 3, 4, 5, 6, 8, 10, 13, 16])
    );
}

/// `export llamagen-codes` on an ImageFolder: LlamaGen's layout (`imagenet32_codes/{i}.npy`
/// of (1, 2, tokens): the crop's tokens then its mirror's; `imagenet32_labels/{i}.npy` the
/// class index, classes in sorted order), the same tokens `encode` gives; ten crops with
/// `--ten-crop`; a second run resumes (writes nothing).
#[test]
fn llamagen_codes_export_writes_llamagens_layout_and_resumes() {
    use imgseq_core::tokenizer::Tokenizer;
    let d = tempfile::tempdir().unwrap();
    let folder = d.path().join("train");
    for (class, n) in [("n02", 1), ("n01", 2)] {
        std::fs::create_dir_all(folder.join(class)).unwrap();
        for i in 0..n {
            std::fs::copy(
                fx("janus/photo.png"),
                folder.join(class).join(format!("{i}.png")),
            )
            .unwrap();
        }
    }
    let pt = s(&fx("llamagen/vq_tiny.pt"));
    let out = d.path().join("codes");
    let args = |extra: &[&str]| {
        let mut v = vec![
            "export",
            "llamagen-codes",
            folder.to_str().unwrap(),
            "--model",
            &pt,
            "--size",
            "32",
        ];
        v.extend_from_slice(extra);
        v.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    let run = |v: Vec<String>| ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let o = s(&out);
    let said = run(args(&["-o", &o]));
    assert!(said.contains("3 written"), "{said}");
    let (shape, codes) = npy::read_npy_i64(out.join("imagenet32_codes/2.npy")).unwrap();
    assert_eq!(shape, vec![1, 2, 256]);
    // Class folders in sorted order: n01 (two images) is class 0, n02 class 1.
    let labels: Vec<i64> = (0..3)
        .map(|i| {
            npy::read_npy_i64(out.join(format!("imagenet32_labels/{i}.npy")))
                .unwrap()
                .1[0]
        })
        .collect();
    assert_eq!(labels, vec![0, 0, 1]);
    let t = imgseq_models::open(
        Path::new(&pt),
        &imgseq_models::OpenOptions {
            size: Some(32),
            ..Default::default()
        },
    )
    .unwrap();
    let img = imgseq_core::image_io::load_rgb(fx("janus/photo.png")).unwrap();
    let x = t.input().prepare(Path::new("p"), &img, true).unwrap();
    let flip = image::imageops::flip_horizontal(&x);
    let want = t
        .encode_pictures(&[x, flip])
        .unwrap()
        .into_tokens()
        .unwrap();
    assert_eq!(codes, want.data);
    let said = run(args(&["-o", &o]));
    assert!(said.contains("0 written, 3 already there"), "{said}");
    let o10 = s(&d.path().join("ten"));
    run(args(&["--ten-crop", "-o", &o10]));
    let (shape, _) = npy::read_npy_i64(d.path().join("ten/imagenet32_codes/0.npy")).unwrap();
    assert_eq!(shape, vec![1, 10, 256]);
}

/// `imgseq eval` opens every family's fixture through the plug-in layer and scores a small
/// set with a corrupt file in it (listed, skipped, counted); the families that cannot turn
/// their outputs back into pictures are refused in one line saying so. A two-job array over
/// an evaluation folder gives the single process's per-image scores.
#[test]
fn eval_scores_every_family_fixture_and_skips_the_corrupt_file() {
    let d = tempfile::tempdir().unwrap();
    let set = d.path().join("set");
    std::fs::create_dir(&set).unwrap();
    std::fs::copy(fx("llamagen/photo.png"), set.join("a.png")).unwrap();
    let coffee = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/coffee.png");
    std::fs::copy(coffee, set.join("b.png")).unwrap();
    std::fs::write(set.join("c.png"), b"\x89PNG\r\n\x1a\n truncated").unwrap();
    let set_s = s(&set);
    let eval = |weights: &[&str]| -> serde_json::Value {
        let mut a = vec!["eval", &set_s, "--size", "32", "--json"];
        a.extend(weights);
        serde_json::from_str(&ok(&a)).unwrap()
    };
    let weights = |name: &str| vec!["--weights".to_string(), s(&fx(name))];
    let mut taming = weights("vqgan/tiny.safetensors");
    taming.extend(["--config".to_string(), s(&fx("vqgan/tiny_config.json"))]);
    let families: Vec<(&str, Vec<String>, Option<u64>)> = vec![
        ("taming", taming, Some(32)),
        ("diffusers VQModel", weights("diffusers/vq"), Some(64)),
        ("LlamaGen", weights("llamagen/vq_tiny.pt"), Some(64)),
        ("Janus", weights("janus"), Some(64)),
        ("IBQ", weights("ibq/ibq_tiny.ckpt"), Some(256)),
        ("Open-MAGVIT2", weights("lfq/tiny.ckpt"), Some(262144)),
        ("VAR", weights("var/tiny.pth"), Some(64)),
        ("Emu3", weights("emu3/vq"), Some(64)),
        ("Cosmos DI", weights("cosmos/di"), Some(64000)),
        ("TiTok", weights("titok/l"), Some(32)),
        (
            "MaskGIT-VQGAN",
            weights("maskgit/maskgit-vqgan-imagenet-f16-256.bin"),
            Some(64),
        ),
        ("SD VAE", weights("kl/sd"), None),
        ("FLUX.2 VAE", weights("kl/flux2"), None),
        ("DC-AE", weights("dcae/dc"), None),
        ("Cosmos CI", weights("cosmos/ci"), None),
    ];
    for (name, w, n_embed) in &families {
        let args: Vec<&str> = w.iter().map(String::as_str).collect();
        let r = eval(&args);
        assert_eq!(
            (
                r["samples"].as_u64(),
                r["images"].as_u64(),
                r["skipped"].as_u64()
            ),
            (Some(3), Some(2), Some(1)),
            "{name}: {r}"
        );
        assert!(
            r["skipped_samples"][0].as_str().unwrap().contains("c.png"),
            "{name}: {r}"
        );
        let psnr = r["psnr"].as_f64().unwrap();
        assert!(psnr.is_finite() && psnr > 3.0, "{name}: PSNR {psnr}");
        assert_eq!(r["n_embed"].as_u64(), *n_embed, "{name}: {r}");
        if n_embed.is_some() {
            assert!(r["codes_used"].as_u64().unwrap() >= 1, "{name}: {r}");
        }
        assert_eq!(r["protocol"]["name"], "native", "{name}");
        assert!(r["model"]["weights"]["sha256"].is_string(), "{name}: {r}");
    }
    for (w, why) in [
        (fx("chameleon/vq"), "no decoder"),
        (
            fx("clip/vision"),
            "cannot turn these values back into images",
        ),
        (
            fx("dinov2/plain"),
            "cannot turn these values back into images",
        ),
    ] {
        let e = fails(&["eval", &set_s, "--size", "32", "--weights", &s(&w)]);
        assert!(e.contains(why), "{}: {e}", w.display());
    }

    // The same set as a two-job array in a folder: the last job writes the report, with the
    // single process's per-image lines.
    let single = eval(&["--weights", &s(&fx("llamagen/vq_tiny.pt"))]);
    let out = d.path().join("ev");
    let (out_s, llamagen) = (s(&out), s(&fx("llamagen/vq_tiny.pt")));
    for j in ["0", "1"] {
        ok(&[
            "eval",
            &set_s,
            "--size",
            "32",
            "--chunk-size",
            "1",
            "--num-shards",
            "2",
            "--shard-index",
            j,
            "-o",
            &out_s,
            "--weights",
            &llamagen,
        ]);
    }
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    for k in ["codes_used", "images", "skipped"] {
        assert_eq!(merged[k], single[k], "{k}: {merged} vs {single}");
    }
    // Means of the same per-image values (read back from the scores files: to the last bit
    // but for serde_json's parsing).
    for k in ["psnr", "ssim", "sharpness"] {
        let (a, b) = (merged[k].as_f64().unwrap(), single[k].as_f64().unwrap());
        assert!((a - b).abs() <= 1e-12 * b.abs(), "{k}: {a} vs {b}");
    }
    assert_eq!(merged["jobs"], 2);
    // `--merge` rebuilds the report from the folder alone.
    std::fs::remove_file(out.join("report.json")).unwrap();
    let again: serde_json::Value =
        serde_json::from_str(&ok(&["eval", "--merge", &out_s, "--json"])).unwrap();
    assert_eq!(again["psnr"], merged["psnr"]);
    assert!(out.join("report.json").is_file());
    // An unfinished array is named.
    let half = d.path().join("half");
    let half_s = s(&half);
    ok(&[
        "eval",
        &set_s,
        "--size",
        "32",
        "--chunk-size",
        "1",
        "--num-shards",
        "2",
        "--shard-index",
        "1",
        "-o",
        &half_s,
        "--weights",
        &llamagen,
    ]);
    let e = fails(&["eval", "--merge", &half_s]);
    assert!(e.contains("jobs [0] of 2 have not finished"), "{e}");
}

/// TiTok's `save_pretrained` folder through every CLI step: `encode` gives the library's one
/// row of latent tokens ((1, 8) for the fixture), `decode` and `roundtrip` make 32² pictures, a
/// row of another length is one line of error, and a dataset job records the family and the
/// (1, 8) grid. The MaskGIT-VQGAN state dict round-trips from the CLI too.
#[test]
fn titok_folder_and_maskgit_bin_encode_decode_and_tokenize_from_the_cli() {
    use imgseq_core::tokenizer::Tokenizer;
    let d = tempfile::tempdir().unwrap();
    let folder = s(&fx("titok/l"));
    let photo = s(&fx("janus/photo.png"));
    let t = d.path().join("t.npy");
    ok(&["encode", &photo, "--model", &folder, "-o", &s(&t)]);
    let (shape, got) = npy::read_npy_i64(&t).unwrap();
    assert_eq!(shape, vec![1, 8]);
    let lib = imgseq_models::open(Path::new(&folder), &Default::default()).unwrap();
    let pics = lib.load(&[fx("janus/photo.png")], false).unwrap();
    let want = lib.encode_pictures(&pics).unwrap().into_tokens().unwrap();
    assert_eq!(got, want.data);
    let r = d.path().join("r.png");
    ok(&["decode", &s(&t), "--model", &folder, "-o", &s(&r)]);
    assert_eq!(image::image_dimensions(&r).unwrap(), (32, 32));
    let bad = d.path().join("bad.npy");
    npy::write_npy_i64(&bad, &[1, 6], &got[..6]).unwrap();
    let e = fails(&[
        "decode",
        &s(&bad),
        "--model",
        &folder,
        "-o",
        &s(&d.path().join("x.png")),
    ]);
    assert!(e.contains("one row of 8"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    let job = d.path().join("job");
    ok(&[
        "tokenize",
        &s(&fx("janus")),
        "--model",
        &folder,
        "-o",
        &s(&job),
    ]);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(job.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["tokenizer"]["family"], "titok");
    assert_eq!(m["tokenizer"]["grid"], serde_json::json!([1, 8]));
    let bin = s(&fx("maskgit/maskgit-vqgan-imagenet-f16-256.bin"));
    let out = ok(&[
        "roundtrip",
        &photo,
        "--model",
        &bin,
        "-o",
        &s(&d.path().join("rt")),
    ]);
    assert!(out.contains("16x16 grid"), "{out}");
    assert_eq!(
        image::image_dimensions(d.path().join("rt/recon.png")).unwrap(),
        (32, 32)
    );
}

/// `export rar-tokens` writes RAR/TiTok's `pretokenized.jsonl`: one line per view with the
/// ImageFolder's class index and the flattened codes — for a tokenizer with ADM's crop, the
/// same codes as the LlamaGen export of the same folder (crop and flip, or ten crops) — and a
/// run killed between appending a chunk and recording it resumes to the same file.
#[test]
fn rar_tokens_export_writes_pretokenized_jsonl_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let folder = d.path().join("train");
    for (class, pics) in [
        ("n02", vec!["janus/photo.png"]),
        ("n01", vec!["llamagen/photo.png", "janus/photo.png"]),
    ] {
        std::fs::create_dir_all(folder.join(class)).unwrap();
        for (i, p) in pics.iter().enumerate() {
            std::fs::copy(fx(p), folder.join(class).join(format!("{i}.png"))).unwrap();
        }
    }
    let (pt, f) = (s(&fx("llamagen/vq_tiny.pt")), s(&folder));
    let lines_of = |p: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    for (ten, views) in [(false, 2), (true, 10)] {
        let (rar, llamagen) = (
            d.path().join(format!("rar{ten}")),
            d.path().join(format!("lg{ten}")),
        );
        let extra: &[&str] = if ten { &["--ten-crop"] } else { &[] };
        let mut a = vec!["export", "rar-tokens", &f, "--model", &pt, "--size", "32"];
        a.extend(extra);
        let (rs, ls) = (s(&rar), s(&llamagen));
        let said = ok(&[a.as_slice(), &["-o", &rs]].concat());
        assert!(
            said.contains("3 images of 2 classes")
                && said.contains(&format!("{} lines", 3 * views)),
            "{said}"
        );
        let mut b = vec![
            "export",
            "llamagen-codes",
            &f,
            "--model",
            &pt,
            "--size",
            "32",
        ];
        b.extend(extra);
        ok(&[b.as_slice(), &["-o", &ls]].concat());
        let lines = lines_of(&rar.join("pretokenized.jsonl"));
        assert_eq!(lines.len(), 3 * views);
        for i in 0..3 {
            let (_, codes) =
                npy::read_npy_i64(llamagen.join(format!("imagenet32_codes/{i}.npy"))).unwrap();
            let (_, label) =
                npy::read_npy_i64(llamagen.join(format!("imagenet32_labels/{i}.npy"))).unwrap();
            for v in 0..views {
                let line = &lines[i * views + v];
                assert_eq!(
                    line["class_id"].as_i64(),
                    Some(label[0]),
                    "image {i} view {v}"
                );
                let tokens: Vec<i64> = line["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_i64().unwrap())
                    .collect();
                assert_eq!(tokens, codes[v * 256..(v + 1) * 256], "image {i} view {v}");
            }
        }
    }
    // A run that appended a chunk's lines but died before recording them: the record says one
    // image, the file holds more; the resumed run cuts back and ends with the same bytes.
    let rar = d.path().join("rarfalse");
    let whole = std::fs::read(rar.join("pretokenized.jsonl")).unwrap();
    let first_image: usize = whole
        .split(|&b| b == b'\n')
        .take(2)
        .map(|l| l.len() + 1)
        .sum();
    let record = rar.join("pretokenized.progress.json");
    let mut p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    p["images_done"] = 1.into();
    p["bytes"] = first_image.into();
    std::fs::write(&record, p.to_string()).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(b"{\"class_id\": 0, \"tok");
    std::fs::write(rar.join("pretokenized.jsonl"), &torn).unwrap();
    let said = ok(&[
        "export",
        "rar-tokens",
        &f,
        "--model",
        &pt,
        "--size",
        "32",
        "-o",
        &s(&rar),
    ]);
    assert!(
        said.contains("2 encoded now") && said.contains("1 done before"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(rar.join("pretokenized.jsonl")).unwrap(),
        whole
    );
    // Other settings in the same folder are refused.
    let e = fails(&[
        "export",
        "rar-tokens",
        &f,
        "--model",
        &pt,
        "--size",
        "32",
        "--ten-crop",
        "-o",
        &s(&rar),
    ]);
    assert!(e.contains("other settings"), "{e}");
}
