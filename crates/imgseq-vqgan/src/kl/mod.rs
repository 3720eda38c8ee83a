//! Continuous-latent autoencoders: diffusers' `AutoencoderKL` (the VAE of Stable Diffusion
//! 1.x/2.x, SDXL, SD3 and FLUX) as a tokenizer of continuous latents.
//!
//! It is the same conv network as taming's VQGAN and diffusers' `VQModel` ([`crate::model`]'s
//! Encoder and Decoder, diffusers names mapped by [`crate::rename`]), with the encoder writing
//! twice the latent channels (mean and log-variance, taming's `double_z`), optional 1×1
//! `quant_conv` / `post_quant_conv`, and no codebook:
//!
//! * [`config`]: [`KlConfig`] from a diffusers `config.json` or a preset ([`KlPreset`]: SD,
//!   SDXL, SD3, FLUX), with the latent scaling the pipelines apply.
//! * [`model`]: [`KlModel`]: image → posterior (mean, log-variance) → scaled latents → image.
//! * [`tiling`]: diffusers' tiled encode/decode (overlapping tiles, linear seam blending).
//! * [`load`]: a `save_pretrained` folder or a single `.safetensors` / `.ckpt` file, under
//!   diffusers' or the original LDM names, with the weights audit of the VQ families.
//! * [`patch`]: latents ↔ sequences of p×p patches (FLUX's `_pack_latents` order).
//! * [`tokenizer`]: [`KlTokenizer`], the model as an [`imgseq_core::tokenizer::Tokenizer`]
//!   giving latent maps ([`imgseq_core::tokenizer::Encoded::Latents`]) or patch sequences
//!   ([`imgseq_core::tokenizer::Encoded::Embeddings`]); the dataset job writes either as
//!   latent shards through that trait.

pub mod config;
pub mod load;
pub mod model;
pub mod patch;
pub mod tiling;
pub mod tokenizer;

pub use config::{KlConfig, KlPreset};
pub use load::{is_kl_file, load_kl, KlSource};
pub use model::{Draw, KlModel, Posterior};
pub use tokenizer::KlTokenizer;
