//! Training a VQGAN on a folder of photos: random crops ([`crate::data`]), the loss of
//! [`crate::loss`], AdamW with warm-up + cosine, a codebook kept alive by
//! [`crate::codebook`] (k-means initialisation on encoder outputs, optionally after an
//! autoencoder warm-up with the quantizer bypassed; dead-code restarts: every `restart_every`
//! steps each code unused for `dead_after` steps is re-seeded from a random encoder output of
//! the current batch and its AdamW moments are reset), and a run folder ([`checkpoint`])
//! written every `checkpoint_every` steps, optionally with a moving average of the weights
//! as the run's model ([`ema`]). Every step draws its crops from a generator seeded
//! by (seed, step), so a resumed run continues exactly.

pub mod checkpoint;
pub mod config;
pub mod ema;
mod init;
mod report;

pub use crate::quantize::CODEBOOK;
pub use checkpoint::{
    LogPoint, TrainState, CONFIG_FILE, OPTIM_FILE, STATE_FILE, TRAIN_FILE, WEIGHTS_FILE,
};
pub use config::TrainConfig;

use crate::codebook;
use crate::config::VqConfig;
use crate::data::{data_paths, load_idx_training_images, load_training_images, random_crops};
use crate::loss::{loss, psnr_of_mse};
use crate::model::{Bottleneck, VqModel};
use candle_core::{DType, Device, Var};
use candle_nn::{VarBuilder, VarMap};
use image::RgbImage;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::data::idx::is_idx_images_name;
use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_core::{Error, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use report::Window;
use std::path::Path;
use std::time::Instant;

/// Trains (or, with `resume`, continues the run in `out`) a VQGAN. Starting follows
/// [`checkpoint::check_start`]: a new run refuses a folder holding one, `resume` needs one.
/// Writes a checkpoint every `checkpoint_every` steps and at the end, and nothing (not even
/// the folder) before the first one, so a run that fails early (bad data, divergence) leaves
/// nothing behind; returns the final state.
/// `progress`: draw a progress bar (hidden anyway when stderr is not a terminal; then a line
/// is printed every ~10% of the run, or every `log_every` steps when that is set).
pub fn train(
    cfg: &VqConfig,
    tc: &TrainConfig,
    out: &Path,
    resume: bool,
    progress: bool,
) -> Result<TrainState> {
    cfg.validate(Path::new("<config>"))?;
    tc.validate(cfg)?;
    checkpoint::check_start(out, resume)?;
    let paths = if is_idx_images_name(&tc.data) {
        Vec::new()
    } else {
        data_paths(&tc.data)?
    };
    let channels = cfg.ddconfig.in_channels;

    // The model as trainable variables, and AdamW (weight decay on matrices, not the codebook).
    let vars = VarMap::new();
    let model = VqModel::new(
        cfg,
        VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu),
    )?;
    let named = checkpoint::sorted_vars(&vars);
    let codebook_var = named
        .iter()
        .find(|(n, _)| n == CODEBOOK)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| Error::invalid("the model has no codebook variable"))?;
    let decays = |n: &str, v: &Var| v.as_tensor().rank() >= 2 && n != CODEBOOK;
    let opt_vars = named
        .iter()
        .map(|(n, v)| (n.clone(), v.clone(), decays(n, v)));
    let mut opt = AdamW::new(opt_vars.collect(), tc.lr, tc.weight_decay)?;
    (opt.beta1, opt.beta2) = (tc.beta1, tc.beta2);

    let resuming = resume;
    let (mut state, mut ema) = if resuming {
        checkpoint::restore(out, cfg.n_embed, &named, &mut opt, tc.ema)?
    } else {
        init::init_weights(&vars, tc.seed)?;
        let ema = (tc.ema > 0.0)
            .then(|| ema::Ema::start(tc.ema, &named))
            .transpose()?;
        let state = TrainState {
            last_used: vec![0; cfg.n_embed],
            ema_since: ema.as_ref().map(|_| 0),
            ..Default::default()
        };
        (state, ema)
    };
    if state.step >= tc.steps {
        eprintln!(
            "{}: already at step {} of {}",
            out.display(),
            state.step,
            tc.steps
        );
        return Ok(state);
    }
    let images = load_images(tc, &paths)?;
    if resuming {
        eprintln!(
            "resuming {} at step {} of {}",
            out.display(),
            state.step,
            tc.steps
        );
        if ema.is_some() && state.ema_since == Some(state.step) {
            eprintln!(
                "moving average of the weights (decay {}) starts at step {}",
                tc.ema, state.step
            );
        }
    } else if tc.ae_warmup > 0 {
        eprintln!(
            "steps 1-{}: autoencoder warm-up (quantizer bypassed), then k-means codebook init",
            tc.ae_warmup
        );
    } else {
        init_codebook(&model, cfg, tc, &images, &codebook_var)?;
        if let Some(e) = ema.as_mut() {
            e.copy_rows(&named, CODEBOOK, &(0..cfg.n_embed).collect::<Vec<_>>())?;
        }
    }

    let mut win = Window::new(tc, cfg.n_embed, &state, progress);
    while state.step < tc.steps {
        let step = state.step;
        let (crop, batch) = tc.crop_at(step);
        let seed = mix_seed(&[tc.seed, step as u64]);
        let x = random_crops(
            &images,
            crop,
            batch,
            tc.hflip,
            tc.shuffle_channels,
            channels,
            seed,
        )?;
        if tc.ae_warmup > 0 && step == tc.ae_warmup {
            // End of the autoencoder warm-up: codes from what the trained encoder emits.
            init_codebook(&model, cfg, tc, &images, &codebook_var)?;
            let all: Vec<usize> = (0..cfg.n_embed).collect();
            opt.reset_rows(CODEBOOK, &all);
            if let Some(e) = ema.as_mut() {
                e.copy_rows(&named, CODEBOOK, &all)?;
            }
            state.last_used.fill(step);
        }
        let quantize = step >= tc.ae_warmup;
        let bottleneck = if quantize {
            Bottleneck::Quantize
        } else {
            Bottleneck::Bypass
        };
        let f = model.forward(&x, bottleneck)?; // latents (b, d, s/f, s/f), recon (b, 3, s, s)
        let q = f.quantized.as_ref();
        let l = loss(&x, &f.reconstruction, q.map(|q| &q.loss), tc.loss_weights())?;
        let total = l.total.to_scalar::<f32>()? as f64;
        if !total.is_finite() {
            let msg = format!("training diverged: loss is {total} at step {}", step + 1);
            return Err(Error::invalid(msg));
        }
        let grads = l.total.backward()?;
        opt.lr = warmup_cosine(step, tc.warmup, tc.steps, tc.lr, tc.min_lr);
        opt.step(&grads)?;
        drop(grads);
        state.step += 1;
        let indices = match q {
            Some(q) => q.indices.flatten_all()?.to_vec1::<u32>()?,
            None => Vec::new(),
        };
        for &i in &indices {
            state.last_used[i as usize] = state.step;
        }
        let mut restarted = 0;
        if quantize
            && tc.dead_after > 0
            && tc.restart_every > 0
            && state.step.is_multiple_of(tc.restart_every)
        {
            let mut rng = StdRng::seed_from_u64(mix_seed(&[tc.seed, state.step as u64, 0xdead]));
            let (rows, _) = codebook::latent_rows(&model.quantizer().search_space(&f.latents)?)?;
            let (last_used, s) = (&mut state.last_used, state.step);
            let dead = codebook::restart_dead_codes(
                &codebook_var,
                last_used,
                s,
                tc.dead_after,
                &rows,
                &mut rng,
            )?;
            opt.reset_rows(CODEBOOK, &dead);
            if let Some(e) = ema.as_mut() {
                e.copy_rows(&named, CODEBOOK, &dead)?;
            }
            restarted = dead.len();
            state.restarts_total += restarted;
        }
        if let Some(e) = ema.as_mut() {
            e.update(&named)?;
        }
        win.add(batch, total, psnr_of_mse(l.mse), &indices, restarted);
        win.report(&mut state, opt.lr);
        let snap = tc.snapshot_every > 0 && state.step.is_multiple_of(tc.snapshot_every);
        if snap || state.step.is_multiple_of(tc.checkpoint_every.max(1)) || state.step == tc.steps {
            state.seconds = win.run_seconds();
            checkpoint::save(out, cfg, tc, &vars, &opt, ema.as_ref(), &state)?;
            if snap {
                checkpoint::snapshot(out, state.step)?;
            }
        }
    }
    win.finish();
    Ok(state)
}

