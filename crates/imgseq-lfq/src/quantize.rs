//! Lookup-free quantization as `lookup_free_quantize.py` does it at inference: each latent
//! channel becomes its sign (`x > 0` → +1, else −1, so 0 → −1), the signs are bits, and
//! channel `i` is worth `2^i` in the token (their `mask = 2 ** arange(dim)`: channel 0 is the
//! least significant bit, whatever their docstring's "big endian" says). Decoding a token
//! takes the same bits back (`indices_to_bits`, `get_codebook_entry`) as ±1 values: exact,
//! no codebook is stored or searched.
//!
//! The factorised form (their `token_factorization`, [9, 9] for 18 bits) splits the channels
//! into a first group (channels 0..a, worth 2^0..2^(a−1)) and a second (channels a..a+b,
//! again from 2^0): the pair is `(t mod 2^a, t >> a)` of the full token `t`.

use crate::config::LfqConfig;
use candle_core::{Device, Tensor};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};

/// An LFQ quantizer of `bits` channels, with the factorised split `split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lfq {
    pub bits: usize,
    pub split: [usize; 2],
}

impl Lfq {
    pub fn new(cfg: &LfqConfig) -> Self {
        Self {
            bits: cfg.bits(),
            split: cfg.factorized_bits,
        }
    }

    /// 2^bits.
    pub fn codebook_size(&self) -> usize {
        1 << self.bits
    }

    /// The token of each latent position.
    ///
    /// # Shapes
    /// h: (n, bits, gh, gw) → n·gh·gw tokens, image after image, raster order
    pub fn indices(&self, h: &Tensor) -> Result<TokenGrid> {
        let (n, d, gh, gw) = h.dims4()?;
        if d != self.bits {
            return Err(Error::invalid(format!(
                "latent has {d} channels, the quantizer {} bits",
                self.bits
            )));
        }
        let v = h
            .to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let plane = gh * gw;
        let mut data = vec![0i64; n * plane];
        for (img, out) in data.chunks_mut(plane.max(1)).enumerate() {
            for c in 0..d {
                let chan = &v[(img * d + c) * plane..(img * d + c + 1) * plane];
                for (t, &x) in out.iter_mut().zip(chan) {
                    *t |= i64::from(x > 0.0) << c;
                }
            }
        }
        Ok(TokenGrid {
            n,
            h: gh,
            w: gw,
            batched: true,
            data,
        })
    }

    /// The ±1 latent of tokens (all in `0..2^bits`: check with
    /// [`TokenGrid::check_codebook`]).
    ///
    /// # Shapes
    /// tokens: n·gh·gw → (n, bits, gh, gw)
    pub fn codes(&self, tokens: &[i64], (n, gh, gw): (usize, usize, usize)) -> Result<Tensor> {
        let plane = gh * gw;
        if tokens.len() != n * plane {
            return Err(Error::invalid(format!(
                "{} tokens for {n} grids of {gh}x{gw}",
                tokens.len()
            )));
        }
        if let Some(t) = tokens
            .iter()
            .find(|&&t| t < 0 || t >= self.codebook_size() as i64)
        {
            return Err(Error::invalid(format!(
                "token {t} is outside the codebook (2^{} = {} codes)",
                self.bits,
                self.codebook_size()
            )));
        }
        let d = self.bits;
        let mut out = vec![0f32; n * d * plane];
        for img in 0..n {
            let toks = &tokens[img * plane..(img + 1) * plane];
            for c in 0..d {
                let dst = &mut out[(img * d + c) * plane..(img * d + c + 1) * plane];
                for (o, &t) in dst.iter_mut().zip(toks) {
                    *o = if (t >> c) & 1 == 1 { 1.0 } else { -1.0 };
                }
            }
        }
        Ok(Tensor::from_vec(out, (n, d, gh, gw), &Device::Cpu)?)
    }

