//! `imgseq vq train` / `imgseq vq eval` on tiny synthetic images with a tiny VQGAN
//! (ch 32, two levels → f = 2, 32 codes of size 8): training lowers the loss, a resumed run
//! ends exactly where an uninterrupted one does, and eval prints its figures.

use crate::common;
use common::{fails, ok};

use image::{Rgb, RgbImage};
use imgseq_train::vqgan::{self as train, TrainConfig};
use imgseq_vqgan::VqConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const TINY: &str = r#"{"embed_dim": 8, "n_embed": 32, "ddconfig": {"ch": 32, "ch_mult": [1, 1],
 "num_res_blocks": 1, "attn_resolutions": [], "z_channels": 8, "double_z": false,
 "resolution": 32, "in_channels": 3, "out_ch": 3, "dropout": 0.0}}"#;

/// Six 48×40 images of smooth colour ramps and a square, plus the tiny config.
fn fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let imgs = dir.join("imgs");
    std::fs::create_dir_all(imgs.join("sub")).unwrap();
    for i in 0..6u32 {
        let img = RgbImage::from_fn(48, 40, |x, y| {
            let inside = (10..26).contains(&x) && (8..24).contains(&y) && i % 2 == 0;
            if inside {
                Rgb([230, 40, 40])
            } else {
                Rgb([
                    ((x * 5 + i * 30) % 256) as u8,
                    (y * 6) as u8,
                    ((x + y) * 2 + i * 20) as u8,
                ])
            }
        });
        let sub = if i < 3 { "" } else { "sub" };
        img.save(imgs.join(sub).join(format!("{i}.png"))).unwrap();
    }
    let cfg = dir.join("tiny.json");
    std::fs::write(&cfg, TINY).unwrap();
    (imgs, cfg)
}

fn tiny_tc(data: &Path, steps: usize) -> TrainConfig {
    let mut tc = TrainConfig::default_for(data);
    tc.crop = 16;
    tc.resize = 32;
    tc.batch_size = 4;
    tc.steps = steps;
    tc.lr = 2e-3;
    tc.min_lr = 2e-3;
    tc.warmup = 0;
    tc.kmeans_rows = 256;
    tc.kmeans_iters = 5;
    tc.dead_after = 2;
    tc.restart_every = 2;
    tc.checkpoint_every = 2;
    tc.log_every = 1;
    tc.ae_warmup = 0;
    tc.context_from = 0;
    tc.extra_scales = vec![40];
    tc
}

fn tensors(path: &Path) -> HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            let v = t
                .to_dtype(candle_core::DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            (k, v)
        })
        .collect()
}

fn assert_close(a: &HashMap<String, Vec<f32>>, b: &HashMap<String, Vec<f32>>, what: &str) {
    let mut ka: Vec<_> = a.keys().collect();
    let mut kb: Vec<_> = b.keys().collect();
    ka.sort();
    kb.sort();
    assert_eq!(ka, kb, "{what}: different tensor names");
    for (k, va) in a {
        let vb = &b[k];
        for (x, y) in va.iter().zip(vb) {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                "{what}: `{k}` differs: {x} vs {y}"
            );
        }
    }
}

#[test]
fn a_few_steps_reduce_the_loss() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let st = train::train(
        &cfg,
        &tiny_tc(&imgs, 40),
        &d.path().join("run"),
        false,
        false,
    )
    .unwrap();
    assert_eq!(st.step, 40);
    assert_eq!(st.history.len(), 40);
    let mean = |s: &[train::LogPoint]| s.iter().map(|p| p.loss).sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&st.history[..5]), mean(&st.history[35..]));
    assert!(last < 0.8 * first, "loss {first:.4} → {last:.4}");
    // The checkpoint loads with the ordinary loader (taming names, config.json beside).
    let m = imgseq_vqgan::load_model(
        d.path().join("run/model.safetensors"),
        None,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    assert_eq!(m.config(), &cfg);
}

