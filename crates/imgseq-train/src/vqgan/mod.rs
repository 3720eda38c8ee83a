//! Training a VQGAN on a folder of photos: random crops ([`data`]), the loss of [`loss`],
//! AdamW with warm-up + cosine, a codebook kept alive by [`codebook`] (k-means
//! initialisation on encoder outputs, optionally after an autoencoder warm-up with the
//! quantizer bypassed; dead-code restarts: every `restart_every` steps each code unused for
//! `dead_after` steps is re-seeded from a random encoder output of the current batch and its
//! AdamW moments are reset), and a run folder ([`checkpoint`]) written every
//! `checkpoint_every` steps, optionally with a moving average of the weights as the run's
//! model ([`ema`]). Optionally taming's adversarial loss ([`gan`]: a PatchGAN discriminator
//! ([`disc`]) trained beside the model from `disc_start`, the adaptive weight λ) and its
//! perceptual term (LPIPS, [`lpips`], from weights the user gives). Every step draws its
//! crops from a generator seeded by (seed, step), so a resumed run continues exactly.

pub mod checkpoint;
pub mod codebook;
pub mod config;
pub mod data;
pub mod disc;
pub mod ema;
pub mod gan;
mod init;
pub mod loss;
pub mod lpips;
mod report;

pub use checkpoint::{
    LogPoint, TrainState, CONFIG_FILE, OPTIM_FILE, STATE_FILE, TRAINING_FILE, WEIGHTS_FILE,
};
pub use config::TrainConfig;
pub use imgseq_vqgan::quantize::CODEBOOK;

// The model a run trains (its config, the named architectures), so that a caller that only
// trains (the command line's `vq train`) names this crate alone.
pub use imgseq_vqgan::{presets, VqConfig};

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use data::{load_idx_training_images, load_training_images, random_crops};
use gan::Gan;
use image::RgbImage;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::data::idx::is_idx_images_name;
use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_core::run::{checkpoint_due, RunDir};
use imgseq_core::weights::{load_tensors, set_vars};
use imgseq_core::{Error, Result};
use imgseq_vqgan::data::data_paths;
use imgseq_vqgan::model::{Bottleneck, Forward, VqModel};
use loss::{loss, psnr_of_mse, Loss};
use lpips::Lpips;
use rand::rngs::StdRng;
use rand::SeedableRng;
use report::Window;
use std::path::Path;
use std::time::Instant;

/// Trains (or, with `resume`, continues the run in `out`) a VQGAN. Starting follows
/// [`RunDir::check_start`]: a new run refuses a folder holding one, `resume` needs one.
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
    let run = RunDir::new(out);
    run.check_start(resume)?;
    if tc.freeze_encoder && !resume && tc.init_from.is_none() {
        return Err(Error::setting(
            "freeze_encoder",
            true,
            "needs a trained model: start from one (init_from) or resume a run",
        ));
    }
    let paths = if is_idx_images_name(&tc.data) {
        Vec::new()
    } else {
        data_paths(&tc.data)?
    };
    let mut t = Trainer::new(cfg, tc)?;
    if resume {
        let gan = t.gan.as_mut();
        (t.state, t.ema) =
            checkpoint::restore(out, cfg.n_embed, &t.named, &mut t.opt, tc.ema, gan)?;
    } else {
        t.init()?;
    }
    if run.finished(t.state.step, tc.steps) {
        return Ok(t.state);
    }
    let images = load_images(tc, &paths)?;
    t.begin(&run, resume, &images)?;
    let mut win = Window::new(tc, cfg.n_embed, &t.state, progress);
    while t.state.step < tc.steps {
        let step = t.state.step;
        let (crop, batch) = tc.crop_at(step);
        let seed = mix_seed(&[tc.seed, step as u64]);
        let (flip, shuffle, channels) = (tc.hflip, tc.shuffle_channels, cfg.ddconfig.in_channels);
        let x = random_crops(&images, crop, batch, flip, shuffle, channels, seed)?;
        if tc.ae_warmup > 0 && step == tc.ae_warmup && tc.init_from.is_none() {
            t.end_warmup(&images)?;
        }
        let (l, f, total) = t.step(&x)?;
        let indices = t.record_codes(f.quantized.as_ref())?;
        let restarted = t.restart_dead_codes(&f)?;
        if let Some(e) = t.ema.as_mut() {
            e.update(&t.named)?;
        }
        win.add(batch, total, psnr_of_mse(l.mse), &indices, restarted);
        win.add_terms(&l.terms);
        win.report(&mut t.state, t.opt.lr);
        let s = t.state.step;
        let snap = tc.snapshot_every > 0 && s.is_multiple_of(tc.snapshot_every);
        if snap || checkpoint_due(s, tc.checkpoint_every.max(1), tc.steps) {
            t.state.seconds = win.run_seconds();
            let (ema, gan) = (t.ema.as_ref(), t.gan.as_ref());
            checkpoint::save(out, cfg, tc, &t.vars, &t.opt, ema, gan, &t.state)?;
            if snap {
                checkpoint::snapshot(out, s)?;
            }
        }
    }
    win.finish();
    Ok(t.state)
}

