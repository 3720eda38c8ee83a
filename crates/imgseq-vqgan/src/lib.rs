//! taming-transformers VQGAN: image → 16×-smaller latent grid → nearest of `n_embed` codebook
//! entries → integer tokens in raster order, and back.
//!
//! The model (what a checkpoint holds):
//! * [`config`]: `ddconfig` / `embed_dim` / `n_embed`, taming's `model.yaml` and our JSON;
//!   the input-size rule ([`VqConfig::check_input_size`]). [`config_file`]: reading a config
//!   file of any family. [`presets`]: named architectures.
//! * [`model`]: Encoder, Decoder and [`VqModel`], named like taming's state dict;
//!   [`VqModel::forward`] is the one image → reconstruction, loss, indices path.
//! * [`quantize`]: the nearest-entry quantizer with taming's loss and straight-through.
//! * [`load`]: loading a model from safetensors or a taming `.ckpt` (read by the
//!   `imgseq-torch` crate) with strict key checks; `weights inspect/convert`.
//! * [`family`], [`variant`], [`rename`]: LlamaGen's VQ, diffusers' `VQModel`, Janus's VQ
//!   ([`janus`]) and IBQ ([`ibq`]) run as the same network (their configs, weight names and quantizer options); [`preprocess`]: each
//!   family's image preprocessing (the rule is [`imgseq_core::input`]'s).
//! * [`precision`]: f32 or bf16 convs (`--precision`), with `auto`'s agreement check.
//! * [`var`]: VAR's VQVAE — multi-scale residual codes (680 tokens at 256²) on taming's encoder
//!   and decoder.
//! * [`emu3`]: Emu3's VQVAE (transformers' `Emu3VQVAE`): Conv3d temporal layers around
//!   taming's blocks, a MoVQ decoder conditioned on the quantized latents.
//! * [`cosmos`]: NVIDIA's Cosmos image tokenizers (DI: FSQ codes, CI: latents), read from their
//!   TorchScript `encoder.jit` / `decoder.jit`.
//! * [`kl`]: diffusers' `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs) and `AutoencoderKLFlux2`: continuous latents as
//!   patch sequences, on the same encoder and decoder.
//!
//! Using it:
//! * [`data`]: image lists, the tokenizer's preprocessing.
//! * [`tokenizer`]: [`VqTokenizer`], a model at an input size as an
//!   [`imgseq_core::tokenizer::Tokenizer`]; [`tokens`]: the token file format ([`TokenGrid`], `.npy`).
//! * [`inference`]: image files → tokens → images, in batches.
//! * [`eval`]: the one scoring (PSNR, SSIM, codebook usage) of `vq eval`, `vq roundtrip`.
//!
//! Training it (losses, discriminator, LPIPS, codebook initialisation, the loop and its run
//! folder) is the `imgseq-train` crate's (`imgseq_train::vqgan`).

pub mod chameleon;
pub mod config;
pub mod config_file;
pub mod convert;
pub mod cosmos;
pub mod data;
pub mod dcae;
pub mod emu3;
pub mod eval;
pub mod family;
pub mod ibq;
pub mod inference;
pub mod janus;
pub mod kl;
pub mod layers;
pub mod load;
pub mod maskgit;
pub mod model;
pub mod precision;
pub mod preprocess;
pub mod presets;
pub mod quantize;
pub mod rename;
pub mod titok;
pub mod tokenizer;
pub mod var;
pub mod variant;

pub use config::{DdConfig, VqConfig};
pub use family::{Family, Variant};
pub use imgseq_core::tokens::{self, TokenGrid};
pub use load::{load_model, load_weights};
pub use model::{Bottleneck, Forward, VqModel};
pub use quantize::{Quantized, VectorQuantizer, CODEBOOK};
pub use tokenizer::VqTokenizer;