    /// The factorised pair of a token: (its first `split[0]` bits, the rest).
    pub fn factorize(&self, token: i64) -> (i64, i64) {
        let a = self.split[0];
        (token & ((1i64 << a) - 1), token >> a)
    }

    /// The token of a factorised pair; each part must be in its range.
    pub fn unfactorize(&self, pre: i64, post: i64) -> Result<i64> {
        let [a, b] = self.split;
        if !(0..1i64 << a).contains(&pre) || !(0..1i64 << b).contains(&post) {
            return Err(Error::invalid(format!(
                "factorised token ({pre}, {post}) is outside 0..2^{a} × 0..2^{b}"
            )));
        }
        Ok(pre | (post << a))
    }

    /// [`Self::factorize`] of every token: the two grids.
    pub fn factorize_grid(&self, g: &TokenGrid) -> (TokenGrid, TokenGrid) {
        let (pre, post): (Vec<i64>, Vec<i64>) = g.data.iter().map(|&t| self.factorize(t)).unzip();
        (
            TokenGrid {
                data: pre,
                ..g.clone()
            },
            TokenGrid {
                data: post,
                ..g.clone()
            },
        )
    }

    /// [`Self::unfactorize`] of two grids of the same shape.
    pub fn unfactorize_grid(&self, pre: &TokenGrid, post: &TokenGrid) -> Result<TokenGrid> {
        if (pre.n, pre.h, pre.w) != (post.n, post.h, post.w) {
            return Err(Error::invalid(format!(
                "factorised grids differ in shape: {:?} and {:?}",
                pre.shape(),
                post.shape()
            )));
        }
        let data = pre
            .data
            .iter()
            .zip(&post.data)
            .map(|(&a, &b)| self.unfactorize(a, b))
            .collect::<Result<_>>()?;
        Ok(TokenGrid {
            data,
            ..pre.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> Lfq {
        Lfq {
            bits: 18,
            split: [9, 9],
        }
    }

    #[test]
    fn channel_i_is_bit_i_and_zero_is_a_zero_bit() {
        // Channel c positive at position c only: token 2^c there.
        let (d, gw) = (18, 19);
        let mut v = vec![-0.5f32; d * gw];
        for c in 0..d {
            v[c * gw + c] = 0.25;
        }
        v[gw - 1] = 0.0; // channel 0 at the last position: exactly 0 → bit 0
        let h = Tensor::from_vec(v, (1, d, 1, gw), &Device::Cpu).unwrap();
        let g = q().indices(&h).unwrap();
        let want: Vec<i64> = (0..gw).map(|p| if p < d { 1 << p } else { 0 }).collect();
        assert_eq!(g.data, want);
    }

    #[test]
    fn codes_invert_indices_for_every_bit() {
        let toks: Vec<i64> = vec![0, 1, 2, 1 << 17, (1 << 18) - 1, 0b10_1100_0011_0101_1001];
        let c = q().codes(&toks, (1, 2, 3)).unwrap();
        let back = q().indices(&c).unwrap();
        assert_eq!(back.data, toks);
        let v = c.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == 1.0 || x == -1.0));
        // token 1: channel 0 is +1, channel 1 is −1 (little-endian over channels)
        assert_eq!((v[1], v[6 + 1]), (1.0, -1.0));
    }

    #[test]
    fn out_of_codebook_tokens_are_refused() {
        for t in [-1, 1 << 18] {
            assert!(q().codes(&[t], (1, 1, 1)).is_err(), "{t}");
        }
    }

    #[test]
    fn factorised_pair_is_low_and_high_bits() {
        let t = 0b10_1100_0011_0101_1001i64;
        let (a, b) = q().factorize(t);
        assert_eq!((a, b), (t & 511, t >> 9));
        assert_eq!(q().unfactorize(a, b).unwrap(), t);
        assert!(q().unfactorize(512, 0).is_err());
        assert!(q().unfactorize(0, -1).is_err());
    }
}
