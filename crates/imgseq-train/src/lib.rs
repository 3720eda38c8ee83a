//! Training of imgseq's models, apart from the model crates so that what only runs them (the
//! HTTP service, the Python package) does not compile it. The models, their checkpoints, run
//! folders as inference reads them and the hand-written ViT engine stay in `imgseq-vqgan`,
//! `imgseq-vit` and `imgseq-gpt`; the command line's `vq train`, `vit train`, `vit teacher`
//! and `gpt train` call in here.
//!
//! * [`vqgan`]: the VQGAN training loop (`vq train`): random crops, AdamW with warm-up +
//!   cosine, codebook restarts, optional EMA and GAN, its run folder.
//!   * [`vqgan::config`]: `training.json`, the recipe of the shipped model.
//!   * [`vqgan::data`]: training images decoded once per scale, random crops of them.
//!   * [`vqgan::loss`]: L1 + L2 + image-gradient L1 + LPIPS + codebook loss.
//!   * [`vqgan::lpips`]: the LPIPS perceptual distance, from weights the user gives.
//!   * [`vqgan::codebook`]: k-means initialisation and dead-code restarts.
//!   * [`vqgan::disc`]: taming's PatchGAN discriminator.
//!   * [`vqgan::gan`]: the adversarial loss, its adaptive weight and the discriminator's
//!     optimizer.
//!   * [`vqgan::ema`]: the moving average of the weights.
//!   * [`vqgan::checkpoint`]: the run folder's files, saved and restored.
//! * [`vit`]: ViT training on the fused or the autograd engine, with warm-up + cosine, EMA and
//!   distillation from soft labels.
//!   * [`vit::job`]: a run as the command line starts it (new or resumed).
//!   * [`vit::teacher`]: the small CNN teacher whose soft labels a ViT distils.
//!   * [`vit::teacher_job`]: the teacher as the command line starts it.
//! * [`gpt`]: GPT training with exact resume and held-out bits per token.
//!   * [`gpt::job`]: a run as the command line starts it (new or resumed).

pub mod gpt;
pub mod vit;
pub mod vqgan;
