//! diffusers' tiled encode/decode (`AutoencoderKL._tiled_encode`, `tiled_decode`), so that
//! the memory of a forward pass is that of one tile whatever the picture's size.
//!
//! Tiles of side `tile_in` start every `⌊tile_in · 3/4⌋` (a quarter overlap; the last ones
//! of a row or column are cut by the border); each gives an output tile of side `tile_out`;
//! each output tile is blended into the one above over `⌊tile_out / 4⌋` rows, then into the
//! one to its left over as many columns (weight of the new tile rising linearly from 0:
//! `blend_v`, `blend_h`), and its top-left `tile_out − ⌊tile_out / 4⌋` square is kept. The
//! result equals diffusers' with the same tile sizes; it differs from an untiled pass because
//! each tile's GroupNorm statistics and attention see only the tile.

use candle_core::{DType, Tensor};
use imgseq_core::{Error, Result};

/// A tile side (pixels) must be a positive multiple of 4·f, so that tiles start on latent
/// cells.
pub fn check_tile(tile: usize, f: usize) -> Result<()> {
    let step = 4 * f;
    if tile == 0 || !tile.is_multiple_of(step) {
        return Err(Error::setting(
            "tile",
            tile,
            format!("must be a positive multiple of {step} (4 × the downsampling factor)"),
        ));
    }
    Ok(())
}

/// Linear ramp `y / e` for y in 0..e, as a tensor shaped to broadcast along `dim`.
fn ramp(e: usize, dim: usize) -> Result<Tensor> {
    let w: Vec<f32> = (0..e).map(|y| (y as f64 / e as f64) as f32).collect();
    let mut shape = vec![1usize; 4];
    shape[dim] = e;
    Ok(Tensor::from_vec(w, shape, &candle_core::Device::Cpu)?)
}

/// diffusers' `blend_v` (dim 2) / `blend_h` (dim 3): the first `e` rows (columns) of `b`
/// become `a`'s last `e` weighted by `1 − y/e` plus `b`'s weighted by `y/e`.
fn blend(a: &Tensor, b: &Tensor, extent: usize, dim: usize) -> Result<Tensor> {
    let (na, nb) = (a.dim(dim)?, b.dim(dim)?);
    let e = na.min(nb).min(extent);
    if e == 0 {
        return Ok(b.clone());
    }
    let w = ramp(e, dim)?.to_device(b.device())?.to_dtype(b.dtype())?;
    let one_minus = (1.0 - &w)?;
    let head = (a.narrow(dim, na - e, e)?.broadcast_mul(&one_minus)?
        + b.narrow(dim, 0, e)?.broadcast_mul(&w)?)?;
    if e == nb {
        return Ok(head);
    }
    Ok(Tensor::cat(&[&head, &b.narrow(dim, e, nb - e)?], dim)?)
}

/// Runs `f` on overlapping tiles of `x` (side `tile_in`, giving side `tile_out`) and blends
/// the results as diffusers does (see the module docs). Only the previous row of output
/// tiles is kept besides the result.
///
/// # Shapes
/// x: (b, c, H, W) → (b, c', H·r, W·r), r = tile_out / tile_in
pub fn tiled(
    x: &Tensor,
    tile_in: usize,
    tile_out: usize,
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    let stride = (tile_in as f64 * 0.75) as usize;
    let extent = (tile_out as f64 * 0.25) as usize;
    let limit = tile_out - extent;
    if stride == 0 {
        return Err(Error::setting("tile", tile_in, "is too small to tile"));
    }
    let mut prev: Vec<Tensor> = Vec::new();
    let mut rows: Vec<Tensor> = Vec::new();
    for i in (0..h).step_by(stride) {
        let mut row: Vec<Tensor> = Vec::new();
        let mut kept: Vec<Tensor> = Vec::new();
        for (jn, j) in (0..w).step_by(stride).enumerate() {
            let t = x
                .narrow(2, i, tile_in.min(h - i))?
                .narrow(3, j, tile_in.min(w - j))?;
            let mut t = f(&t.contiguous()?)?;
            if let Some(above) = prev.get(jn) {
                t = blend(above, &t, extent, 2)?;
            }
            if jn > 0 {
                t = blend(&row[jn - 1], &t, extent, 3)?;
            }
            let (th, tw) = (t.dim(2)?, t.dim(3)?);
            kept.push(t.narrow(2, 0, limit.min(th))?.narrow(3, 0, limit.min(tw))?);
            row.push(t);
        }
        rows.push(Tensor::cat(&kept, 3)?);
        prev = row;
    }
    let out = Tensor::cat(&rows, 2)?;
    debug_assert_eq!(out.dtype(), DType::F32);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn tiling_an_identity_gives_the_input_back() {
        // A pointwise map blended with itself is unchanged: the tiles cover every pixel once.
        let x = Tensor::arange(0f32, 2.0 * 40.0 * 40.0, &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 40, 40))
            .unwrap();
        let y = tiled(&x, 16, 16, |t| Ok(t.clone())).unwrap();
        let d = (y - &x).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0);
    }

    #[test]
    fn tile_must_be_a_multiple_of_four_f() {
        check_tile(512, 8).unwrap();
        let e = check_tile(100, 8).unwrap_err().to_string();
        assert!(e.contains("tile 100") && e.contains("32"), "{e}");
        assert!(check_tile(0, 8).is_err());
    }
}
