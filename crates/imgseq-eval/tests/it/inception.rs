//! pytorch-fid's `InceptionV3([3])` with the formula weights of `scripts/make_fid_fixtures.py`
//! (the full network is ~95 MB, so both sides make its weights from one formula): the pool3
//! features of the fixture pictures ≤ 1e-4 relative.

use candle_core::{Device, Tensor};
use imgseq_eval::inception::{resize_bilinear, FidInception, FEATURES};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fid")
}

fn fnv1a64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The script's `weight_formula`: bit for bit the same values.
fn formula(name: &str, shape: &[usize]) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let (lo, hi) = if name.ends_with("conv.weight") {
        let fan_in: usize = shape[1..].iter().product();
        let b = (6.0 / fan_in as f64).sqrt();
        (-b, b)
    } else if name.ends_with("bn.weight") || name.ends_with("bn.running_var") {
        (0.8, 1.2)
    } else if name.ends_with("bn.bias") || name.ends_with("bn.running_mean") {
        (-0.1, 0.1)
    } else {
        (-0.01, 0.01)
    };
    let seed = fnv1a64(name);
    (0..n as u64)
        .map(|i| {
            let u = (splitmix64(seed.wrapping_add(i)) >> 40) as f64 / (1u64 << 24) as f64;
            (lo + (hi - lo) * u) as f32
        })
        .collect()
}

/// The state dict the script gave pytorch-fid: names and shapes of the released file.
fn formula_tensors() -> HashMap<String, Tensor> {
    let text = std::fs::read_to_string(fixtures().join("formula.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, shape)| {
            let shape: Vec<usize> = shape
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let t = Tensor::from_vec(formula(name, &shape), shape, &Device::Cpu).unwrap();
            (name.clone(), t)
        })
        .collect()
}

/// Fixture picture `i` as `ToTensor` gives it: (1, 3, h, w) in [0, 1].
fn picture(i: usize) -> Tensor {
    let img = image::open(fixtures().join(format!("images/{i}.png")))
        .unwrap()
        .to_rgb8();
    let (w, h) = img.dimensions();
    let v: Vec<f32> = img.as_raw().iter().map(|&p| p as f32 / 255.0).collect();
    Tensor::from_vec(v, (h as usize, w as usize, 3), &Device::Cpu)
        .unwrap()
        .permute((2, 0, 1))
        .unwrap()
        .unsqueeze(0)
        .unwrap()
}

fn expected() -> Vec<Vec<f32>> {
    let (shape, v) = imgseq_core::npy::read_npy_f32(fixtures().join("features.npy")).unwrap();
    assert_eq!(shape, [3, FEATURES]);
    v.chunks(FEATURES).map(|r| r.to_vec()).collect()
}

/// max |a − b| / max |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0f32, f32::max)
}

fn check_features(net: &FidInception) {
    for (i, want) in expected().iter().enumerate() {
        let got = net.features(&picture(i)).unwrap();
        assert_eq!(got.dims(), [1, FEATURES]);
        let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let r = rel_diff(&got, want);
        eprintln!("picture {i}: pool3 features {r:.2e} relative to pytorch-fid");
        assert!(r <= 1e-4, "picture {i}: {r}");
    }
}

#[test]
fn pool3_features_match_pytorch_fid() {
    let net = FidInception::from_tensors(Path::new("formula"), formula_tensors()).unwrap();
    check_features(&net);
}

/// With the state dict the script saved in the released layout (`--pth`, ~95 MB):
/// `IMGSEQ_FID_PTH=/tmp/pt_inception_random.pth cargo test ... -- --ignored`.
#[test]
#[ignore = "needs IMGSEQ_FID_PTH: the script's --pth file"]
fn released_layout_pth_reads_and_matches() {
    let path = std::env::var("IMGSEQ_FID_PTH").expect("IMGSEQ_FID_PTH");
    let net = FidInception::load(Path::new(&path)).unwrap();
    check_features(&net);
}

#[test]
fn a_missing_tensor_is_named() {
    let mut t = formula_tensors();
    t.remove("Mixed_6c.branch7x7dbl_3.bn.running_var");
    let err = FidInception::from_tensors(Path::new("w.pth"), t)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("w.pth"), "{err}");
    assert!(
        err.contains("Mixed_6c.branch7x7dbl_3.bn.running_var"),
        "{err}"
    );
}

#[test]
fn bilinear_resize_keeps_constants_and_identity() {
    let x = Tensor::full(0.25f32, (1, 3, 7, 5), &Device::Cpu).unwrap();
    let y = resize_bilinear(&x, 299, 299).unwrap();
    let v = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert!(v.iter().all(|&p| (p - 0.25).abs() < 1e-7));
    // Half-pixel centres: a 2-pixel ramp upsampled to 4 reads 0, .25·1, .75·1, 1.
    let r = Tensor::from_vec(vec![0f32, 1.0], (1, 1, 1, 2), &Device::Cpu).unwrap();
    let up = resize_bilinear(&r, 1, 4).unwrap();
    let up = up.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(up, [0.0, 0.25, 0.75, 1.0]);
}
