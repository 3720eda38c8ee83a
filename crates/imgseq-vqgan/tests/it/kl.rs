//! Parity with diffusers' own `AutoencoderKL` (`scripts/make_kl_fixtures.py`: random weights,
//! `save_pretrained` folders): posterior mean and log-variance ≤ 1e-4 relative, decode ≥ 40 dB
//! PSNR against diffusers' decode, an SD-like model (quant convs) under diffusers' and under
//! the original LDM names, a FLUX-like one (16 channels, no quant convs, shift), FLUX's
//! `_pack_latents` order, and diffusers' tiled encode/decode.

use candle_core::{Device, Tensor};
use imgseq_vqgan::kl::{self, patch, Draw, KlModel, KlPreset};
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kl")
        .join(name)
}

fn io(what: &str) -> Tensor {
    let m = candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap();
    m[what].clone()
}

/// max |a − b| / max |b|
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    let m = b.abs().unwrap().max_all().unwrap();
    d.to_scalar::<f32>().unwrap() / m.to_scalar::<f32>().unwrap()
}

/// PSNR of `a` against `b`, both in [−1, 1] (peak-to-peak 2).
fn psnr(a: &Tensor, b: &Tensor) -> f64 {
    let mse = (a - b).unwrap().sqr().unwrap().mean_all().unwrap();
    let mse = mse.to_scalar::<f32>().unwrap() as f64;
    10.0 * (4.0 / mse).log10()
}

fn load(name: &str) -> KlModel {
    kl::load_kl(&fx(name), None, None, &Device::Cpu).unwrap()
}

fn check(m: &KlModel, name: &str) {
    let x = io(&format!("{name}.x"));
    let p = m.posterior(&x, None).unwrap();
    let r = rel_diff(&p.mean, &io(&format!("{name}.mean")));
    assert!(r < 1e-4, "{name}: mean relative diff {r}");
    let r = rel_diff(&p.logvar, &io(&format!("{name}.logvar")));
    assert!(r < 1e-4, "{name}: logvar relative diff {r}");
    let rec = m.decode_raw(&io(&format!("{name}.mean")), None).unwrap();
    let db = psnr(&rec, &io(&format!("{name}.recon")));
    assert!(db >= 40.0, "{name}: decode {db:.1} dB against diffusers'");
}

#[test]
fn sd_like_folder_matches_diffusers() {
    let m = load("sd");
    assert!(m.config().use_quant_conv);
    check(&m, "sd");
}

#[test]
fn ldm_named_single_file_matches_diffusers() {
    // The same weights under the original LDM names, with the SD folder's config.
    let m = kl::load_kl(
        &fx("ldm.safetensors"),
        Some(&fx("sd/config.json")),
        None,
        &Device::Cpu,
    )
    .unwrap();
    check(&m, "sd");
}

#[test]
fn flux_like_without_quant_convs_matches_diffusers() {
    let m = load("flux");
    assert!(!m.config().use_quant_conv && m.config().shift_factor == Some(0.1159));
    check(&m, "flux");
}

#[test]
fn encode_scales_and_shifts_as_the_pipelines_and_decode_undoes_it() {
    let m = load("flux");
    let x = io("flux.x");
    let z = m.encode(&x, Draw::Mean, None).unwrap();
    let want = ((io("flux.mean") - 0.1159).unwrap() * 0.3611).unwrap();
    assert!(rel_diff(&z, &want) < 1e-4);
    let back = m.decode(&z, None).unwrap();
    assert!(psnr(&back, &io("flux.recon")) >= 40.0);
    // A draw: mean + std·ε, repeatable by its seed.
    let a = m.encode(&x, Draw::Sample(3), None).unwrap();
    let b = m.encode(&x, Draw::Sample(3), None).unwrap();
    let c = m.encode(&x, Draw::Sample(4), None).unwrap();
    assert_eq!(rel_diff(&a, &b), 0.0);
    assert!(rel_diff(&a, &c) > 1e-3);
}

#[test]
fn patches_follow_flux_pack_latents_and_unpatch_back() {
    let mean = io("flux.mean");
    let t = patch::patchify(&mean, 2).unwrap();
    assert_eq!(rel_diff(&t, &io("flux.tokens")), 0.0);
    let (_, c, h, w) = mean.dims4().unwrap();
    let back = patch::unpatchify(&t, c, h, w, 2).unwrap();
    assert_eq!(rel_diff(&back, &io("flux.unpacked")), 0.0);
}

