//! VAR's VQVAE (FoundationVision/VAR: `models/vqvae.py`, `models/quant.py`,
//! `models/basic_vae.py`; weights `vae_ch160v4096z32.pth`, MIT): a picture becomes **multi-scale
//! residual** codes — 1², 2², 3², 4², 5², 6², 8², 10², 13², 16² = 680 tokens of 4,096 codes at
//! 256² — that VAR predicts scale after scale.
//!
//! The convolutional halves are taming's encoder and decoder ([`Encoder`], [`Decoder`]: the
//! same blocks and names, attention after every block of the lowest level and in the middle)
//! with one difference in the files: each attention block's q, k and v are one `qkv` conv,
//! split here on loading. `quant_conv` and `post_quant_conv` are 3×3.
//!
//! The quantizer (`VectorQuantizer2.f_to_idxBl_or_fhat`), on f = quant_conv(encoder(x)) of
//! (C, H, W), with f_rest = f:
//! for every scale `pn` (from small to large), z = `area` pooling of f_rest to pn × pn (the
//! last scale: f_rest itself), its nearest codes (‖z‖² + ‖e‖² − 2 z·e), their vectors
//! `bicubic`-upsampled back to H × W (not the last), through the scale's φ — a 3×3 conv mixed
//! as h·(1 − ½) + φ(h)·½, four φ shared by the ten scales (the nearest of ticks
//! linspace(1/12, 11/12, 4) to si/(S − 1)) — and subtracted from f_rest. Decoding sums those
//! φ outputs (`embed_to_fhat`) and runs post_quant_conv and the decoder; from the first k
//! scales only, it shows what VAR has drawn after k of its steps.
//!
//! The file is a plain state dict (`torch.save(vae.state_dict())`) and has no config: the
//! sizes are read off the tensors; the scale lists are VAR's published ones for a 16×16
//! latent grid (256² input) and a 32×32 one (512²: 1, 2, 3, 4, 6, 9, 13, 18, 24, 32).

mod resample;
pub mod tokenizer;

use crate::config::{DdConfig, VqConfig};
use crate::family::{Distance, Variant};
use crate::layers::Conv2d;
use crate::model::{Decoder, Encoder};
use crate::quantize::VectorQuantizer;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::Padding;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub use tokenizer::VarTokenizer;

/// The registry name.
pub const NAME: &str = "var";
/// The name users read.
pub const LABEL: &str = "VAR multi-scale VQVAE";
/// VAR's scales for a 16×16 latent grid (256² input; 680 tokens).
pub const PATCH_NUMS_256: [usize; 10] = [1, 2, 3, 4, 5, 6, 8, 10, 13, 16];
/// VAR's scales for a 32×32 latent grid (512² input, VAR-d36; 2,240 tokens).
pub const PATCH_NUMS_512: [usize; 10] = [1, 2, 3, 4, 6, 9, 13, 18, 24, 32];
/// `quant_resi`: φ(h) = h·(1 − r) + conv(h)·r (VQVAE's default; not in the file).
const QUANT_RESI: f32 = 0.5;

/// How the φ convs are shared among the scales (`share_quant_resi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhiSharing {
    /// One φ per scale (`quant_resi.k`).
    None,
    /// One φ for all (`quant_resi.qresi`).
    All,
    /// K φ, each scale taking the nearest tick (`quant_resi.qresi_ls.k`; released: K = 4).
    Partial,
}

/// A VAR VQVAE as its tensors describe it (`VQVAE(...)`'s arguments), in taming's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VarConfig {
    /// The encoder, decoder and codebook (attention at the last level and in the middle).
    #[serde(skip)]
    pub vq: VqConfig,
    pub vocab_size: usize,
    /// `Cvae`: the latent and code size.
    pub z_channels: usize,
    pub ch: usize,
    pub ch_mult: Vec<usize>,
    pub num_res_blocks: usize,
    pub quant_conv_ks: usize,
    pub quant_resi: f32,
    pub phi_sharing: PhiSharing,
    /// The number of φ convs.
    pub phis: usize,
}

/// The weight names that only VAR's quantizer has.
const PHI_PREFIX: &str = "quantize.quant_resi.";

/// Whether a state dict's names are VAR's VQVAE.
pub fn is_var_keys<'a>(mut keys: impl Iterator<Item = &'a str>) -> bool {
    keys.any(|k| k.starts_with(PHI_PREFIX))
}

/// Whether the file at `path` holds a VAR VQVAE (only its header or pickle is read).
pub fn is_var_file(path: &Path) -> bool {
    path.is_file()
        && crate::load::inspect(path)
            .is_ok_and(|s| is_var_keys(s.tensors.iter().map(|t| t.name.as_str())))
}

