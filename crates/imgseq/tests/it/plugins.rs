//! Families as plug-ins, from the command line: the verbs that take any tokenizer
//! (`imgseq encode | roundtrip | tokenize | inspect --model PATH`), manifests that name each
//! family with its crop rule and token precision, and resumes refused when a setting that
//! changes tokens differs (the setting named).

use crate::common::{fails, imgseq, ok};
use image::{Rgb, RgbImage};
use std::path::{Path, PathBuf};

fn fx(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(p)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A folder of two small pictures.
fn pictures(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..2u32 {
        RgbImage::from_fn(40, 36, |x, y| {
            Rgb([(x * 6 + i * 50) as u8, (y * 7) as u8, 90])
        })
        .save(src.join(format!("p{i}.png")))
        .unwrap();
    }
    src
}

#[test]
fn a_llamagen_dataset_manifest_names_llamagen_and_the_adm_crop() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    let out = d.path().join("out");
    let pt = s(&fx("llamagen/vq_tiny.pt"));
    // The top-level verb and the `vq` alias are the same command.
    for args in [
        vec![
            "tokenize",
            &s(&src),
            "--model",
            &pt,
            "--size",
            "32",
            "-o",
            &s(&out),
        ][..]
            .to_vec(),
        vec![
            "vq",
            "tokenize",
            &s(&src),
            "--weights",
            &pt,
            "--size",
            "32",
            "-o",
            &s(&out),
        ],
    ] {
        ok(&args);
    }
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let t = &m["tokenizer"];
    assert_eq!(t["family"], "llamagen", "{t}");
    assert!(
        t["crop"].as_str().unwrap().starts_with("ADM centre crop"),
        "{t}"
    );
    assert_eq!(t["precision"], "f32");
    // Another size: refused with the setting named, on one line, the folder untouched.
    let e = fails(&[
        "tokenize",
        &s(&src),
        "--model",
        &pt,
        "--size",
        "16",
        "-o",
        &s(&out),
    ]);
    assert!(
        e.contains("tokenizer.grid is [16,16] here, [8,8] now"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn resuming_with_the_bf16_encoder_is_refused_naming_the_precision() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    let out = d.path().join("out");
    let w = s(&fx("vqgan/tiny.safetensors"));
    let base = [
        "vq",
        "tokenize",
        &s(&src),
        "--weights",
        &w,
        "--size",
        "32",
        "-o",
        &s(&out),
    ];
    let first = imgseq(&[&base[..], &["--bf16-encoder"]].concat());
    if !first.status.success() {
        // No bf16 conv path on this CPU: the flag is refused with its reason.
        let e = String::from_utf8_lossy(&first.stderr);
        assert!(e.contains("bf16"), "{e}");
        eprintln!("skipped: this CPU runs no bf16 encoder ({e})");
        return;
    }
    let m = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(m.contains("\"precision\": \"bf16\""), "{m}");
    let e = fails(&base);
    assert!(
        e.contains("tokenizer.precision is \"bf16\" here, \"f32\" now"),
        "{e}"
    );
}

#[test]
fn inspect_prints_the_description_every_surface_shows() {
    for (source, family, kind) in [
        (fx("llamagen/vq_tiny.pt"), "llamagen", "codes"),
        (fx("lfq/tiny.ckpt"), "open_magvit2", "codes"),
        (fx("kl/sd"), "autoencoder_kl", "latents"),
    ] {
        let out = ok(&["inspect", "--model", &s(&source), "--size", "32"]);
        let d: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(d["family"], family, "{d}");
        assert_eq!(d["output"]["kind"], kind, "{d}");
        assert_eq!(d["weights"]["sha256"].as_str().unwrap().len(), 64);
    }
}

#[test]
fn encode_with_a_continuous_tokenizer_writes_its_latents() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    let out = d.path().join("z.npy");
    ok(&[
        "encode",
        &s(&src.join("p0.png")),
        "--model",
        &s(&fx("kl/sd")),
        "--size",
        "32",
        "-o",
        &s(&out),
    ]);
    let (shape, data) = imgseq_core::npy::read_npy_f32(&out).unwrap();
    assert_eq!(shape, vec![4, 8, 8]);
    assert!(data.iter().all(|v| v.is_finite()));
    // And `vae encode` of the same picture gives the same latents.
    let want = d.path().join("w.npy");
    ok(&[
        "vae",
        "encode",
        &s(&src.join("p0.png")),
        "--weights",
        &s(&fx("kl/sd")),
        "--size",
        "32",
        "-o",
        &s(&want),
    ]);
    assert_eq!(imgseq_core::npy::read_npy_f32(&want).unwrap().1, data);
}

/// `imgseq tokenize --model <VAE>` writes latent shards from the VAE's description: the same
/// manifest and shard bytes as `vae tokenize`, with and without patches.
#[test]
fn tokenize_with_a_vae_writes_what_vae_tokenize_writes() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    for patch in [None, Some("2")] {
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        let _ = (std::fs::remove_dir_all(&a), std::fs::remove_dir_all(&b));
        let extra: Vec<&str> = patch.map_or(vec![], |p| vec!["--patch", p]);
        let mut top = vec!["tokenize", src.to_str().unwrap(), "--model"];
        let kl = s(&fx("kl/sd"));
        top.extend([kl.as_str(), "--size", "32", "-o", a.to_str().unwrap()]);
        top.extend(&extra);
        ok(&top);
        let mut vae = vec!["vae", "tokenize", src.to_str().unwrap(), "--weights"];
        vae.extend([kl.as_str(), "--size", "32", "-o", b.to_str().unwrap()]);
        vae.extend(&extra);
        ok(&vae);
        for f in ["manifest.json", "shard-000000.tar"] {
            assert_eq!(
                std::fs::read(a.join(f)).unwrap(),
                std::fs::read(b.join(f)).unwrap(),
                "{f} with patch {patch:?}"
            );
        }
    }
}

/// Every `-o` makes its missing folders, as `roundtrip -o new/folder` always did (`weights
/// convert -o dir/model.safetensors` failed when `dir` did not exist).
#[test]
fn outputs_make_their_missing_folders() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    let t = d.path().join("new/deep/t.npy");
    ok(&[
        "encode",
        &s(&src.join("p0.png")),
        "--model",
        &s(&fx("vqgan/tiny.safetensors")),
        "--size",
        "32",
        "-o",
        &s(&t),
    ]);
    assert!(t.is_file());
    let w = d.path().join("conv/out/model.safetensors");
    ok(&[
        "weights",
        "convert",
        &s(&fx("vqgan/tiny.ckpt")),
        "--config",
        &s(&fx("vqgan/tiny_model.yaml")),
        "-o",
        &s(&w),
    ]);
    assert!(w.is_file());
}