/// The model as trainable variables, AdamW, the weights' average and the run's progress.
struct Trainer<'a> {
    cfg: &'a VqConfig,
    tc: &'a TrainConfig,
    vars: VarMap,
    model: VqModel,
    named: Vec<(String, Var)>,
    codebook_var: Var,
    opt: AdamW,
    ema: Option<ema::Ema>,
    state: TrainState,
    /// The discriminator (when `tc.gan` has one) and the decoder's last layer weight, where
    /// the adaptive weight is measured.
    gan: Option<Gan>,
    last_layer: Var,
    /// The perceptual network (when its weights were given).
    lpips: Option<Lpips>,
}

/// The decoder's last layer, whose gradients set the adaptive weight (taming's
/// `get_last_layer`).
const LAST_LAYER: &str = "decoder.conv_out.weight";

/// The perceptual network when the recipe weighs it and names its files; says once when it
/// weighs it without files.
fn perceptual_net(tc: &TrainConfig) -> Result<Option<Lpips>> {
    if tc.perceptual <= 0.0 {
        return Ok(None);
    }
    match (&tc.lpips_vgg, &tc.lpips_heads) {
        (Some(vgg), Some(heads)) => {
            let net = Lpips::load(vgg, heads)?;
            eprintln!(
                "perceptual term: LPIPS (weight {}) from {} and {}",
                tc.perceptual,
                vgg.display(),
                heads.display()
            );
            Ok(Some(net))
        }
        _ => {
            eprintln!(
                "no perceptual (LPIPS) term: no weights given (--lpips-vgg, --lpips-heads; \
                 docs/training.md says where they come from)"
            );
            Ok(None)
        }
    }
}