/// How the φ convs are shared, and how many there are, by their names.
fn phi_layout(shapes: &BTreeMap<String, Vec<usize>>, path: &Path) -> Result<(PhiSharing, usize)> {
    let has = |k: String| shapes.contains_key(&k);
    let count = |p: &str| {
        (0..)
            .take_while(|k| has(format!("{PHI_PREFIX}{p}{k}.weight")))
            .count()
    };
    let (sharing, n) = if has(format!("{PHI_PREFIX}qresi_ls.0.weight")) {
        (PhiSharing::Partial, count("qresi_ls."))
    } else if has(format!("{PHI_PREFIX}qresi.weight")) {
        (PhiSharing::All, 1)
    } else {
        (PhiSharing::None, count(""))
    };
    if n == 0 {
        return Err(Error::format(
            path,
            "no φ convs (`quantize.quant_resi.*.weight`): not a VAR VQVAE imgseq reads",
        ));
    }
    Ok((sharing, n))
}

impl VarConfig {
    /// The config the tensor shapes give (`path` names the file in messages).
    pub fn from_shapes(shapes: &BTreeMap<String, Vec<usize>>, path: &Path) -> Result<Self> {
        let get = |k: &str| {
            shapes
                .get(k)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::format(path, format!("no tensor `{k}`: not a VAR VQVAE")))
        };
        let has = |k: String| shapes.contains_key(&k);
        let conv_in = get("encoder.conv_in.weight")?;
        let (ch, in_channels) = (conv_in[0], *conv_in.get(1).unwrap_or(&0));
        let levels = (0..)
            .take_while(|i| has(format!("encoder.down.{i}.block.0.conv1.weight")))
            .count();
        let mut ch_mult = Vec::with_capacity(levels);
        for i in 0..levels {
            let out = get(&format!("encoder.down.{i}.block.0.conv1.weight"))?[0];
            if ch == 0 || out % ch != 0 {
                return Err(Error::format(
                    path,
                    format!("level {i} has {out} channels, not a multiple of conv_in's {ch}"),
                ));
            }
            ch_mult.push(out / ch);
        }
        let num_res_blocks = (0..)
            .take_while(|j| has(format!("encoder.down.0.block.{j}.conv1.weight")))
            .count();
        let z = get("encoder.conv_out.weight")?[0];
        let qc = get("quant_conv.weight")?;
        let (cvae, ks) = (qc[0], *qc.get(2).unwrap_or(&1));
        let code = get("quantize.embedding.weight")?;
        if code.len() != 2 || code[1] != cvae || z != cvae {
            return Err(Error::format(
                path,
                format!(
                    "codebook {code:?}, encoder output {z} and quant_conv {qc:?} disagree on \
                     the latent size"
                ),
            ));
        }
        if ks % 2 == 0 {
            return Err(Error::format(
                path,
                format!("quant_conv has an even kernel ({ks})"),
            ));
        }
        let last = levels.saturating_sub(1);
        let using_sa = has(format!("encoder.down.{last}.attn.0.qkv.weight"));
        let using_mid_sa = has("encoder.mid.attn_1.qkv.weight".into());
        let (phi_sharing, phis) = phi_layout(shapes, path)?;
        let resolution = 256usize.max(1 << last.min(crate::config::MAX_LEVELS));
        let vq = VqConfig {
            ddconfig: DdConfig {
                ch,
                ch_mult: ch_mult.clone(),
                num_res_blocks,
                attn_resolutions: if using_sa {
                    vec![resolution >> last]
                } else {
                    vec![]
                },
                z_channels: z,
                double_z: false,
                resolution,
                in_channels,
                out_ch: get("decoder.conv_out.weight")?[0],
                dropout: 0.0,
            },
            embed_dim: cvae,
            n_embed: code[0],
            beta: 0.25,
            legacy: true,
            variant: Variant {
                mid_attn: using_mid_sa,
                ..Variant::default()
            },
        };
        vq.validate(path)?;
        Ok(Self {
            vq,
            vocab_size: code[0],
            z_channels: cvae,
            ch,
            ch_mult,
            num_res_blocks,
            quant_conv_ks: ks,
            quant_resi: QUANT_RESI,
            phi_sharing,
            phis,
        })
    }

    /// VAR's scale list for a `grid`×`grid` latent.
    pub fn patch_nums(&self, grid: usize) -> Result<Vec<usize>> {
        match grid {
            16 => Ok(PATCH_NUMS_256.to_vec()),
            32 => Ok(PATCH_NUMS_512.to_vec()),
            g => Err(Error::invalid(format!(
                "VAR's scales are published for a 16×16 latent grid ({} px input) and a 32×32 \
                 one ({} px); this input gives {g}×{g}",
                16 * self.vq.downsample_factor(),
                32 * self.vq.downsample_factor()
            ))),
        }
    }

    /// The φ a scale `si` of `sn` goes through (`PhiPartiallyShared.__getitem__`: the nearest
    /// of the ticks, the first on a tie).
    fn phi_index(&self, si: usize, sn: usize) -> usize {
        let k = self.phis;
        match self.phi_sharing {
            PhiSharing::All => 0,
            PhiSharing::None | PhiSharing::Partial => {
                let at = if sn > 1 {
                    si as f64 / (sn - 1) as f64
                } else {
                    0.0
                };
                let (a, b) = if k == 4 {
                    (1.0 / 3.0 / k as f64, 1.0 - 1.0 / 3.0 / k as f64)
                } else {
                    (1.0 / 2.0 / k as f64, 1.0 - 1.0 / 2.0 / k as f64)
                };
                let tick = |i: usize| {
                    if i + 1 == k {
                        b
                    } else {
                        a + i as f64 * ((b - a) / (k - 1).max(1) as f64)
                    }
                };
                (0..k)
                    .min_by(|&i, &j| {
                        let (di, dj) = ((tick(i) - at).abs(), (tick(j) - at).abs());
                        di.total_cmp(&dj).then(i.cmp(&j))
                    })
                    .unwrap_or(0)
            }
        }
    }

    /// Tokens of a picture: the sum of the scales' squares.
    pub fn tokens(patch_nums: &[usize]) -> usize {
        patch_nums.iter().map(|p| p * p).sum()
    }
}

