//! Parity of `vq train`'s adversarial loss and LPIPS with taming-transformers' own
//! `VQLPIPSWithDiscriminator` / `NLayerDiscriminator` and the `lpips` package, on random
//! weights (`scripts/make_gan_fixtures.py`). No Python needed.

use candle_core::{Device, Tensor, Var};
use imgseq_kernels::ops::{self, Padding};
use imgseq_train::vqgan::disc::DiscNorm;
use imgseq_train::vqgan::gan::{discriminator_loss, generator_grads, DiscLoss, Gan, GanConfig};
use imgseq_train::vqgan::lpips::{Lpips, VGG16_CONVS};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gan")
        .join(name)
}

fn load(name: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx(name), &Device::Cpu).unwrap()
}

fn scalar(t: &Tensor) -> f64 {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()[0] as f64
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    d.to_scalar::<f32>().unwrap() as f64
}

/// The fixture's discriminator settings: ndf 8, 2 layers, BatchNorm, hinge, disc_weight 0.8.
fn gan(norm: DiscNorm, file: &HashMap<String, Tensor>) -> Gan {
    let cfg = GanConfig {
        disc_weight: 0.8,
        disc_start: 3,
        disc_layers: 2,
        disc_ndf: 8,
        disc_norm: norm,
        ..Default::default()
    };
    let g = Gan::new(&cfg, 3, 0).unwrap();
    g.load_weights(Path::new("fixture"), file, "disc.").unwrap();
    g
}

#[test]
fn discriminator_logits_and_losses_match_taming() {
    let f = load("gan.safetensors");
    let g = gan(DiscNorm::Batch, &f);
    let (x, recon_const) = (&f["x"], {
        ops::conv2d(&f["h"], &f["W"], Some(&f["b"]), 1, Padding::same(1)).unwrap()
    });
    let fake = g.disc.forward(&recon_const, true).unwrap();
    let real = g.disc.forward(x, true).unwrap();
    let (df, dr) = (
        max_abs_diff(&fake, &f["logits_fake"]),
        max_abs_diff(&real, &f["logits_real"]),
    );
    eprintln!("logits max |Δ|: fake {df:.1e}, real {dr:.1e}");
    assert!(df < 1e-4 && dr < 1e-4);
    let hinge = discriminator_loss(DiscLoss::Hinge, &real, &fake).unwrap();
    let vanilla = discriminator_loss(DiscLoss::Vanilla, &real, &fake).unwrap();
    assert!((scalar(&hinge) - scalar(&f["d_loss_hinge"])).abs() < 1e-4);
    assert!((scalar(&vanilla) - scalar(&f["d_loss_vanilla"])).abs() < 1e-4);
}