/// The shipped recipe's path at tiny size: an l2-normalised codebook (the `photo` preset's
/// quantizer), a plain-autoencoder warm-up that decodes unit-length latents, k-means of unit
/// rows, then quantized steps. The loss falls, the codes stay in use, and the run folds into
/// a plain taming model (`weights convert --fold-l2-norm --taming-yaml`) with the same tokens.
#[test]
fn an_l2_codebook_trains_and_folds_into_a_plain_model() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let mut cfg = VqConfig::from_json_file(cfg).unwrap();
    cfg.variant.l2_norm = true;
    let mut tc = tiny_tc(&imgs, 40);
    tc.ae_warmup = 10;
    let run = d.path().join("run");
    let st = train::train(&cfg, &tc, &run, false, false).unwrap();
    let mean = |s: &[train::LogPoint]| s.iter().map(|p| p.loss).sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&st.history[..5]), mean(&st.history[35..]));
    assert!(last < 0.8 * first, "loss {first:.4} → {last:.4}");
    let used = st.history.last().unwrap().codes_used;
    assert!(used >= 8, "only {used} of 32 codes in use at the end");
    // The warm-up's k-means ran on unit rows: the codebook's rows are all but unit length.
    let cb = &tensors(&run.join("model.safetensors"))["quantize.embedding.weight"];
    let long = cb
        .chunks(8)
        .filter(|r| (r.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() > 0.5)
        .count();
    assert!(long <= 4, "{long} of 32 codes far from unit length");
    let out = d.path().join("folded/model.safetensors");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let s = ok(&[
        "weights",
        "convert",
        run.join("model.safetensors").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--fold-l2-norm",
        "--taming-yaml",
    ]);
    assert!(
        s.contains("codebook l2-normalised") && s.contains("model.yaml"),
        "{s}"
    );
    let folded = VqConfig::from_taming_yaml_file(out.with_file_name("model.yaml")).unwrap();
    assert!(!folded.variant.l2_norm);
    let x =
        candle_core::Tensor::rand(-1f32, 1., (2, 3, 16, 16), &candle_core::Device::Cpu).unwrap();
    let dev = &candle_core::Device::Cpu;
    let a = imgseq_vqgan::load_model(run.join("model.safetensors"), None, dev).unwrap();
    let b = imgseq_vqgan::load_model(&out, None, dev).unwrap();
    let ids = |m: &imgseq_vqgan::VqModel| {
        let q = m.encode(&x).unwrap().indices;
        q.flatten_all().unwrap().to_vec1::<u32>().unwrap()
    };
    assert_eq!(ids(&a), ids(&b));
    // Refused for a model taming's code cannot express: one line, nothing written.
    std::fs::create_dir_all(d.path().join("no")).unwrap();
    let e = fails(&[
        "weights",
        "convert",
        run.join("model.safetensors").to_str().unwrap(),
        "-o",
        d.path().join("no/model.safetensors").to_str().unwrap(),
        "--taming-yaml",
    ]);
    assert!(
        e.contains("l2-normalised") && !e.trim().contains('\n'),
        "{e}"
    );
}

#[test]
fn resume_continues_exactly() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = train::train(&cfg, &tiny_tc(&imgs, 6), &a, false, false).unwrap();
    // b: 4 steps, then a resume to 6 (the 2nd run only reads what the 1st saved).
    let sb4 = train::train(&cfg, &tiny_tc(&imgs, 4), &b, false, false).unwrap();
    assert_eq!(sb4.step, 4);
    let opt4 = tensors(&b.join("optimizer.safetensors"));
    let sb = train::train(&cfg, &tiny_tc(&imgs, 6), &b, true, false).unwrap();
    assert_eq!(sb.step, 6);
    assert_eq!(sb.history.len(), 6);
    assert_eq!(sa.last_used, sb.last_used);
    assert_eq!(sa.restarts_total, sb.restarts_total);
    for (pa, pb) in sa.history.iter().zip(&sb.history) {
        assert_eq!(pa.step, pb.step);
        assert!(
            (pa.loss - pb.loss).abs() < 1e-4 * (1.0 + pa.loss),
            "{pa:?} vs {pb:?}"
        );
    }
    // Every history point carries the run's training seconds, counted on across the resume
    // (what scripts/vq_curve.py's time axis reads).
    let secs: Vec<f64> = sb.history.iter().map(|p| p.seconds.unwrap()).collect();
    assert!(secs.windows(2).all(|w| w[0] <= w[1]), "{secs:?}");
    assert!(
        secs[3] <= sb4.seconds + 1e-9 && secs[4] >= sb4.seconds - 1e-9,
        "{secs:?} {sb4:?}"
    );
    assert!(secs[5] <= sb.seconds + 1e-9, "{secs:?} {}", sb.seconds);
    assert_close(
        &tensors(&a.join("model.safetensors")),
        &tensors(&b.join("model.safetensors")),
        "weights",
    );
    let (oa, ob) = (
        tensors(&a.join("optimizer.safetensors")),
        tensors(&b.join("optimizer.safetensors")),
    );
    assert_close(&oa, &ob, "optimizer");
    assert_eq!(ob["step"], vec![6.0]);
    assert_eq!(opt4["step"], vec![4.0]);
    // Resuming a finished run does nothing.
    let again = train::train(&cfg, &tiny_tc(&imgs, 6), &b, true, false).unwrap();
    // (Floats are compared loosely: serde_json's float parsing may differ in the last bit.)
    assert_eq!(
        (again.step, &again.last_used, again.history.len()),
        (sb.step, &sb.last_used, sb.history.len())
    );
    assert!((again.seconds - sb.seconds).abs() < 1e-9);
}