/// VAR's VQVAE (inference).
#[derive(Debug, Clone)]
pub struct VarModel {
    cfg: VarConfig,
    encoder: Encoder,
    quant_conv: Conv2d,
    quantizer: VectorQuantizer,
    phis: Vec<Conv2d>,
    post_quant_conv: Conv2d,
    decoder: Decoder,
}

impl VarModel {
    pub fn new(cfg: &VarConfig, vb: VarBuilder) -> Result<Self> {
        let (c, ks) = (cfg.z_channels, cfg.quant_conv_ks);
        let same = Padding::same(ks / 2);
        let vq = &cfg.vq;
        let vb_q = vb.pp("quantize");
        let embedding = vb_q.pp("embedding").get((cfg.vocab_size, c), "weight")?;
        let vb_r = vb_q.pp("quant_resi");
        let p1 = Padding::same(1);
        let phis = (0..cfg.phis)
            .map(|k| {
                let vb_k = match cfg.phi_sharing {
                    PhiSharing::Partial => vb_r.pp("qresi_ls").pp(k),
                    PhiSharing::All => vb_r.pp("qresi"),
                    PhiSharing::None => vb_r.pp(k),
                };
                Conv2d::new(c, c, 3, 1, p1, vb_k)
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(&vq.ddconfig, &vq.variant, vb.pp("encoder"))?,
            quant_conv: Conv2d::new(c, c, ks, 1, same, vb.pp("quant_conv"))?,
            quantizer: VectorQuantizer::from_codebook(embedding, 0.25, true)
                .with_search(false, Distance::Expanded),
            phis,
            post_quant_conv: Conv2d::new(c, c, ks, 1, same, vb.pp("post_quant_conv"))?,
            decoder: Decoder::new(&vq.ddconfig, &vq.variant, vb.pp("decoder"))?,
        })
    }

    pub fn config(&self) -> &VarConfig {
        &self.cfg
    }

    /// f = quant_conv(encoder(x)).
    ///
    /// # Shapes
    /// x: (b, 3, H, W) in [-1, 1] → (b, C, H/f, W/f)
    pub fn encode_latents(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.encoder.forward(x)?;
        Ok(self.quant_conv.forward(&h)?)
    }

    /// φ of scale `si` of `sn`: h·(1 − r) + conv(h)·r.
    fn phi(&self, h: &Tensor, si: usize, sn: usize) -> Result<Tensor> {
        let r = self.cfg.quant_resi as f64;
        let conv = &self.phis[self.cfg.phi_index(si, sn)];
        Ok(((h * (1.0 - r))? + (conv.forward(h)? * r)?)?)
    }

