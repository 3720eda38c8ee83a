//! [`CosmosConfig`]: a Cosmos image tokenizer's shape under the upstream field names
//! (`cosmos_tokenizer/networks/configs.py`), read off the tensors of its `encoder.jit` and
//! `decoder.jit` — the releases ship no config file, and every setting that changes the
//! network is visible in the weights:
//!
//! * `channels`, `patch_size`: `encoder.conv_in.weight` is `(channels, 3·patch², 3, 3)`;
//! * `channels_mult`: the decoder's first block width of each level / `channels`;
//! * `num_res_blocks`: the encoder's blocks per level (the decoder has one more);
//! * `spatial_compression`: `patch_size · 2^(levels with a downsample)`;
//! * which levels attend (upstream: `attn_resolutions` at `resolution`): the levels that hold
//!   `attn.*` tensors;
//! * `patch_method`: the patcher's (non-persistent, but archived) `wavelets` buffer, Haar
//!   `[1/√2, 1/√2]` or `rearrange`'s `[1, 1]`;
//! * DI: `levels` from FSQ's `_levels` buffer, `embedding_dim` from `quant_conv`; CI:
//!   `latent_channels` from `quant_conv` (the AE formulation: `z_factor` 1).

use candle_core::Tensor;
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// Most levels, widths and FSQ levels accepted (released: 3 levels of at most 512 channels).
const MAX_LEVELS: usize = 8;
const MAX_WIDTH: usize = 8192;
const MAX_CODES: usize = 1 << 24;

/// Which image tokenizer: discrete (FSQ codes) or continuous (latents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// `DI`: FSQ with `levels`; `embedding_dim` = `levels.len()`.
    Discrete { levels: Vec<usize> },
    /// `CI`: `latent_channels` continuous channels (the AE formulation).
    Continuous { latent_channels: usize },
}

/// How the patcher folds pixels into channels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchMethod {
    /// log2(patch_size) levels of the 2-D Haar wavelet transform (the released tokenizers),
    /// with the two filter taps as the archive stores them (bf16 in the releases).
    Haar { taps: [f32; 2] },
    /// `b c (h p1) (w p2) -> b (c p1 p2) h w`.
    Rearrange,
}

/// The network's settings (upstream names where upstream has one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CosmosConfig {
    /// `DI` or `CI`.
    pub name: String,
    pub kind: Kind,
    pub in_channels: usize,
    pub out_channels: usize,
    pub channels: usize,
    pub channels_mult: Vec<usize>,
    pub num_res_blocks: usize,
    pub z_channels: usize,
    pub patch_size: usize,
    pub patch_method: PatchMethod,
    pub spatial_compression: usize,
    /// Encoder levels with a downsample (the first `num_downsamples`).
    pub num_downsamples: usize,
    /// Decoder levels with an upsample (the last `num_upsamples`).
    pub num_upsamples: usize,
    /// Encoder / decoder levels whose blocks are followed by attention.
    pub encoder_attn_levels: Vec<usize>,
    pub decoder_attn_levels: Vec<usize>,
}

impl CosmosConfig {
    /// `quant_conv`'s output channels: FSQ's dimensions, or the latent channels.
    pub fn embedding_dim(&self) -> usize {
        match &self.kind {
            Kind::Discrete { levels } => levels.len(),
            Kind::Continuous { latent_channels } => *latent_channels,
        }
    }

    /// FSQ's codebook size (the product of its levels); `None` for CI.
    pub fn codebook_size(&self) -> Option<usize> {
        match &self.kind {
            Kind::Discrete { levels } => Some(levels.iter().product()),
            Kind::Continuous { .. } => None,
        }
    }

    /// The widest feature map's channels.
    pub fn widest(&self) -> usize {
        self.channels * self.channels_mult.iter().copied().max().unwrap_or(1)
    }