impl<'a> Trainer<'a> {
    /// The model and AdamW (weight decay on matrices, not the codebook).
    fn new(cfg: &'a VqConfig, tc: &'a TrainConfig) -> Result<Self> {
        let vars = VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
        let model = VqModel::new(cfg, vb)?;
        let named = checkpoint::sorted_vars(&vars);
        let codebook_var = named
            .iter()
            .find(|(n, _)| n == CODEBOOK)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::invalid("the model has no codebook variable"))?;
        let decays = |n: &str, v: &Var| v.as_tensor().rank() >= 2 && n != CODEBOOK;
        let opt_vars = named
            .iter()
            .filter(|(n, _)| tc.trains(n))
            .map(|(n, v)| (n.clone(), v.clone(), decays(n, v)));
        let mut opt = AdamW::new(opt_vars.collect(), tc.lr, tc.weight_decay)?;
        (opt.beta1, opt.beta2) = (tc.beta1, tc.beta2);
        let last_layer = named
            .iter()
            .find(|(n, _)| n == LAST_LAYER)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::invalid(format!("the model has no `{LAST_LAYER}`")))?;
        let gan = tc
            .gan
            .enabled()
            .then(|| Gan::new(&tc.gan, cfg.ddconfig.in_channels, tc.seed))
            .transpose()?;
        Ok(Self {
            gan,
            last_layer,
            lpips: perceptual_net(tc)?,
            cfg,
            tc,
            vars,
            model,
            named,
            codebook_var,
            opt,
            ema: None,
            state: TrainState::default(),
        })
    }

    /// A fresh run: seeded weights (or the trained ones of `init_from`), the average (if
    /// any) starting at them.
    fn init(&mut self) -> Result<()> {
        init::init_weights(&self.vars, self.tc.seed)?;
        if let Some(path) = &self.tc.init_from {
            let file = if path.is_dir() {
                path.join(WEIGHTS_FILE)
            } else {
                path.clone()
            };
            let saved = load_tensors(&file, &Device::Cpu)?;
            set_vars(
                &file,
                &saved,
                self.named.iter().map(|(n, v)| (n.as_str(), v)),
            )?;
        }
        if let (Some(g), Some(path)) = (&self.gan, &self.tc.gan.disc_init) {
            g.load_file(path)?;
            eprintln!("discriminator: weights from {}", path.display());
        }
        self.ema = (self.tc.ema > 0.0)
            .then(|| ema::Ema::start(self.tc.ema, &self.named))
            .transpose()?;
        self.state = TrainState {
            last_used: vec![0; self.cfg.n_embed],
            ema_since: self.ema.as_ref().map(|_| 0),
            ..Default::default()
        };
        Ok(())
    }

    /// Says how the run starts; a fresh run without a warm-up gets its k-means codebook.
    fn begin(&mut self, run: &RunDir, resume: bool, images: &[RgbImage]) -> Result<()> {
        let tc = self.tc;
        if let (false, Some(path)) = (resume, &tc.init_from) {
            eprintln!(
                "starting from the trained weights of {} (no warm-up, no codebook init)",
                path.display()
            );
        } else if resume {
            run.announce_resume(self.state.step, tc.steps);
            if self.ema.is_some() && self.state.ema_since == Some(self.state.step) {
                eprintln!(
                    "moving average of the weights (decay {}) starts at step {}",
                    tc.ema, self.state.step
                );
            }
        } else if tc.ae_warmup > 0 {
            eprintln!(
                "steps 1-{}: autoencoder warm-up (quantizer bypassed), then k-means codebook init",
                tc.ae_warmup
            );
        } else {
            init_codebook(&self.model, self.cfg, tc, images, &self.codebook_var)?;
            if let Some(e) = self.ema.as_mut() {
                let all: Vec<usize> = (0..self.cfg.n_embed).collect();
                e.copy_rows(&self.named, CODEBOOK, &all)?;
            }
        }
        Ok(())
    }

    /// End of the autoencoder warm-up: codes from what the trained encoder emits.
    fn end_warmup(&mut self, images: &[RgbImage]) -> Result<()> {
        init_codebook(&self.model, self.cfg, self.tc, images, &self.codebook_var)?;
        let all: Vec<usize> = (0..self.cfg.n_embed).collect();
        self.opt.reset_rows(CODEBOOK, &all);
        if let Some(e) = self.ema.as_mut() {
            e.copy_rows(&self.named, CODEBOOK, &all)?;
        }
        self.state.last_used.fill(self.state.step);
        Ok(())
    }

    /// One optimisation step on the batch `x` (and, once the adversarial loss has started,
    /// one discriminator step): the loss with every term, the forward pass it came from and
    /// the total loss optimised.
    fn step(&mut self, x: &Tensor) -> Result<(Loss, Forward, f64)> {
        let step = self.state.step;
        let bottleneck = if step >= self.tc.ae_warmup || self.tc.init_from.is_some() {
            Bottleneck::Quantize
        } else {
            Bottleneck::Bypass
        };
        let f = if self.tc.freeze_encoder {
            self.decoder_only_forward(x)?
        } else {
            self.model.forward(x, bottleneck)? // latents (b, d, s/f, s/f), recon (b, 3, s, s)
        };
        let q = f.quantized.as_ref();
        let w = self.tc.loss_weights();
        let mut l = loss(
            x,
            &f.reconstruction,
            q.map(|q| &q.loss),
            w,
            self.lpips.as_ref(),
        )?;
        let mut total = l.total.to_scalar::<f32>()? as f64;
        if !total.is_finite() {
            let msg = format!("training diverged: loss is {total} at step {}", step + 1);
            return Err(Error::invalid(msg));
        }
        let tc = self.tc;
        let lr = warmup_cosine(step, tc.warmup, tc.steps, tc.lr, tc.min_lr);
        let factor = tc.gan.factor_at(step);
        let grads = match &self.gan {
            Some(g) if factor > 0.0 => {
                let (g_loss, _) = g.g_loss(&f.reconstruction)?;
                let (grads, lambda) = gan::generator_grads(
                    &l.total,
                    &g_loss,
                    &self.last_layer,
                    &self.named,
                    tc.gan.disc_weight,
                    factor,
                )?;
                l.terms.g = g_loss.to_scalar::<f32>()? as f64;
                l.terms.lambda = lambda;
                total += lambda * factor * l.terms.g;
                grads
            }
            _ => l.total.backward()?,
        };
        self.opt.lr = lr;
        self.opt.step(&grads)?;
        drop(grads);
        if let (Some(g), true) = (self.gan.as_mut(), factor > 0.0) {
            let d = g.d_step(x, &f.reconstruction, factor, lr)?;
            l.terms.d = d.d_loss;
            (l.terms.logits_real, l.terms.logits_fake) = (d.logits_real, d.logits_fake);
        }
        self.state.step += 1;
        Ok((l, f, total))
    }

    /// The forward pass of a run that trains the decoder side only: the encoder and the
    /// quantizer run outside the graph, so the backward pass covers the decoder alone.
    fn decoder_only_forward(&self, x: &Tensor) -> Result<Forward> {
        let latents = self.model.encode_latents(x)?.detach(); // (b, d, s/f, s/f)
        let q = self.model.quantizer().quantize(&latents)?;
        let reconstruction = self.model.decode(&q.quantized.detach())?; // (b, 3, s, s)
        Ok(Forward {
            latents,
            quantized: Some(q),
            reconstruction,
        })
    }

    /// Marks the codes the step used (at the new step) and returns them.
    fn record_codes(&mut self, q: Option<&imgseq_vqgan::quantize::Quantized>) -> Result<Vec<u32>> {
        let indices = match q {
            Some(q) => q.indices.flatten_all()?.to_vec1::<u32>()?,
            None => Vec::new(),
        };
        for &i in &indices {
            self.state.last_used[i as usize] = self.state.step;
        }
        Ok(indices)
    }

    /// Every `restart_every` steps, re-seeds the codes unused for `dead_after` steps from
    /// encoder outputs of the batch `f` came from; returns how many.
    fn restart_dead_codes(&mut self, f: &Forward) -> Result<usize> {
        let (tc, step) = (self.tc, self.state.step);
        let quantized = step > tc.ae_warmup || tc.init_from.is_some();
        if !quantized
            || tc.freeze_encoder
            || tc.dead_after == 0
            || tc.restart_every == 0
            || !step.is_multiple_of(tc.restart_every)
        {
            return Ok(0);
        }
        let mut rng = StdRng::seed_from_u64(mix_seed(&[tc.seed, step as u64, 0xdead]));
        let space = self.model.quantizer().search_space(&f.latents)?;
        let (rows, _) = codebook::latent_rows(&space)?;
        let last_used = &mut self.state.last_used;
        let dead = codebook::restart_dead_codes(
            &self.codebook_var,
            last_used,
            step,
            tc.dead_after,
            &rows,
            &mut rng,
        )?;
        self.opt.reset_rows(CODEBOOK, &dead);
        if let Some(e) = self.ema.as_mut() {
            e.copy_rows(&self.named, CODEBOOK, &dead)?;
        }
        self.state.restarts_total += dead.len();
        Ok(dead.len())
    }
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