#[test]
fn flux2_vae_matches_diffusers_and_the_flux2_pipelines_latents() {
    let m = load("flux2");
    let cfg = m.config();
    assert_eq!(
        (
            cfg.latent_channels(),
            cfg.output_channels(),
            cfg.output_factor()
        ),
        (8, 32, 4)
    );
    // The decoder's own widths (decoder_block_out_channels (8, 8)).
    assert_eq!(cfg.decoder_config().ch_mult, vec![1, 1]);
    check(&m, "flux2");
    // The pipeline's latents: patchified 2x2, normalised by the BatchNorm statistics.
    let z = m.encode(&io("flux2.x"), Draw::Mean, None).unwrap();
    let r = rel_diff(&z, &io("flux2.latents"));
    assert!(r < 1e-4, "latents relative diff {r}");
    let back = m.decode(&io("flux2.latents"), None).unwrap();
    let db = psnr(&back, &io("flux2.latents_recon"));
    assert!(db >= 40.0, "decode from the pipeline's latents {db:.1} dB");
    // patchify ∘ unpatchify is the identity; the pipeline's _pack_latents is the p = 1 order.
    let l = io("flux2.latents");
    let (b, c, h, w) = l.dims4().unwrap();
    let round = kl::model::unpatchify_channels(&kl::model::patchify_channels(&l, 2).unwrap(), 2);
    assert_eq!(rel_diff(&round.unwrap(), &l), 0.0);
    let t = patch::patchify(&l, 1).unwrap();
    assert_eq!(t.dims(), &[b, h * w, c]);
    assert_eq!(rel_diff(&t, &io("flux2.tokens")), 0.0);
}

#[test]
fn flux2_vae_without_its_batchnorm_statistics_is_refused_naming_them() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(fx("flux2/config.json"), d.path().join("config.json")).unwrap();
    let src = fx("flux2/diffusion_pytorch_model.safetensors");
    let mut t = candle_core::safetensors::load(&src, &Device::Cpu).unwrap();
    t.remove("bn.running_var");
    candle_core::safetensors::save(&t, d.path().join("diffusion_pytorch_model.safetensors"))
        .unwrap();
    let e = kl::load_kl(d.path(), None, None, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bn.running_var") && !e.contains('\n'), "{e}");
}

#[test]
fn tiled_encode_and_decode_match_diffusers_tiling() {
    let m = load("sd");
    let x = io("sd.x_big");
    let p = m.posterior(&x, Some(16)).unwrap();
    let r = rel_diff(&p.mean, &io("sd.tiled_mean"));
    assert!(r < 1e-4, "tiled mean relative diff {r}");
    let rec = m.decode_raw(&io("sd.tiled_mean"), Some(16)).unwrap();
    let db = psnr(&rec, &io("sd.tiled_recon"));
    assert!(db >= 40.0, "tiled decode {db:.1} dB");
    // Untiled is diffusers' untiled (tiling changes the result: a different computation).
    let u = m.posterior(&x, None).unwrap();
    assert!(rel_diff(&u.mean, &io("sd.untiled_mean")) < 1e-4);
    assert!(rel_diff(&u.mean, &io("sd.tiled_mean")) > 1e-3);
}

#[test]
fn load_errors_are_one_line_and_name_the_problem() {
    let dev = Device::Cpu;
    // A single file without a config or preset.
    let e = kl::load_kl(&fx("ldm.safetensors"), None, None, &dev)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ldm.safetensors") && e.contains("--preset"),
        "{e}"
    );
    // The SD preset's released shapes do not fit the small model: the tensor is named.
    let e = kl::load_kl(&fx("ldm.safetensors"), None, Some(KlPreset::Sd), &dev)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ldm.safetensors")
            && e.contains("encoder.conv_in.weight")
            && e.contains("shape"),
        "{e}"
    );
    // FLUX weights with the SD config: 16 vs 4 latent channels.
    let e = kl::load_kl(
        &fx("flux/diffusion_pytorch_model.safetensors"),
        Some(&fx("sd/config.json")),
        None,
        &dev,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("diffusion_pytorch_model.safetensors: "), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn weights_are_recognised_as_autoencoder_kl() {
    assert_eq!(kl::is_kl_file(&fx("sd")).unwrap(), Some(("diffusers", 4)));
    assert_eq!(
        kl::is_kl_file(&fx("ldm.safetensors")).unwrap(),
        Some(("LDM", 4))
    );
    assert_eq!(
        kl::is_kl_file(&fx("flux")).unwrap(),
        Some(("diffusers", 16))
    );
    let vq = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/diffusers/vq");
    assert_eq!(kl::is_kl_file(&vq).unwrap(), None);
}

/// The SD VAE at its released size (random weights): `make_kl_fixtures.py --released DIR`
/// writes DIR (not committed; ~330 MB); run with
/// `IMGSEQ_KL_RELEASED=DIR cargo test -p imgseq-vqgan --test it kl:: -- --ignored`.
#[test]
#[ignore]
fn released_size_sd_vae_matches_diffusers() {
    let dir = PathBuf::from(std::env::var("IMGSEQ_KL_RELEASED").expect("IMGSEQ_KL_RELEASED"));
    let m = kl::load_kl(&dir, None, None, &Device::Cpu).unwrap();
    let io = candle_core::safetensors::load(dir.join("io.safetensors"), &Device::Cpu).unwrap();
    let t = std::time::Instant::now();
    let p = m.posterior(&io["x"], None).unwrap();
    let rec = m.decode_raw(&io["mean"], None).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let r = rel_diff(&p.mean, &io["mean"]);
    let db = psnr(&rec, &io["recon"]);
    eprintln!("released SD VAE 256²: mean relative diff {r:.2e}, decode {db:.1} dB, {secs:.1} s");
    assert!(r < 1e-4 && db >= 40.0);
}