    /// The config of the tokenizer whose encoder and decoder tensors are `enc` and `dec`
    /// (shapes only; the wavelets and FSQ levels are read, and marked used).
    pub fn from_weights(enc: &AuditedWeights, dec: &AuditedWeights) -> Result<Self> {
        let (e, d) = (Shapes::new(enc), Shapes::new(dec));
        let w = widths(&e, &d)?;
        let r = resampling(&e, &d, w.channels_mult.len())?;
        let z_channels = e.dims("encoder.conv_out.weight")?[0];
        let patch_method = patch_method(enc, "encoder.patcher.wavelets")?;
        if patch_method != self::patch_method(dec, "decoder.unpatcher.wavelets")? {
            return Err(d.bad("the unpatcher's wavelets differ from the encoder's patcher's"));
        }
        let (kind, name) = bottleneck(&e, &d)?;
        // The patchers' `_arange` buffers ([0, 1]: the sign pattern of the high-pass tap).
        for (s, a) in [
            (&e, "encoder.patcher._arange"),
            (&d, "decoder.unpatcher._arange"),
        ] {
            if s.shapes.contains_key(a) {
                s.w.get(a)?;
            }
        }
        Ok(Self {
            name: name.into(),
            kind,
            in_channels: IN_CHANNELS,
            out_channels: IN_CHANNELS,
            channels: w.channels,
            channels_mult: w.channels_mult,
            num_res_blocks: w.num_res_blocks,
            z_channels,
            patch_size: w.patch_size,
            patch_method,
            spatial_compression: w.patch_size << r.num_downsamples,
            num_downsamples: r.num_downsamples,
            num_upsamples: r.num_downsamples,
            encoder_attn_levels: r.encoder_attn_levels,
            decoder_attn_levels: r.decoder_attn_levels,
        })
    }
}

/// Pictures are RGB.
const IN_CHANNELS: usize = 3;

/// One archive's tensor shapes, for reading the config off them.
struct Shapes<'a> {
    w: &'a AuditedWeights,
    shapes: BTreeMap<String, Vec<usize>>,
}

impl<'a> Shapes<'a> {
    fn new(w: &'a AuditedWeights) -> Self {
        Self {
            w,
            shapes: w.shapes(),
        }
    }

    fn bad(&self, m: impl Into<String>) -> Error {
        Error::weights(self.w.path(), m.into())
    }

    fn dims(&self, name: &str) -> Result<Vec<usize>> {
        self.shapes.get(name).cloned().ok_or_else(|| {
            self.bad(format!(
                "missing tensor `{name}` (not a Cosmos image tokenizer)"
            ))
        })
    }

    /// Whether a tensor's name starts with `prefix`.
    fn has(&self, prefix: &str) -> bool {
        self.shapes.keys().any(|k| k.starts_with(prefix))
    }

    /// How many numbered children `prefix<i>.` has (0, 1, ... without gaps).
    fn count(&self, prefix: &str) -> usize {
        (0..)
            .take_while(|i| self.has(&format!("{prefix}{i}.")))
            .count()
    }
}

/// Base channels, patch size, channel multipliers and blocks per level.
struct Widths {
    channels: usize,
    patch_size: usize,
    channels_mult: Vec<usize>,
    num_res_blocks: usize,
}

