//! The Rust side of `scripts/bench.py`: runs one workload on weights and inputs written by the
//! script and prints one JSON line with the mean time per iteration and the peak RSS.
//!
//!   bench vit-train DIR BATCH STEPS    DIR: config.json, model.safetensors, inputs.safetensors
//!   bench vit-infer DIR BATCH STEPS [candle]   (default: `Classifier::logits`; candle: the model's forward)
//!   bench vq DIR REPS [f32|bf16|bf16-encoder]   DIR: config.json, model.safetensors, inputs.safetensors (x)
//!   bench conv DIR REPS                DIR: conv.safetensors (x, weight, bias)
//!   bench chameleon-encode DIR REPS   DIR: a ChameleonVQVAE save_pretrained folder, inputs.safetensors (x)
//!   bench var DIR BATCH                DIR: vae.pth (VAR's state dict), inputs.safetensors (x1, x8)
//!   bench titok DIR BATCH              DIR: a TiTok save_pretrained folder, inputs.safetensors (x1, x8)
//!   bench cosmos DIR BATCH             DIR: encoder.jit + decoder.jit (a Cosmos DI), inputs.safetensors (x1)
//!
//! Not a test: timings are only meaningful as ratios against PyTorch measured in the same run.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::optim::AdamW;
use imgseq_kernels::ops;
use imgseq_vit::checkpoint::load_tensors;
use imgseq_vit::loss::cross_entropy_smoothed;
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::path::Path;
use std::time::Instant;

/// Peak resident set of this process (VmHWM). Not `getrusage`: on Linux `ru_maxrss` survives
/// `execve`, so a child started by a big Python parent would report the parent's peak.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn time<F: FnMut() -> candle_core::Result<()>>(
    warmup: usize,
    reps: usize,
    mut f: F,
) -> candle_core::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let t0 = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

/// A tokenizer's round trip as the script's PyTorch side runs it: the inputs' `x{batch}`
/// encoded and the tokens decoded, one pass (batch 1 after a warm-up); the tokens are saved as
/// `rust_{name}_{batch}.safetensors` for the agreement.
fn roundtrip(
    dir: &Path,
    name: &str,
    batch: usize,
    encode: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
    decode: impl Fn(&Tensor) -> candle_core::Result<()>,
) -> anyhow::Result<f64> {
    let x =
        load_tensors(dir.join("inputs.safetensors"), &Device::Cpu)?[&format!("x{batch}")].clone();
    let mut tokens = None;
    let ms = time(usize::from(batch == 1), 1, || {
        let t = encode(&x)?;
        decode(&t)?;
        tokens = Some(t);
        Ok(())
    })?;
    save_tokens(
        tokens.expect("encoded"),
        &dir.join(format!("rust_{name}_{batch}.safetensors")),
    )?;
    Ok(ms)
}

/// Tokens as i64 under the name `tokens`.
fn save_tokens(t: Tensor, path: &Path) -> candle_core::Result<()> {
    let t = t.to_dtype(DType::I64)?;
    candle_core::safetensors::save(
        &std::collections::HashMap::from([("tokens".to_string(), t)]),
        path,
    )
}

