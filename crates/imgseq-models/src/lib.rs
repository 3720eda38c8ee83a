//! The tokenizer loader: [`open`] takes a model's files, decides its family once and gives the
//! family's tokenizer behind the one contract ([`imgseq_core::tokenizer::Tokenizer`], with its
//! [`imgseq_core::tokenizer::Description`]). It is the only code above the model crates that
//! names a family: the CLI, the dataset job, the service and the Python package open models
//! here and see nothing but the trait (`scripts/check_layering.py` keeps it so).
//!
//! * [`family`]: what a family's loader is ([`Family`], [`OpenOptions`], [`Probe`]).
//! * [`registry`]: the families, in the order they are asked whether they read the files; a
//!   new family is a module of its own here and one line in [`registry::FAMILIES`].
//! * [`vq`]: the VQ families of `imgseq-vqgan` (taming, LlamaGen, diffusers `VQModel`, Janus,
//!   IBQ: one network, told apart by their configs and weight names).
//! * [`lfq`]: Open-MAGVIT2 (`imgseq-lfq`).
//! * [`clip`], [`siglip`], [`dinov2`]: the vision towers of `imgseq-vit` (transformers'
//!   `CLIPVisionModel`, `SiglipVisionModel`, `Dinov2Model`), sharing [`tower`].
//! * [`emu3`]: Emu3's VQVAE (transformers' `Emu3VQVAE`).
//! * [`kl`]: diffusers' `AutoencoderKL` (SD, SDXL, SD3, FLUX VAEs) and `AutoencoderKLFlux2`
//!   (FLUX.2's); continuous latents.
//! * [`dcae`]: DC-AE, diffusers' `AutoencoderDC` (SANA's); continuous latents.
//! * [`cosmos`]: NVIDIA's Cosmos image tokenizers (DI: FSQ tokens; CI: latents) from their
//!   TorchScript `encoder.jit` / `decoder.jit`.
//! * [`opened`]: [`Opened`], a loaded tokenizer with the files it came from.
//! * [`files`]: weights files as files (`imgseq weights inspect | convert`).
//! * [`catalogue`]: released tokenizers by short name (`--model llamagen-vq16`).
//! * [`hub`]: Hub models (`hf:ORG/NAME[@REVISION][/PATH]`): the files a model needs, fetched
//!   into the shared Hugging Face cache, then opened as a local folder.

pub mod catalogue;
pub mod clip;
pub mod cosmos;
pub mod dcae;
pub mod dinov2;
pub mod emu3;
pub mod family;
pub mod files;
pub mod hub;
pub mod kl;
pub mod lfq;
pub mod maskgit;
pub mod opened;
pub mod registry;
pub mod siglip;
pub mod titok;
pub mod tower;
pub mod var;
pub mod vq;

pub use family::{Family, OpenOptions, Probe};
pub use opened::Opened;
pub use registry::{default_source, open, open_default, FAMILIES};