/// The training images, at every scale the config asks for.
fn load_images(tc: &TrainConfig, paths: &[std::path::PathBuf]) -> Result<Vec<RgbImage>> {
    let t_load = Instant::now();
    if is_idx_images_name(&tc.data) {
        // IDX images (Fashion-MNIST): centred on a resize×resize canvas, no rescaling.
        if !tc.extra_scales.is_empty() {
            return Err(Error::setting(
                "extra_scales",
                format!("{:?}", tc.extra_scales),
                "IDX images are used at their size: give --extra-scales none",
            ));
        }
        let images = load_idx_training_images(&tc.data, tc.resize.max(tc.max_crop()))?;
        eprintln!(
            "{} training images from {} ({:.1} s to load); crops {}x{}, batch {}",
            images.len(),
            tc.data.display(),
            t_load.elapsed().as_secs_f64(),
            tc.crop,
            tc.crop,
            tc.batch_size
        );
        return Ok(images);
    }
    let sides: Vec<usize> = std::iter::once(tc.resize)
        .chain(tc.extra_scales.iter().copied())
        .collect();
    let images = load_training_images(paths, &sides, tc.max_crop())?;
    let stage2 = if tc.context_from > 0 {
        format!(
            "; from step {}: crops {}x{}, batch {}",
            tc.context_from + 1,
            tc.context_crop,
            tc.context_crop,
            tc.context_batch_size
        )
    } else {
        String::new()
    };
    eprintln!(
        "{} training images from {} ({} scale(s), {:.1} s to load); crops {}x{}, batch {}{stage2}",
        paths.len(),
        tc.data.display(),
        1 + tc.extra_scales.len(),
        t_load.elapsed().as_secs_f64(),
        tc.crop,
        tc.crop,
        tc.batch_size
    );
    Ok(images)
}