fn widths(e: &Shapes, d: &Shapes) -> Result<Widths> {
    let conv_in = e.dims("encoder.conv_in.weight")?;
    let [channels, c_in_p2, _, _] = four(e, "encoder.conv_in.weight", &conv_in)?;
    let patch_size = (1..=64usize)
        .find(|p| p * p * IN_CHANNELS == c_in_p2)
        .filter(|p| p.is_power_of_two())
        .ok_or_else(|| {
            e.bad(format!(
                "`encoder.conv_in.weight` takes {c_in_p2} channels, not 3·patch² for a \
                 power-of-two patch"
            ))
        })?;
    if channels == 0 || channels > MAX_WIDTH || channels % 32 != 0 {
        return Err(e.bad(format!(
            "{channels} base channels (GroupNorm's 32 groups need a multiple of 32)"
        )));
    }
    let levels = d.count("decoder.up.");
    if levels == 0 || levels > MAX_LEVELS {
        return Err(d.bad(format!(
            "{levels} decoder levels (1..={MAX_LEVELS} expected)"
        )));
    }
    if e.count("encoder.down.") != levels {
        return Err(e.bad(format!("encoder levels differ from the decoder's {levels}")));
    }
    let mut channels_mult = Vec::with_capacity(levels);
    for i in 0..levels {
        let name = format!("decoder.up.{i}.block.0.conv2.weight");
        let c = d.dims(&name)?[0];
        if c == 0 || c % channels != 0 || c > MAX_WIDTH {
            return Err(d.bad(format!(
                "`{name}` has {c} channels, not a multiple of {channels}"
            )));
        }
        channels_mult.push(c / channels);
    }
    let num_res_blocks = e.count("encoder.down.0.block.");
    let dec_blocks = d.count("decoder.up.0.block.");
    if dec_blocks != num_res_blocks + 1 {
        return Err(d.bad(format!(
            "{dec_blocks} blocks per decoder level for an encoder of {num_res_blocks} (one \
             more expected)"
        )));
    }
    Ok(Widths {
        channels,
        patch_size,
        channels_mult,
        num_res_blocks,
    })
}

/// Which levels resample and which attend.
struct Resampling {
    num_downsamples: usize,
    encoder_attn_levels: Vec<usize>,
    decoder_attn_levels: Vec<usize>,
}

/// Upstream downsamples the first n levels and upsamples the last n.
fn resampling(e: &Shapes, d: &Shapes, levels: usize) -> Result<Resampling> {
    let downs: Vec<usize> = (0..levels)
        .filter(|i| e.has(&format!("encoder.down.{i}.downsample.")))
        .collect();
    let ups: Vec<usize> = (0..levels)
        .filter(|i| d.has(&format!("decoder.up.{i}.upsample.")))
        .collect();
    let n = downs.len();
    if downs != (0..n).collect::<Vec<_>>() || ups != (levels - n..levels).collect::<Vec<_>>() {
        return Err(d.bad(format!(
            "downsampling levels {downs:?} and upsampling levels {ups:?} are not Cosmos' (the \
             first n and the last n)"
        )));
    }
    let attn = |s: &Shapes, side: &str| -> Vec<usize> {
        (0..levels)
            .filter(|i| s.has(&format!("{side}.{i}.attn.")))
            .collect()
    };
    Ok(Resampling {
        num_downsamples: n,
        encoder_attn_levels: attn(e, "encoder.down"),
        decoder_attn_levels: attn(d, "decoder.up"),
    })
}

/// DI (FSQ levels) or CI (latent channels), from the quantizer's presence and the 1×1 convs.
fn bottleneck(e: &Shapes, d: &Shapes) -> Result<(Kind, &'static str)> {
    let q_out = e.dims("quant_conv.weight")?[0];
    let pq_in = d
        .dims("post_quant_conv.weight")?
        .get(1)
        .copied()
        .unwrap_or(0);
    if !e.shapes.contains_key("quantizer._levels") {
        if d.shapes.contains_key("inv_quant.quantizer._levels") {
            return Err(d.bad(
                "a DI decoder (with FSQ) beside a CI encoder: the archives are of different \
                 tokenizers",
            ));
        }
        if pq_in != q_out {
            return Err(e.bad(format!(
                "quant_conv gives {q_out} channels, post_quant_conv takes {pq_in} (a VAE \
                 formulation, which samples; imgseq reads the released AE tokenizers)"
            )));
        }
        let kind = Kind::Continuous {
            latent_channels: q_out,
        };
        return Ok((kind, "CI"));
    }
    let levels = fsq_levels(e.w, "quantizer._levels")?;
    if !d.shapes.contains_key("inv_quant.quantizer._levels") {
        return Err(d.bad(
            "a decoder without FSQ (`inv_quant.quantizer._levels`) beside a DI encoder: the \
             archives are of different tokenizers",
        ));
    }
    if fsq_levels(d.w, "inv_quant.quantizer._levels")? != levels {
        return Err(d.bad("FSQ levels differ from the encoder's"));
    }
    if levels.len() != q_out || pq_in != q_out {
        return Err(e.bad(format!(
            "FSQ of {} levels behind a {q_out}-channel quant_conv (projections are not \
             supported)",
            levels.len()
        )));
    }
    Ok((Kind::Discrete { levels }, "DI"))
}

