//! The Winograd convolutions (imgseq-kernels `cpu::winograd`) are accurate enough for the
//! tokenizer: `assets/coffee.png` through the shipped `weights/vqgan` gives ≥ 99.5% of the
//! tokens of the f32 direct-convolution path, and decodes to ≥ 35 dB PSNR against its decode.

use imgseq_kernels::cpu::conv::{with_conv_algo, ConvAlgo};
use imgseq_kernels::cpu::winograd::Tile;
use imgseq_vqgan::{eval, inference, load_model, preprocess, VqModel};
use std::path::{Path, PathBuf};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p)
}

fn shipped() -> VqModel {
    load_model(
        root("weights/vqgan/model.safetensors"),
        Some(&root("weights/vqgan/config.json")),
        &candle_core::Device::Cpu,
    )
    .unwrap()
}

#[test]
fn winograd_tokens_and_decode_match_direct_on_coffee() {
    let model = shipped();
    let img = preprocess::load_square(
        &root("assets/coffee.png"),
        384,
        false,
        model.config().variant.resize,
    )
    .unwrap();
    let direct = with_conv_algo(ConvAlgo::Direct, || eval::roundtrip(&model, &img)).unwrap();
    assert_eq!(direct.tokens.data.len(), 576);
    // `auto` as shipped, and Winograd forced on every 3×3 stride-1 conv (down to the 3-channel
    // conv_in / conv_out) with each tile size.
    for algo in [
        ConvAlgo::Auto,
        ConvAlgo::Winograd(Tile::F2),
        ConvAlgo::Winograd(Tile::F4),
    ] {
        let r = with_conv_algo(algo, || eval::roundtrip(&model, &img)).unwrap();
        let same = r
            .tokens
            .data
            .iter()
            .zip(&direct.tokens.data)
            .filter(|(a, b)| a == b)
            .count();
        let agree = same as f64 / direct.tokens.data.len() as f64;
        let (psnr, _) = eval::score(&direct.reconstruction, &r.reconstruction).unwrap();
        // The decoder alone, on the direct path's tokens.
        let dec = with_conv_algo(algo, || {
            inference::decode_tokens(&model, &direct.tokens, 1, false)
        })
        .unwrap();
        let (psnr_dec, _) = eval::score(&direct.reconstruction, &dec[0]).unwrap();
        println!(
            "{algo:?}: tokens {same}/576 = {:.2}%, roundtrip {psnr:.1} dB, decoder {psnr_dec:.1} dB \
             vs direct (vs original: {:.2} dB direct, {:.2} dB {algo:?})",
            100.0 * agree,
            direct.psnr,
            r.psnr
        );
        assert!(
            agree >= 0.995,
            "{algo:?}: {same}/576 tokens as the direct path"
        );
        assert!(psnr >= 35.0, "{algo:?}: roundtrip {psnr:.2} dB vs direct");
        assert!(
            psnr_dec >= 35.0,
            "{algo:?}: decode {psnr_dec:.2} dB vs direct"
        );
    }
}