/// The adversarial recipe on the tiny model: a 2-layer PatchGAN (ndf 4) from step 2.
fn gan_tc(data: &Path, steps: usize) -> TrainConfig {
    let mut tc = tiny_tc(data, steps);
    tc.gan.disc_weight = 0.8;
    tc.gan.disc_start = 2;
    tc.gan.disc_layers = 2;
    tc.gan.disc_ndf = 4;
    tc
}

#[test]
fn resume_with_the_discriminator_continues_exactly() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = train::train(&cfg, &gan_tc(&imgs, 6), &a, false, false).unwrap();
    train::train(&cfg, &gan_tc(&imgs, 4), &b, false, false).unwrap();
    let sb = train::train(&cfg, &gan_tc(&imgs, 6), &b, true, false).unwrap();
    assert_eq!(sb.step, 6);
    // Every loss term is in the history: no adversarial figures before disc_start, all of
    // them after.
    let terms: Vec<_> = sa.history.iter().map(|p| p.terms.unwrap()).collect();
    assert!(terms[..2]
        .iter()
        .all(|t| t.g == 0.0 && t.d == 0.0 && t.lambda == 0.0));
    assert!(terms[2..]
        .iter()
        .all(|t| t.d > 0.0 && t.lambda > 0.0 && t.rec > 0.0));
    for (pa, pb) in sa.history.iter().zip(&sb.history) {
        let (ta, tb) = (pa.terms.unwrap(), pb.terms.unwrap());
        assert!(
            (ta.d - tb.d).abs() < 1e-4 && (ta.lambda - tb.lambda).abs() < 1e-3 * ta.lambda.max(1.0)
        );
    }
    assert_close(
        &tensors(&a.join("model.safetensors")),
        &tensors(&b.join("model.safetensors")),
        "weights",
    );
    // The optimizer file holds the discriminator (taming names), its BatchNorm statistics and
    // its Adam, all as the uninterrupted run's.
    let (oa, ob) = (
        tensors(&a.join("optimizer.safetensors")),
        tensors(&b.join("optimizer.safetensors")),
    );
    for k in [
        "loss.discriminator.main.0.weight",
        "loss.discriminator.main.3.running_var",
        "loss.discriminator.main.3.num_batches_tracked",
        "disc_optim.main.0.weight.exp_avg",
        "disc_optim.step",
    ] {
        assert!(oa.contains_key(k), "{k} missing");
    }
    // 4 discriminator steps (2..6), each with 3 training-mode calls.
    assert_eq!(
        ob["loss.discriminator.main.3.num_batches_tracked"],
        vec![12.0]
    );
    assert_eq!(ob["disc_optim.step"], vec![4.0]);
    assert_close(&oa, &ob, "optimizer");
}

