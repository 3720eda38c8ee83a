//! `imgseq vae ...` on the AutoencoderKL fixtures (`scripts/make_kl_fixtures.py`): latents and
//! patch sequences, decode back, roundtrip, `weights inspect`, one-line errors with no output.

use crate::common;
use common::{fails, ok};

use imgseq_core::npy;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    p.display().to_string()
}

#[test]
fn encode_patches_decode_and_roundtrip() {
    let d = tempfile::tempdir().unwrap();
    let out = |n: &str| d.path().join(n).display().to_string();
    let photo = fx("llamagen/photo.png");
    let flux = fx("kl/flux");
    ok(&[
        "vae",
        "encode",
        &photo,
        "--weights",
        &flux,
        "--size",
        "32",
        "--patch",
        "2",
        "-o",
        &out("t.npy"),
    ]);
    let (shape, data) = npy::read_npy_f32(out("t.npy")).unwrap();
    assert_eq!(shape, vec![64, 64]); // 16×16 latent cells of 16 channels, 2×2 patches
    ok(&[
        "vae",
        "encode",
        &photo,
        "--weights",
        &flux,
        "--size",
        "32",
        "-o",
        &out("z.npy"),
    ]);
    let (zs, z) = npy::read_npy_f32(out("z.npy")).unwrap();
    assert_eq!(zs, vec![16, 16, 16]);
    // Token 0 = channel 0 at (0,0), (0,1), (1,0), (1,1), then channel 1 ...
    assert_eq!(&data[..5], &[z[0], z[1], z[16], z[17], z[256]]);
    ok(&[
        "vae",
        "decode",
        &out("t.npy"),
        "--weights",
        &flux,
        "--patch",
        "2",
        "-o",
        &out("a.png"),
    ]);
    ok(&[
        "vae",
        "decode",
        &out("z.npy"),
        "--weights",
        &flux,
        "-o",
        &out("b.png"),
    ]);
    assert_eq!(
        std::fs::read(out("a.png")).unwrap(),
        std::fs::read(out("b.png")).unwrap()
    );
    let o = ok(&[
        "vae",
        "roundtrip",
        &photo,
        "--weights",
        &fx("kl/sd"),
        "--size",
        "32",
        "-o",
        &out("rt"),
    ]);
    assert!(
        o.contains("PSNR: ") && o.contains("SSIM: ") && o.contains("[4, 8, 8]"),
        "{o}"
    );
    for f in ["latents.npy", "recon.png", "side_by_side.png"] {
        assert!(d.path().join("rt").join(f).is_file(), "{f}");
    }
    let o = ok(&["weights", "inspect", &fx("kl/ldm.safetensors")]);
    assert!(
        o.contains("family: AutoencoderKL (LDM names, 4 latent channels)"),
        "{o}"
    );
}

#[test]
fn bad_settings_are_one_line_errors_without_output() {
    let d = tempfile::tempdir().unwrap();
    let o = d.path().join("x.npy").display().to_string();
    let photo = fx("llamagen/photo.png");
    let sd = fx("kl/sd");
    for (args, want) in [
        (
            vec!["--size", "32", "--patch", "3"],
            "--patch 3 must divide the latent grid 8x8",
        ),
        (
            vec!["--size", "64", "--tile", "20"],
            "--tile 20 must be a positive multiple of 16",
        ),
        (
            vec!["--size", "30"],
            "--size 30 must be a positive multiple of 4",
        ),
        (
            vec!["--preset", "sd9"],
            "--preset sd9 known: sd, sdxl, sd3, flux",
        ),
    ] {
        let mut a = vec!["vae", "encode", &photo, "--weights", &sd, "-o", &o];
        a.extend(args);
        let e = fails(&a);
        assert!(e.contains(want), "{e}");
        assert!(!Path::new(&o).exists());
    }
    let e = fails(&[
        "vae",
        "encode",
        &photo,
        "--weights",
        &fx("kl/ldm.safetensors"),
        "-o",
        &o,
    ]);
    assert!(
        e.contains("ldm.safetensors: no config.json") && e.contains("--preset"),
        "{e}"
    );
}