    /// The codes' vectors of one scale brought to the latent grid (`bicubic`, but for the last
    /// scale) and through its φ.
    ///
    /// # Shapes
    /// idx: (b, pn, pn) → (b, C, g, g)
    fn scale_term(&self, idx: &Tensor, si: usize, sn: usize, g: usize) -> Result<Tensor> {
        let e = self.quantizer.lookup(idx)?; // (b, C, pn, pn)
        let (b, c, pn, _) = e.dims4()?;
        let e = if si + 1 == sn {
            e
        } else {
            let v = e.flatten_all()?.to_vec1::<f32>()?;
            let up: Vec<f32> = v
                .chunks(pn * pn)
                .flat_map(|p| resample::bicubic(p, pn, pn, g, g))
                .collect();
            Tensor::from_vec(up, (b, c, g, g), e.device())?
        };
        self.phi(&e, si, sn)
    }

    /// The multi-scale codes of a batch: for each picture, its tokens scale after scale
    /// (VAR's order; raster order within a scale).
    ///
    /// # Shapes
    /// x: (b, 3, H, W) → b rows of Σ pn² tokens
    pub fn encode(&self, x: &Tensor) -> Result<Vec<Vec<i64>>> {
        let f = self.encode_latents(x)?; // (b, C, g, g)
        let (b, c, g, gw) = f.dims4()?;
        if g != gw {
            return Err(Error::invalid(format!(
                "VAR needs a square latent grid; got {g}×{gw}"
            )));
        }
        let patch_nums = self.cfg.patch_nums(g)?;
        let sn = patch_nums.len();
        let mut rest = f.flatten_all()?.to_vec1::<f32>()?;
        let mut rows = vec![Vec::with_capacity(VarConfig::tokens(&patch_nums)); b];
        for (si, &pn) in patch_nums.iter().enumerate() {
            let z: Vec<f32> = if si + 1 == sn {
                rest.clone()
            } else {
                rest.chunks(g * g)
                    .flat_map(|p| resample::area(p, g, g, pn, pn))
                    .collect()
            };
            let z = Tensor::from_vec(z, (b, c, pn, pn), &Device::Cpu)?;
            let idx = self.quantizer.quantize(&z)?.indices; // (b, pn, pn)
            let flat = idx.to_dtype(DType::I64)?.flatten_all()?.to_vec1::<i64>()?;
            for (i, row) in rows.iter_mut().enumerate() {
                row.extend_from_slice(&flat[i * pn * pn..(i + 1) * pn * pn]);
            }
            let h = self.scale_term(&idx, si, sn, g)?;
            let h = h.flatten_all()?.to_vec1::<f32>()?;
            for (r, v) in rest.iter_mut().zip(h) {
                *r -= v;
            }
        }
        Ok(rows)
    }

    /// The latent sum of the first scales whose tokens `rows` hold (`embed_to_fhat`): every
    /// row the same length, the first k scales of `patch_nums`.
    ///
    /// # Shapes
    /// → (b, C, g, g), g = the last of `patch_nums`
    pub fn f_hat(&self, rows: &[&[i64]], patch_nums: &[usize]) -> Result<Tensor> {
        let b = rows.len();
        let len = rows.first().map_or(0, |r| r.len());
        if rows.iter().any(|r| r.len() != len) {
            return Err(Error::invalid(
                "VAR: token rows of different lengths in one batch",
            ));
        }
        let k = scales_in(len, patch_nums)?;
        let (sn, c) = (patch_nums.len(), self.cfg.z_channels);
        let g = *patch_nums
            .last()
            .ok_or_else(|| Error::invalid("VAR: an empty scale list"))?;
        let mut f_hat = Tensor::zeros((b, c, g, g), DType::F32, &Device::Cpu)?;
        let mut start = 0;
        for (si, &pn) in patch_nums[..k].iter().enumerate() {
            let mut idx = Vec::with_capacity(b * pn * pn);
            for r in rows {
                idx.extend_from_slice(&r[start..start + pn * pn]);
            }
            start += pn * pn;
            let idx = Tensor::from_vec(idx, (b, pn, pn), &Device::Cpu)?;
            f_hat = (f_hat + self.scale_term(&idx, si, sn, g)?)?;
        }
        Ok(f_hat)
    }

    /// Pictures from the tokens of the first k scales (all ten: the reconstruction), clamped
    /// to [-1, 1] as `fhat_to_img` does.
    ///
    /// # Shapes
    /// → (b, out_ch, g·f, g·f)
    pub fn decode(&self, rows: &[&[i64]], patch_nums: &[usize]) -> Result<Tensor> {
        let f_hat = self.f_hat(rows, patch_nums)?;
        let h = self.post_quant_conv.forward(&f_hat)?;
        Ok(self.decoder.forward(&h)?.clamp(-1f32, 1f32)?)
    }
}