/// The four dimensions of a conv weight.
fn four(s: &Shapes, name: &str, d: &[usize]) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(d).map_err(|_| s.bad(format!("`{name}` has shape {d:?}, not a conv's")))
}

/// The patch method the wavelets buffer `name` says.
fn patch_method(w: &AuditedWeights, name: &str) -> Result<PatchMethod> {
    let t = w.get(name)?;
    let v = values(w, name, &t)?;
    match v.as_slice() {
        [a, b] if *a == 1.0 && *b == 1.0 => Ok(PatchMethod::Rearrange),
        [a, b] if (a - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-3 && a == b => {
            Ok(PatchMethod::Haar { taps: [*a, *b] })
        }
        _ => Err(Error::weights(
            w.path(),
            format!("`{name}` is {v:?}, neither Haar's [1/√2, 1/√2] nor rearrange's [1, 1]"),
        )),
    }
}

/// FSQ's levels from its `_levels` buffer (each ≥ 2; at most 2^24 codes in all); its
/// `_basis` and `implicit_codebook` buffers beside it are marked used.
fn fsq_levels(w: &AuditedWeights, name: &str) -> Result<Vec<usize>> {
    let t = w.get(name)?;
    let v = values(w, name, &t)?;
    let levels: Vec<usize> = v.iter().map(|&x| x as usize).collect();
    let ok = !levels.is_empty()
        && v.iter()
            .all(|&x| x.fract() == 0.0 && (2.0..=1024.0).contains(&x))
        && levels
            .iter()
            .try_fold(1usize, |a, &l| a.checked_mul(l))
            .is_some_and(|n| n <= MAX_CODES);
    if !ok {
        return Err(Error::weights(
            w.path(),
            format!("`{name}` is {v:?}, not FSQ levels"),
        ));
    }
    let basis = name.replace("_levels", "_basis");
    if w.shapes().contains_key(&basis) {
        let b = values(w, &basis, &w.get(&basis)?)?;
        let want: Vec<f32> = levels
            .iter()
            .scan(1usize, |acc, &l| {
                let here = *acc;
                *acc *= l;
                Some(here as f32)
            })
            .collect();
        if b != want {
            return Err(Error::weights(
                w.path(),
                format!("`{basis}` is {b:?}, not the cumulative product {want:?} of the levels"),
            ));
        }
    }
    Ok(levels)
}

/// A small 1-D tensor's values as f32.
fn values(w: &AuditedWeights, name: &str, t: &Tensor) -> Result<Vec<f32>> {
    if t.rank() != 1 || t.dim(0)? > 64 {
        return Err(Error::weights(
            w.path(),
            format!("`{name}` has shape {:?}, a short vector expected", t.dims()),
        ));
    }
    Ok(t.to_dtype(candle_core::DType::F32)?.to_vec1()?)
}

/// Checks that an input of `side` pixels suits the model: a positive multiple of its
/// compression, at most 16384.
pub fn check_side(cfg: &CosmosConfig, setting: &'static str, side: usize) -> Result<()> {
    let f = cfg.spatial_compression;
    if side == 0 || !side.is_multiple_of(f) || side > 1 << 14 {
        return Err(Error::setting(
            setting,
            side,
            format!("must be a positive multiple of {f} (the Cosmos tokenizer's compression), at most 16384"),
        ));
    }
    Ok(())
}