/// `--init` a trained model folder + `--freeze-encoder`: the encoder side and the codebook
/// stay bit for bit, so every token stays; the decoder side trains (here with the
/// discriminator from the first step); a run from random weights cannot freeze its encoder.
#[test]
fn freeze_encoder_keeps_every_token_and_trains_the_decoder_only() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let (model, run) = (d.path().join("model"), d.path().join("run"));
    train::train(&cfg, &tiny_tc(&imgs, 4), &model, false, false).unwrap();
    let before = tensors(&model.join("model.safetensors"));
    let mut tc = gan_tc(&imgs, 4);
    tc.gan.disc_start = 0;
    tc.freeze_encoder = true;
    tc.init_from = Some(model.clone());
    let st = train::train(&cfg, &tc, &run, false, false).unwrap();
    assert_eq!(st.step, 4);
    let after = tensors(&run.join("model.safetensors"));
    let (mut frozen, mut trained) = (0, 0);
    for (name, b) in &before {
        let decoder_side = name.starts_with("decoder.") || name.starts_with("post_quant_conv.");
        if decoder_side {
            trained += usize::from(after[name] != *b);
        } else {
            assert_eq!(after[name], *b, "{name} changed");
            frozen += 1;
        }
    }
    assert!(
        frozen >= 5 && trained >= 5,
        "{frozen} frozen, {trained} trained"
    );
    assert!(st.history.iter().all(|p| p.terms.unwrap().lambda > 0.0));
    assert_eq!(st.restarts_total, 0);
    tc.init_from = None;
    let e = train::train(&cfg, &tc, &d.path().join("fresh"), false, false).unwrap_err();
    assert!(e.to_string().contains("freeze_encoder"), "{e}");
}

#[test]
fn snapshots_copy_the_checkpoint_of_their_step_and_survive_a_resume() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let out = d.path().join("run");
    let mut tc = tiny_tc(&imgs, 3);
    tc.checkpoint_every = 4; // snapshots at 3 and 6 fall between checkpoints
    tc.snapshot_every = 3;
    train::train(&cfg, &tc, &out, false, false).unwrap();
    let snap3 = out.join("snapshots/step-00003");
    assert_eq!(
        std::fs::read(snap3.join("model.safetensors")).unwrap(),
        std::fs::read(out.join("model.safetensors")).unwrap()
    );
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap3.join("state.json")).unwrap()).unwrap();
    assert_eq!(st["step"], 3);
    tc.steps = 7;
    train::train(&cfg, &tc, &out, true, false).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(out.join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["step-00003", "step-00006"]);
    for f in ["model.safetensors", "config.json", "state.json"] {
        assert!(out.join("snapshots/step-00006").join(f).is_file(), "{f}");
    }
    // A new run over the folder (overwrite) takes the old run's snapshots with it.
    train::checkpoint::clear_run(&out).unwrap();
    assert!(!out.join("snapshots").exists());
}

#[test]
fn an_ema_run_ships_the_average_and_resumes_exactly_from_the_raw_weights() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let tc = |steps| TrainConfig {
        ema: 0.5,
        ..tiny_tc(&imgs, steps)
    };
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = train::train(&cfg, &tc(6), &a, false, false).unwrap();
    assert_eq!(sa.ema_since, Some(0));
    train::train(&cfg, &tc(3), &b, false, false).unwrap();
    let sb = train::train(&cfg, &tc(6), &b, true, false).unwrap();
    assert_eq!((sb.step, sb.ema_since), (6, Some(0)));
    assert_eq!(sa.last_used, sb.last_used);
    let (ma, oa) = (
        tensors(&a.join("model.safetensors")),
        tensors(&a.join("optimizer.safetensors")),
    );
    assert_close(&ma, &tensors(&b.join("model.safetensors")), "average");
    assert_close(&oa, &tensors(&b.join("optimizer.safetensors")), "optimizer");
    // The model file is the average, not the raw weights, which are all in the optimizer file.
    let raw: HashMap<String, Vec<f32>> = ma
        .keys()
        .map(|k| (k.clone(), oa[&format!("raw.{k}")].clone()))
        .collect();
    let w = "encoder.conv_in.weight";
    let gap = ma[w]
        .iter()
        .zip(&raw[w])
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        gap > 1e-4,
        "the average equals the raw weights (max gap {gap})"
    );
    // ... and it is a model like any other.
    imgseq_vqgan::load_model(a.join("model.safetensors"), None, &candle_core::Device::Cpu).unwrap();
}