fn main() -> anyhow::Result<()> {
    imgseq_kernels::tune_allocator();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dev = Device::Cpu;
    let what = args.first().map(String::as_str).unwrap_or("");
    let dir = Path::new(args.get(1).map(String::as_str).unwrap_or("."));
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let ms = match what {
        "vit-train" => {
            let (batch, steps) = (num(2, 128), num(3, 10));
            let cfg = ViTConfig::load(dir.join("config.json"))?;
            let init = load_tensors(dir.join("model.safetensors"), &dev)?;
            let vars = VarMap::new();
            let model = ViTForImageClassification::new(
                &cfg,
                VarBuilder::from_varmap(&vars, DType::F32, &dev),
            )?;
            let named = {
                let d = vars.data().lock().unwrap();
                let mut v: Vec<_> = d
                    .iter()
                    .map(|(k, var)| (k.clone(), var.clone(), var.as_tensor().rank() >= 2))
                    .collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            for (k, var, _) in &named {
                var.set(&init[k])?;
            }
            let mut opt = AdamW::new(named, 1e-3, 0.05)?;
            let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
            let x = inp["x"].narrow(0, 0, batch)?;
            let y = inp["y"].narrow(0, 0, batch)?.to_dtype(DType::U32)?;
            time(2, steps, || {
                let loss = cross_entropy_smoothed(&model.forward(&x, false)?, &y, 0.0)?;
                opt.step(&loss.backward()?)
            })?
        }
        "vit-infer" => {
            // What `imgseq vit eval` / `predict` run: `Classifier::logits` (f32 at the model's
            // size: the fused engine's forward); `candle`: the candle model's forward.
            let (batch, steps) = (num(2, 256), num(3, 10));
            let c = imgseq_vit::inference::Classifier::load(dir)?;
            let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
            let x = inp["x"].narrow(0, 0, batch)?;
            if args.get(4).map(String::as_str) == Some("candle") {
                time(2, steps, || c.model.forward(&x, false).map(|_| ()))?
            } else {
                time(2, steps, || {
                    c.logits(&x, false)
                        .map(|_| ())
                        .map_err(candle_core::Error::wrap)
                })?
            }
        }
        "vq" => {
            let reps = num(2, 2);
            let mut model = imgseq_vqgan::load::load_model(
                dir.join("model.safetensors"),
                Some(&dir.join("config.json")),
                &dev,
            )?;
            // bf16: the weights are packed here, at load (not timed), as the CLI does;
            // bf16-encoder: the encoder's too (the user's opt-in).
            let mode = args.get(3).map(String::as_str).unwrap_or("f32");
            let bf16 = mode != "f32";
            if bf16 {
                model.set_precision(imgseq_kernels::Precision::Bf16)?;
            }
            if mode == "bf16-encoder" {
                model.set_encoder_precision(imgseq_kernels::Precision::Bf16)?;
            }
            let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
            let x = inp["x"].clone();
            let mut idx = None;
            let t = time(1, reps, || {
                let q = model.encode(&x)?;
                let rec = model.decode_indices(&q.indices)?;
                idx = Some((q.indices, rec));
                Ok(())
            })?;
            if let Some((i, rec)) = idx {
                // Written so the script can compare tokens and pixels with PyTorch's.
                let mut out = std::collections::HashMap::new();
                out.insert("indices".to_string(), i.to_dtype(DType::I64)?);
                out.insert("reconstruction".to_string(), rec);
                let name = match mode {
                    "f32" => "rust_out.safetensors".to_string(),
                    m => format!("rust_out_{}.safetensors", m.replace('-', "_")),
                };
                imgseq_vit::checkpoint::save_tensors(dir.join(name), &out)?;
            }
            t
        }
        "vq-encode" => {
            // Encoding many images: images → tokens only (the encoder is f32 at every
            // precision), the batch as the script wrote it.
            let reps = num(2, 2);
            let model = imgseq_vqgan::load::load_model(
                dir.join("model.safetensors"),
                Some(&dir.join("config.json")),
                &dev,
            )?;
            let x = load_tensors(dir.join("inputs.safetensors"), &dev)?["x"].clone();
            time(1, reps, || model.encode(&x).map(|_| ()))?
        }
        "kl-encode" | "kl-decode" => {
            // diffusers AutoencoderKL (SD VAE): image → posterior mean, or latent → image,
            // one pass (no warm-up: a pass is long), as the script's PyTorch side.
            let m = imgseq_vqgan::kl::load_kl(dir, None, None, &dev)?;
            let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
            let wrap = candle_core::Error::wrap;
            if what == "kl-encode" {
                let x = inp["x"].clone();
                time(0, 1, || m.posterior(&x, None).map(|_| ()).map_err(wrap))?
            } else {
                let z = inp["z"].clone();
                time(0, 1, || m.decode_raw(&z, None).map(|_| ()).map_err(wrap))?
            }
        }
        "dcae-encode" | "dcae-decode" => {
            // diffusers AutoencoderDC (dc-ae-f32c32): image → latent, or latent → image, one
            // pass (no warm-up), as the script's PyTorch side.
            let m = imgseq_vqgan::dcae::load(dir, None, &dev)?.model;
            let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
            if what == "dcae-encode" {
                let x = inp["x"].clone();
                time(0, 1, || m.encode_raw(&x).map(|_| ()))?
            } else {
                let z = inp["z"].clone();
                time(0, 1, || m.decode_raw(&z).map(|_| ()))?
            }
        }
        "chameleon-encode" => {
            // transformers' ChameleonVQVAE (encoder only): 512² → 1,024 tokens, the tokens
            // saved for the agreement.
            let reps = num(2, 2);
            let model = imgseq_vqgan::load::load_model(dir.join("model.safetensors"), None, &dev)?;
            let x = load_tensors(dir.join("inputs.safetensors"), &dev)?["x"].clone();
            let mut idx = None;
            let ms = time(1, reps, || {
                idx = Some(model.encode(&x)?.indices);
                Ok(())
            })?;
            save_tokens(idx.expect("encoded"), &dir.join("rust_tokens.safetensors"))?;
            ms
        }
        "var" => {
            // VAR's VQVAE: 256² → 680 multi-scale codes → 256², one pass (batch 1 after a
            // warm-up), as the script's PyTorch side; the codes are saved for the agreement.
            let batch = num(2, 1);
            let m = imgseq_vqgan::var::load(&dir.join("vae.pth"), &dev)?;
            let x = load_tensors(dir.join("inputs.safetensors"), &dev)?[&format!("x{batch}")].clone();
            let patch = imgseq_vqgan::var::PATCH_NUMS_256;
            let mut codes = Vec::new();
            let wrap = candle_core::Error::wrap;
            let ms = time(usize::from(batch == 1), 1, || {
                codes = m.encode(&x).map_err(wrap)?;
                let rows: Vec<&[i64]> = codes.iter().map(Vec::as_slice).collect();
                m.decode(&rows, &patch).map(|_| ()).map_err(wrap)
            })?;
            let t = Tensor::from_vec(codes.concat(), (batch, 680), &dev)?;
            save_tokens(t, &dir.join(format!("rust_var_{batch}.safetensors")))?;
            ms
        }
        "titok" => {
            // TiTok-L-32: 256² → 32 tokens → 256² through the MaskGIT-VQGAN pixel decoder.
            let m = imgseq_vqgan::titok::load(dir, None, &dev)?.model;
            roundtrip(dir, "titok", num(2, 1), |x| m.encode(x), |t| m.decode_tokens(t).map(|_| ()))?
        }
        "emu3" => {
            // Emu3's VQ: 256² → 1,024 tokens → 256².
            let m = imgseq_vqgan::emu3::load(dir, None, &dev)?.model;
            roundtrip(dir, "emu3", num(2, 1), |x| m.encode(x), |t| m.decode_indices(t).map(|_| ()))?
        }
        "cosmos" => {
            // A Cosmos DI tokenizer from its TorchScript archives: 256² → FSQ codes → 256².
            let m = imgseq_vqgan::cosmos::load(dir, &dev)?.model;
            roundtrip(dir, "cosmos", num(2, 1), |x| m.encode_indices(x), |t| {
                m.decode_indices(t).map(|_| ())
            })?
        }
        "conv" => {
            let reps = num(2, 10);
            let t = load_tensors(dir.join("conv.safetensors"), &dev)?;
            let (x, w, b) = (&t["x"], &t["weight"], &t["bias"]);
            time(2, reps, || {
                ops::conv2d(x, w, Some(b), 1, ops::Padding::same(1)).map(|_| ())
            })?
        }
        other => anyhow::bail!("unknown workload `{other}` (vit-train, vit-infer, vq, vq-encode, kl-encode, kl-decode, dcae-encode, dcae-decode, chameleon-encode, var, titok, cosmos, emu3, conv)"),
    };
    let _ = Tensor::zeros(1, DType::F32, &dev)?;
    println!("{{\"ms\": {ms:.3}, \"peak_rss_mb\": {:.1}}}", peak_rss_mb());
    Ok(())
}
