//! The towers in bf16 (`tower::set_precision`): the fixture towers of CLIP, SigLIP (with its
//! pooling head) and DINOv2 (plain, and with registers and the SwiGLU MLP) run every linear
//! layer and the patch projection on bf16 weights with f32 sums; their hidden states, last
//! state and pooled output agree with f32's (every token's cosine at least 0.999, the largest
//! difference under 2% of the largest value), the native `vdpbf16ps` path gives the portable
//! path's bits, a tower packed for bf16 only lets its f32 weights go, and a forward pass that
//! keeps one hidden state gives the state of one that keeps them all.

use candle_core::{Device, Tensor};
use imgseq_kernels::ops::Bf16Kernel;
use imgseq_kernels::Precision;
use imgseq_vit::tower::{self, Keep, StateAgreement, TowerOutput, VisionModel};
use imgseq_vit::{clip, dinov2, siglip};
use std::path::{Path, PathBuf};

/// The least token cosine of a bf16 state against f32's.
const MIN_COSINE: f64 = 0.999;
/// The largest difference of a bf16 value from f32's, relative to f32's largest magnitude.
const MAX_REL: f64 = 0.02;

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// Every fixture tower with the pixel values of its parity fixture.
fn towers() -> Vec<(&'static str, Box<dyn VisionModel>, Tensor)> {
    let dev = Device::Cpu;
    let io = |p: &str| candle_core::safetensors::load(fx(p), &dev).unwrap();
    let clip_x = io("clip/io.safetensors")["pixel_values"].clone();
    let siglip_x = io("siglip/io.safetensors")["pixel_values"].clone();
    let plain_x = io("dinov2/plain/io.safetensors")["pixel_values_40x40"].clone();
    let reg_x = io("dinov2/registers/io.safetensors")["pixel_values_32x48"].clone();
    vec![
        (
            "clip",
            Box::new(clip::load(&fx("clip/vision"), &dev).unwrap()),
            clip_x,
        ),
        (
            "siglip",
            Box::new(siglip::load(&fx("siglip/vision"), &dev).unwrap()),
            siglip_x,
        ),
        (
            "dinov2",
            Box::new(dinov2::load(&fx("dinov2/plain"), &dev).unwrap()),
            plain_x,
        ),
        (
            "dinov2 registers swiglu",
            Box::new(dinov2::load(&fx("dinov2/registers"), &dev).unwrap()),
            reg_x,
        ),
    ]
}

/// Every state of an output: the hidden states, the last state and the pooled output.
fn states(o: &TowerOutput) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = o
        .hidden_states
        .iter()
        .enumerate()
        .map(|(i, h)| (format!("hidden_states[{i}]"), h.clone()))
        .collect();
    v.push(("last_hidden_state".into(), o.last_hidden_state.clone()));
    if let Some(p) = &o.pooled {
        v.push(("pooled".into(), p.unsqueeze(1).unwrap()));
    }
    v
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn bf16_tower_states_agree_with_f32_within_the_bar() {
    for (name, mut m, x) in towers() {
        assert_eq!(tower::precision_of(m.as_ref()), Precision::F32, "{name}");
        let f32_out = m.forward_tower(&x).unwrap();
        tower::set_precision(m.as_mut(), Precision::Bf16, Bf16Kernel::best()).unwrap();
        assert_eq!(tower::precision_of(m.as_ref()), Precision::Bf16, "{name}");
        let bf16_out = m.forward_tower(&x).unwrap();
        let (want, got) = (states(&f32_out), states(&bf16_out));
        assert_eq!(want.len(), got.len(), "{name}");
        for ((what, w), (_, g)) in want.iter().zip(&got) {
            let a = StateAgreement::of(g, w).unwrap();
            println!("{name} {what}: bf16 against f32: {a}");
            assert!(
                a.min_cosine >= MIN_COSINE && a.max_rel <= MAX_REL,
                "{name} {what}: {a}"
            );
        }
        // bf16 ran: the last state is not f32's to the bit.
        assert_ne!(
            bits(&bf16_out.last_hidden_state),
            bits(&f32_out.last_hidden_state),
            "{name}: the bf16 state equals f32's bit for bit"
        );
        // And back: f32 again gives f32's bits.
        tower::set_precision(m.as_mut(), Precision::F32, Bf16Kernel::best()).unwrap();
        let again = m.forward_tower(&x).unwrap();
        assert_eq!(
            bits(&again.last_hidden_state),
            bits(&f32_out.last_hidden_state),
            "{name}"
        );
    }
}

#[test]
fn bf16_native_tower_states_equal_the_portable_ones_bit_for_bit() {
    if !Bf16Kernel::native_available() {
        eprintln!("note: this CPU has no AVX512-BF16; the native vdpbf16ps path is not tested");
        return;
    }
    for (name, mut m, x) in towers() {
        let mut run = |k| {
            tower::set_precision(m.as_mut(), Precision::Bf16, k).unwrap();
            states(&m.forward_tower(&x).unwrap())
        };
        let (native, portable) = (run(Bf16Kernel::Native), run(Bf16Kernel::Portable));
        for ((what, n), (_, p)) in native.iter().zip(&portable) {
            assert_eq!(bits(n), bits(p), "{name} {what}");
        }
    }
}

#[test]
fn a_tower_packed_for_bf16_only_lets_its_f32_weights_go_and_gives_the_same_states() {
    for (name, mut m, x) in towers() {
        tower::set_precision(m.as_mut(), Precision::Bf16, Bf16Kernel::best()).unwrap();
        let kept = m.forward_tower(&x).unwrap();
        tower::pack_bf16_only(m.as_mut(), Bf16Kernel::best()).unwrap();
        let mut f32_left = 0;
        m.for_each_linear(&mut |l| {
            f32_left += usize::from(l.weight().is_some());
            Ok(())
        })
        .unwrap();
        assert_eq!(f32_left, 0, "{name}: layers holding f32 weights");
        let only = m.forward_tower(&x).unwrap();
        for ((what, a), (_, b)) in states(&kept).iter().zip(&states(&only)) {
            assert_eq!(bits(a), bits(b), "{name} {what}");
        }
        // Without its f32 weights the tower cannot go back to f32 (its first line says why;
        // candle adds a backtrace under RUST_BACKTRACE).
        let e = tower::set_precision(m.as_mut(), Precision::F32, Bf16Kernel::best())
            .unwrap_err()
            .to_string();
        assert!(e.lines().next().unwrap_or("").contains("bf16 only"), "{e}");
    }
}

#[test]
fn keeping_one_hidden_state_gives_the_state_of_keeping_them_all() {
    for (name, m, x) in towers() {
        let all = m.forward_tower(&x).unwrap();
        let n = all.hidden_states.len();
        for i in [0, n / 2, n - 1] {
            let one = m.forward_kept(&x, Keep::One(i)).unwrap();
            assert_eq!(one.hidden_states.len(), 1, "{name}");
            assert_eq!(
                bits(&one.hidden_states[0]),
                bits(&all.hidden_states[i]),
                "{name} state {i}"
            );
        }
        let none = m.forward_kept(&x, Keep::Nothing).unwrap();
        assert!(none.hidden_states.is_empty(), "{name}");
        assert_eq!(
            bits(&none.last_hidden_state),
            bits(&all.last_hidden_state),
            "{name}"
        );
        assert_eq!(
            none.pooled.as_ref().map(bits),
            all.pooled.as_ref().map(bits),
            "{name}"
        );
    }
}