#[test]
fn ema_given_on_resume_starts_at_the_resumed_weights_and_dropping_it_goes_on_from_the_raw_ones() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let out = d.path().join("run");
    let mut tc = tiny_tc(&imgs, 3);
    tc.restart_every = 0; // no re-seeded codes: every tensor follows the formula
    let s3 = train::train(&cfg, &tc, &out, false, false).unwrap();
    assert_eq!(s3.ema_since, None);
    let m3 = tensors(&out.join("model.safetensors"));
    tc.steps = 4;
    tc.ema = 0.75;
    let s4 = train::train(&cfg, &tc, &out, true, false).unwrap();
    assert_eq!(s4.ema_since, Some(3));
    let (m4, o4) = (
        tensors(&out.join("model.safetensors")),
        tensors(&out.join("optimizer.safetensors")),
    );
    for (k, avg) in &m4 {
        let raw = &o4[&format!("raw.{k}")];
        for ((a, r), w3) in avg.iter().zip(raw).zip(&m3[k]) {
            let want = 0.75 * w3 + 0.25 * r;
            assert!(
                (a - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "`{k}`: {a} vs {want}"
            );
        }
    }
    // Without --ema the run goes on from the raw weights, and its model is them again.
    tc.steps = 5;
    tc.ema = 0.0;
    let s5 = train::train(&cfg, &tc, &out, true, false).unwrap();
    assert_eq!(s5.ema_since, None);
    let o5 = tensors(&out.join("optimizer.safetensors"));
    assert!(!o5.keys().any(|k| k.starts_with("raw.")));
    // The average never touched the raw weights: they are those of a run that never had one.
    let mut plain = tiny_tc(&imgs, 5);
    plain.restart_every = 0;
    let r = d.path().join("plain");
    train::train(&cfg, &plain, &r, false, false).unwrap();
    assert_close(
        &tensors(&out.join("model.safetensors")),
        &tensors(&r.join("model.safetensors")),
        "raw weights after the average was dropped",
    );
}

#[test]
fn ae_warmup_and_context_stage_switch_on_time_and_resume_across_both() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    // Autoencoder warm-up for steps 1-3, 16² crops in 4s until step 4, then 24² crops in 2s.
    let tc = |steps| TrainConfig {
        ae_warmup: 3,
        context_from: 4,
        context_crop: 24,
        context_batch_size: 2,
        ..tiny_tc(&imgs, steps)
    };
    assert_eq!(tc(6).crop_at(3), (16, 4));
    assert_eq!(tc(6).crop_at(4), (24, 2));
    assert_eq!((tc(6).max_crop(), tc(4).max_crop()), (24, 16));
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    // During the warm-up no code is used and the codebook keeps its uniform(±1/n) init.
    let s3 = train::train(&cfg, &tc(3), &b, false, false).unwrap();
    assert!(s3.history.iter().all(|p| p.codes_used == 0), "{s3:?}");
    let cb3 = tensors(&b.join("model.safetensors"))[train::CODEBOOK].clone();
    assert!(cb3.iter().all(|v| v.abs() <= 1.0 / 32.0 + 1e-7));
    // After it, the codebook is a k-means of the warmed-up encoder's outputs (far larger than
    // the init) and positions use codes.
    let sa = train::train(&cfg, &tc(6), &a, false, false).unwrap();
    assert!(sa.history[3..].iter().all(|p| p.codes_used > 0), "{sa:?}");
    let cba = &tensors(&a.join("model.safetensors"))[train::CODEBOOK];
    let max = cba.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max > 2.0 / 32.0, "codebook max |v| {max}");
    // Resuming exactly at the codebook init, and across the crop switch, gives the
    // uninterrupted run.
    let sb = train::train(&cfg, &tc(6), &b, true, false).unwrap();
    assert_eq!(sa.last_used, sb.last_used);
    assert_close(
        &tensors(&a.join("model.safetensors")),
        &tensors(&b.join("model.safetensors")),
        "weights",
    );
}