#[test]
fn adaptive_weight_g_loss_and_gradient_match_taming() {
    let f = load("gan.safetensors");
    let mut g = gan(DiscNorm::Batch, &f);
    let w = Var::from_tensor(&f["W"]).unwrap();
    let recon = ops::conv2d(&f["h"], w.as_tensor(), Some(&f["b"]), 1, Padding::same(1)).unwrap();
    let x = &f["x"];
    // taming with perceptual_weight 0: nll = mean|x − x̂|; codebook loss 0.3 (a constant).
    let nll = (x - &recon).unwrap().abs().unwrap().mean_all().unwrap();
    assert!((scalar(&nll) - scalar(&f["nll_loss"])).abs() < 1e-5);
    let rest = (&nll + 0.3).unwrap();
    let (g_loss, _) = g.g_loss(&recon).unwrap();
    assert!((scalar(&g_loss) - scalar(&f["g_loss"])).abs() < 1e-4);
    let vars = vec![("W".to_string(), w.clone())];
    let (grads, lambda) = generator_grads(&rest, &g_loss, &w, &vars, 0.8, 1.0).unwrap();
    let want = scalar(&f["d_weight"]);
    eprintln!("λ {lambda:.7} vs taming {want:.7}");
    assert!(
        (lambda - want).abs() < 1e-4 * want.max(1.0),
        "λ {lambda} vs taming {want}"
    );
    let total = scalar(&rest) + lambda * scalar(&g_loss);
    assert!((total - scalar(&f["total_loss"])).abs() < 1e-4);
    let gw = grads.get(w.as_tensor()).unwrap();
    let dg = max_abs_diff(gw, &f["W_grad"]);
    eprintln!("last-layer gradient max |Δ| {dg:.1e}");
    assert!(dg < 1e-4);
    // The discriminator step: taming's second and third discriminator calls.
    let d = g.d_step(x, &recon, 1.0, 1e-4).unwrap();
    assert!((d.d_loss - scalar(&f["d_loss_hinge"])).abs() < 1e-4);
    assert!((d.logits_real - scalar(&f["logits_real_mean"])).abs() < 1e-4);
    assert!((d.logits_fake - scalar(&f["logits_fake_mean"])).abs() < 1e-4);
    // BatchNorm running statistics after the three training-mode calls, as torch's.
    let bufs: HashMap<String, Tensor> = g.disc.buffers().unwrap().into_iter().collect();
    let mut checked = 0;
    for (k, want) in f.iter().filter(|(k, _)| k.starts_with("after.")) {
        let name = k.trim_start_matches("after.");
        let got = &bufs[name];
        if name.ends_with("num_batches_tracked") {
            assert_eq!(got.to_scalar::<i64>().unwrap(), 3);
        } else {
            assert!(max_abs_diff(got, want) < 1e-5, "{name}");
        }
        checked += 1;
    }
    assert!(checked >= 6, "{checked} buffers checked");
}

#[test]
fn actnorm_discriminator_initialises_from_its_first_batch_like_taming() {
    let f = load("actnorm.safetensors");
    let g = gan(DiscNorm::Act, &f);
    let logits = g.disc.forward(&f["x"], true).unwrap();
    assert!(max_abs_diff(&logits, &f["logits"]) < 1e-4);
}

/// The fixture's VGG16: `scripts/make_gan_fixtures.py`'s `formula_vgg16`.
fn formula_vgg16() -> HashMap<String, Tensor> {
    let mut out = HashMap::new();
    let mut c_in = 3;
    for (l, (i, c_out, _)) in VGG16_CONVS.iter().enumerate() {
        let s = (3.0 / (c_in * 9) as f64).sqrt();
        let w: Vec<f32> = (0..c_out * c_in * 9)
            .map(|j| (s * (0.731 * j as f64 + 1.3 * l as f64).sin()) as f32)
            .collect();
        let b: Vec<f32> = (0..*c_out)
            .map(|j| (0.05 * (0.917 * j as f64 + l as f64).cos()) as f32)
            .collect();
        let dev = Device::Cpu;
        let w = Tensor::from_vec(w, (*c_out, c_in, 3, 3), &dev).unwrap();
        out.insert(format!("features.{i}.weight"), w);
        let b = Tensor::from_vec(b, *c_out, &dev).unwrap();
        out.insert(format!("features.{i}.bias"), b);
        c_in = *c_out;
    }
    out
}

#[test]
fn lpips_distance_matches_the_lpips_package() {
    let f = load("lpips.safetensors");
    let mut all = formula_vgg16();
    all.extend(f.clone());
    let lp = Lpips::from_tensors(|n| all.get(n).cloned(), Path::new("fixture")).unwrap();
    let d = lp.forward(&f["a"], &f["b"]).unwrap();
    let want = &f["dist"];
    let rel = max_abs_diff(&d, want) / scalar(&want.abs().unwrap().max_all().unwrap());
    eprintln!("LPIPS relative |Δ| {rel:.1e}");
    assert!(rel < 1e-4, "LPIPS {d} vs lpips {want}");
    // Identical images are at distance 0; a missing head is named.
    let z = lp.forward(&f["a"], &f["a"]).unwrap();
    assert!(scalar(&z.abs().unwrap().max_all().unwrap()) < 1e-9);
    all.remove("lin3.model.1.weight");
    let err = Lpips::from_tensors(|n| all.get(n).cloned(), Path::new("x.pth"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("lin3.model.1.weight"), "{err}");
}