/// Sets the codebook to a k-means of `tc.kmeans_rows` encoder outputs on random crops (no-op
/// when `kmeans_rows` is 0: taming's uniform init stays).
fn init_codebook(
    model: &VqModel,
    cfg: &VqConfig,
    tc: &TrainConfig,
    images: &[RgbImage],
    codebook_var: &Var,
) -> Result<()> {
    if tc.kmeans_rows == 0 {
        return Ok(());
    }
    let t0 = Instant::now();
    let f = cfg.downsample_factor();
    let per_batch = tc.batch_size * (tc.crop / f) * (tc.crop / f);
    let batches = tc.kmeans_rows.div_ceil(per_batch).clamp(1, 256);
    let latents = (0..batches)
        .map(|i| {
            let seed = mix_seed(&[tc.seed, 0x6b6d, i as u64]);
            let x = random_crops(
                images,
                tc.crop,
                tc.batch_size,
                tc.hflip,
                tc.shuffle_channels,
                cfg.ddconfig.in_channels,
                seed,
            )?;
            let z = model.encode_latents(&x)?;
            model.quantizer().search_space(&z).map_err(Error::from)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rng = StdRng::seed_from_u64(mix_seed(&[tc.seed, 0x6b6d]));
    let rows = codebook::init_from_latents(codebook_var, &latents, tc.kmeans_iters, &mut rng)?;
    eprintln!(
        "codebook: k-means of {rows} encoder outputs into {} codes ({} iterations, {:.1} s)",
        cfg.n_embed,
        tc.kmeans_iters,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