#[test]
fn cli_train_resume_and_eval() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let out = d.path().join("run");
    let (imgs_s, cfg_s, out_s) = (
        imgs.display().to_string(),
        cfg.display().to_string(),
        out.display().to_string(),
    );
    let common = [
        "--crop",
        "16",
        "--resize",
        "32",
        "--batch-size",
        "2",
        "--kmeans-rows",
        "64",
        "--checkpoint-every",
        "2",
        "--ae-warmup",
        "1",
        "--extra-scales",
        "36,40",
    ];
    let mut args = vec![
        "vq", "train", "--data", &imgs_s, "--config", &cfg_s, "--out", &out_s,
    ];
    args.extend(["--steps", "3"]);
    args.extend(common);
    let s = ok(&args);
    assert!(s.contains("step 3/3"), "{s}");
    let s = ok(&["vq", "train", "--out", &out_s, "--resume", "--steps", "5"]);
    assert!(s.contains("step 5/5"), "{s}");
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).unwrap()).unwrap();
    assert_eq!(st["step"], 5);
    assert!(out.join("training.json").is_file() && out.join("config.json").is_file());

    let w = out.join("model.safetensors").display().to_string();
    let s = ok(&["vq", "eval", &imgs_s, "--weights", &w, "--size", "32"]);
    assert!(s.contains("images: 6 at 32x32"), "{s}");
    assert!(s.contains("PSNR: ") && s.contains("SSIM: "), "{s}");
    assert!(
        s.contains("codebook usage: ") && s.contains("of 32 codes"),
        "{s}"
    );
    let j: serde_json::Value = serde_json::from_str(&ok(&[
        "vq",
        "eval",
        &imgs_s,
        "--weights",
        &w,
        "--size",
        "32",
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["images"], 6);
    assert_eq!(j["tokens_per_image"], 256);
    let used = j["codes_used"].as_u64().unwrap();
    assert!((1..=32).contains(&used));
    assert!(j["psnr"].as_f64().unwrap() > 5.0);

    // Bad input: one line naming the problem.
    let e = fails(&[
        "vq",
        "train",
        "--out",
        &d.path().join("new").display().to_string(),
    ]);
    assert!(e.contains("--data"), "{e}");
    let e = fails(&[
        "vq",
        "train",
        "--data",
        &imgs_s,
        "--out",
        &out_s,
        "--overwrite",
        "--ema",
        "1.5",
    ]);
    assert!(e.contains("--ema 1.5") && e.contains("[0, 1)"), "{e}");
    assert!(
        out.join("state.json").is_file(),
        "a refused run removed the old one"
    );
    let e = fails(&[
        "vq", "train", "--data", &imgs_s, "--config", "huge", "--out", &out_s,
    ]);
    assert!(e.contains("huge") && e.contains("small"), "{e}");
    let e = fails(&[
        "vq",
        "train",
        "--data",
        &imgs_s,
        "--out",
        &out_s,
        "--extra-scales",
        "512,6x0",
    ]);
    assert!(e.contains("--extra-scales") && e.contains("6x0"), "{e}");
    // A corrupt file in the set is listed and skipped, and counted in the report.
    std::fs::write(imgs.join("broken.png"), "not a png").unwrap();
    let s = ok(&["vq", "eval", &imgs_s, "--weights", &w, "--size", "32"]);
    assert!(
        s.contains("broken.png: skipped") && s.contains("images: 6 at 32x32 (1 skipped of 7)"),
        "{s}"
    );
    // A set of nothing readable is an error naming the file.
    let broken = imgs.join("broken.png").display().to_string();
    let e = fails(&["vq", "eval", &broken, "--weights", &w, "--size", "32"]);
    assert!(
        e.contains("broken.png") && e.contains("not an image"),
        "{e}"
    );
}

/// A run folder written before the recipe file was named `training.json` (the VQGAN wrote
/// `train.json`, as the shipped `weights/vqgan` did) still resumes from the command line, and
/// its next checkpoint leaves the recipe under the new name only.
#[test]
fn an_old_train_json_run_still_resumes() {
    let d = tempfile::tempdir().unwrap();
    let (imgs, cfg) = fixture(d.path());
    let cfg = VqConfig::from_json_file(cfg).unwrap();
    let out = d.path().join("old");
    train::train(&cfg, &tiny_tc(&imgs, 2), &out, false, false).unwrap();
    std::fs::rename(out.join("training.json"), out.join("train.json")).unwrap();
    // A new run refuses the old folder too.
    let out_s = out.display().to_string();
    let e = fails(&[
        "vq",
        "train",
        "--data",
        &imgs.display().to_string(),
        "--out",
        &out_s,
    ]);
    assert!(e.contains("train.json"), "{e}");
    let s = ok(&["vq", "train", "--out", &out_s, "--resume", "--steps", "4"]);
    assert!(s.contains("step 4/4"), "{s}");
    assert!(out.join("training.json").is_file());
    assert!(!out.join("train.json").exists());
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("training.json")).unwrap()).unwrap();
    assert_eq!(
        (saved["steps"].as_u64(), saved["crop"].as_u64()),
        (Some(4), Some(16))
    );
}
