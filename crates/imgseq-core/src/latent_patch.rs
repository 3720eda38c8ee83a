//! Latents as sequences: a (C, h, w) latent cut into p×p patches gives (h/p · w/p) tokens of
//! p²·C values.
//!
//! Tokens run in raster order over the patches (row by row); inside a token the values run
//! channel, then row in the patch, then column in the patch — FLUX's `_pack_latents`
//! (`view(b, c, h/2, 2, w/2, 2).permute(0, 2, 4, 1, 3, 5)`), which is also the order in which
//! a Conv2d patch embedding (DiT's and SD3's `PatchEmbed`, weight `(hidden, C, p, p)`) reads a
//! patch. (DiT's `unpatchify` of its *output* uses (row, column, channel) instead.)

use crate::{Error, Result};
use candle_core::Tensor;

/// Checks that a `h`×`w` latent splits into `p`×`p` patches.
pub fn check_patch(p: usize, h: usize, w: usize) -> Result<()> {
    if p == 0 || !h.is_multiple_of(p) || !w.is_multiple_of(p) {
        return Err(Error::setting(
            "patch",
            p,
            format!("must divide the latent grid {h}x{w}"),
        ));
    }
    Ok(())
}

/// # Shapes
/// z: (b, c, h, w) → (b, (h/p)·(w/p), c·p·p)
pub fn patchify(z: &Tensor, p: usize) -> Result<Tensor> {
    let (b, c, h, w) = z.dims4()?;
    check_patch(p, h, w)?;
    Ok(z.reshape((b, c, h / p, p, w / p, p))?
        .permute((0, 2, 4, 1, 3, 5))?
        .reshape((b, (h / p) * (w / p), c * p * p))?)
}

/// The inverse of [`patchify`] for a latent of `c` channels on an `h`×`w` grid.
///
/// # Shapes
/// tokens: (b, (h/p)·(w/p), c·p·p) → (b, c, h, w)
pub fn unpatchify(tokens: &Tensor, c: usize, h: usize, w: usize, p: usize) -> Result<Tensor> {
    check_patch(p, h, w)?;
    let (b, n, d) = tokens.dims3()?;
    if n != (h / p) * (w / p) || d != c * p * p {
        return Err(Error::invalid(format!(
            "{n} tokens of {d} values are not a {c}x{h}x{w} latent in {p}x{p} patches \
             (expected {} tokens of {})",
            (h / p) * (w / p),
            c * p * p
        )));
    }
    Ok(tokens
        .reshape((b, h / p, w / p, c, p, p))?
        .permute((0, 3, 1, 4, 2, 5))?
        .reshape((b, c, h, w))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn patch_values_run_channel_then_row_then_column() {
        // z[c, y, x] = 100c + 10y + x on a 4×4 grid, p = 2.
        let v: Vec<f32> = (0..3)
            .flat_map(|c| {
                (0..4).flat_map(move |y| (0..4).map(move |x| (100 * c + 10 * y + x) as f32))
            })
            .collect();
        let z = Tensor::from_vec(v, (1, 3, 4, 4), &Device::Cpu).unwrap();
        let t = patchify(&z, 2).unwrap();
        assert_eq!(t.dims(), &[1, 4, 12]);
        let tok1: Vec<f32> = t.get(0).unwrap().get(1).unwrap().to_vec1().unwrap();
        // Token 1 = patch row 0, column 1 (x 2..4).
        assert_eq!(&tok1[..5], &[2.0, 3.0, 12.0, 13.0, 102.0]);
        let back = unpatchify(&t, 3, 4, 4, 2).unwrap();
        let d = (back - &z).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0);
        assert!(patchify(&z, 3).unwrap_err().to_string().contains("patch 3"));
        assert!(unpatchify(&t, 4, 4, 4, 2).is_err());
    }
}