/// How many of the first scales `len` tokens are (every row: 1, 5, 14, … Σ pn²).
pub fn scales_in(len: usize, patch_nums: &[usize]) -> Result<usize> {
    let mut sum = 0;
    for (k, p) in patch_nums.iter().enumerate() {
        sum += p * p;
        if sum == len {
            return Ok(k + 1);
        }
    }
    let sums: Vec<String> = patch_nums
        .iter()
        .scan(0, |s, p| {
            *s += p * p;
            Some(s.to_string())
        })
        .collect();
    Err(Error::invalid(format!(
        "VAR tokens come as a row of the first k scales' codes ({} tokens); got {len}",
        sums.join(", ")
    )))
}

/// Splits each attention block's `qkv` conv (3C, C, 1, 1) into taming's `q`, `k`, `v`
/// (VAR's `qkv.reshape(B, 3, C, H, W).unbind(1)`: q first).
fn split_qkv(map: HashMap<String, Tensor>, path: &Path) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::with_capacity(map.len() + map.len() / 8);
    for (name, t) in map {
        let Some((block, what)) = name
            .strip_suffix(".weight")
            .map(|b| (b, "weight"))
            .or_else(|| name.strip_suffix(".bias").map(|b| (b, "bias")))
            .and_then(|(b, w)| b.strip_suffix(".qkv").map(|b| (b, w)))
        else {
            out.insert(name, t);
            continue;
        };
        let n = t.dims().first().copied().unwrap_or(0);
        if n == 0 || n % 3 != 0 {
            return Err(Error::format(
                path,
                format!("`{name}` has {n} rows, not 3 × channels"),
            ));
        }
        for (i, part) in ["q", "k", "v"].iter().enumerate() {
            out.insert(
                format!("{block}.{part}.{what}"),
                t.narrow(0, i * n / 3, n / 3)?,
            );
        }
    }
    Ok(out)
}

/// Loads a VAR VQVAE from its state dict (`.pth`, or the same tensors as safetensors).
pub fn load(path: &Path, device: &Device) -> Result<VarModel> {
    let map = crate::load::read_all_tensors(path, device)?;
    let shapes = map
        .iter()
        .map(|(k, t)| (k.clone(), t.dims().to_vec()))
        .collect();
    let cfg = VarConfig::from_shapes(&shapes, path)?;
    let mut map = split_qkv(map, path)?;
    // The codes' usage statistics of training (one row per scale it was trained with).
    map.remove("quantize.ema_vocab_hit_SV");
    let w = AuditedWeights::new(path, map);
    let model = VarModel::new(&cfg, w.var_builder(DType::F32, device))
        .map_err(|e| Error::format(path, format!("not the VAR VQVAE its shapes describe: {e}")))?;
    w.finish(&[])?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_scales_take_the_four_phis_as_var_does() {
        let mut c = VarConfig {
            vq: VqConfig::vqgan_imagenet_f16_1024(),
            vocab_size: 4096,
            z_channels: 32,
            ch: 160,
            ch_mult: vec![1, 1, 2, 2, 4],
            num_res_blocks: 2,
            quant_conv_ks: 3,
            quant_resi: 0.5,
            phi_sharing: PhiSharing::Partial,
            phis: 4,
        };
        // ticks 1/12, 4/12 (…), 7/12, 11/12 against si/9.
        let got: Vec<usize> = (0..10).map(|si| c.phi_index(si, 10)).collect();
        assert_eq!(got, vec![0, 0, 1, 1, 1, 2, 2, 3, 3, 3]);
        c.phi_sharing = PhiSharing::All;
        c.phis = 1;
        assert!((0..10).all(|si| c.phi_index(si, 10) == 0));
        c.phi_sharing = PhiSharing::None;
        c.phis = 10;
        let got: Vec<usize> = (0..10).map(|si| c.phi_index(si, 10)).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(VarConfig::tokens(&PATCH_NUMS_256), 680);
        assert_eq!(VarConfig::tokens(&PATCH_NUMS_512), 2240);
    }

    #[test]
    fn token_rows_are_whole_first_scales() {
        assert_eq!(scales_in(680, &PATCH_NUMS_256).unwrap(), 10);
        assert_eq!(scales_in(14, &PATCH_NUMS_256).unwrap(), 3);
        assert_eq!(scales_in(1, &PATCH_NUMS_256).unwrap(), 1);
        let e = scales_in(600, &PATCH_NUMS_256).unwrap_err().to_string();
        assert!(
            e.contains("1, 5, 14") && e.contains("680") && e.contains("600"),
            "{e}"
        );
        assert!(scales_in(0, &PATCH_NUMS_256).is_err());
    }
}
