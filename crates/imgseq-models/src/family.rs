//! What a family's loader is: the [`Family`] trait, the [`OpenOptions`] every family reads and
//! the [`Probe`] of a source it is asked about.

use crate::Opened;
use imgseq_core::Result;
use imgseq_kernels::PrecisionRequest;
use std::path::{Path, PathBuf};

/// How a model is opened; every field has the family's default when left as
/// [`OpenOptions::default`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The model's config file (default: found beside the weights, or read off them).
    pub config: Option<PathBuf>,
    /// Input side in pixels (default: the family's rule for the model).
    pub size: Option<u32>,
    /// The arithmetic of the conv layers (families without a bf16 path refuse `bf16`).
    pub precision: PrecisionRequest,
    /// Run the encoder in bf16 too (tokens may differ from f32's; families that cannot, refuse).
    pub bf16_encoder: bool,
    /// Lightning checkpoints with EMA copies: run the raw weights instead.
    pub raw: bool,
    /// Continuous-latent families: a released configuration by name (`sd`, `sdxl`, `sd3`,
    /// `flux`) for single files without a config.
    pub preset: Option<String>,
    /// Continuous-latent families: sequences of p×p latent patches instead of latent maps.
    pub patch: Option<usize>,
    /// Continuous-latent families: a draw from the posterior with this seed, not its mean.
    pub sample_seed: Option<u64>,
    /// Continuous-latent families: tiled encode/decode with tiles of this side in pixels.
    pub tile: Option<usize>,
    /// Vision towers: which of transformers' `hidden_states` (−1 the last block's output, −2
    /// LLaVA's); `None`: its `last_hidden_state`.
    pub layer: Option<isize>,
    /// Vision towers: the patch tokens only, without the class token (and registers).
    pub patches_only: bool,
    /// Vision towers: transformers' `pooler_output` (one token per picture) instead of a
    /// hidden state.
    pub pooled: bool,
}

impl OpenOptions {
    /// Refuses the continuous-latent options for a family (named `label`) whose outputs are
    /// codebook tokens.
    pub fn refuse_latent_options(&self, label: &str) -> Result<()> {
        let set = [
            ("preset", self.preset.is_some()),
            ("patch", self.patch.is_some()),
            ("sample_seed", self.sample_seed.is_some()),
            ("tile", self.tile.is_some()),
        ];
        match set.iter().find(|(_, on)| *on) {
            Some((name, _)) => Err(imgseq_core::Error::invalid(format!(
                "{name}: applies to continuous-latent models (AutoencoderKL); a {label} gives \
                 codebook tokens"
            ))),
            None => Ok(()),
        }
    }
}

impl OpenOptions {
    /// Refuses the vision towers' options for a family (named `label`) that is no tower.
    pub fn refuse_tower_options(&self, label: &str) -> Result<()> {
        let set = [
            ("layer", self.layer.is_some()),
            ("patches_only", self.patches_only),
            ("pooled", self.pooled),
        ];
        match set.iter().find(|(_, on)| *on) {
            Some((name, _)) => Err(imgseq_core::Error::invalid(format!(
                "{name}: applies to vision towers (CLIP, SigLIP, DINOv2); a {label} has no layers \
                 or pooled output to choose"
            ))),
            None => Ok(()),
        }
    }
}

/// Refuses the first of `flags` (name, whether it is set) that is set, in one line:
/// "`source`: `flag` does not apply to `what` (`why`)".
pub(crate) fn refuse_set_flags(
    source: &Path,
    what: &str,
    why: &str,
    flags: &[(&str, bool)],
) -> Result<()> {
    match flags.iter().find(|(_, on)| *on) {
        Some((flag, _)) => Err(imgseq_core::Error::invalid(format!(
            "{}: {flag} does not apply to {what} ({why})",
            source.display()
        ))),
        None => Ok(()),
    }
}

/// What a family's loader looks at to say whether it reads a source.
pub struct Probe<'a> {
    /// The source as given (a file or a folder).
    pub source: &'a Path,
    /// The options it is opened with (a preset names a family, too).
    pub options: &'a OpenOptions,
}

/// A family (or a group of families sharing one network) of tokenizers.
pub trait Family: Sync {
    /// Its registry name (`vq`, `open_magvit2`, `autoencoder_kl`).
    fn name(&self) -> &'static str;
    /// Whether the files are this family's (cheap: names and shapes, no weights read).
    fn claims(&self, p: &Probe) -> bool;
    /// The tokenizer of the files.
    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened>;
}
