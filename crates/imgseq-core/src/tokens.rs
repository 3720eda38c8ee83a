//! Token files: a NumPy integer array of codebook indices in raster order (row by row), shape
//! (h, w) for one image or (n, h, w) for several; imgseq writes int64. `numpy.load` reads them.
//! With taming's f16 model a 384×384 image gives a 24×24 grid, 576 tokens.

use crate::{codes, npy, Error, Result};
use std::path::Path;

/// How codebook indices are stored outside the process — token shards (`.npy` members and
/// Parquet columns), the Python package's arrays, `manifest.json`'s `token_dtype`: uint16 when
/// the codebook has at most 65,536 codes, else int32 (codebooks up to 2^31 codes: LFQ's and
/// IBQ's 2^18 fit). Token files written by `vq encode` stay int64 (NumPy's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenDtype {
    U16,
    I32,
}

impl TokenDtype {
    /// The dtype of a codebook of `n_codes` entries.
    pub fn for_codebook(n_codes: usize) -> Self {
        if n_codes <= 1 << 16 {
            Self::U16
        } else {
            Self::I32
        }
    }

    /// NumPy's name (`uint16`, `int32`).
    pub fn name(self) -> &'static str {
        match self {
            Self::U16 => "uint16",
            Self::I32 => "int32",
        }
    }

    /// The `.npy` descr (`<u2`, `<i4`).
    pub fn npy_descr(self) -> &'static str {
        match self {
            Self::U16 => "<u2",
            Self::I32 => "<i4",
        }
    }

    /// Little-endian bytes of `tokens` in this dtype (indices already checked in range).
    pub fn le_bytes(self, tokens: &[i64]) -> Vec<u8> {
        let mut out = Vec::with_capacity(tokens.len() * 4);
        for &t in tokens {
            match self {
                Self::U16 => out.extend_from_slice(&(t as u16).to_le_bytes()),
                Self::I32 => out.extend_from_slice(&(t as i32).to_le_bytes()),
            }
        }
        out
    }
}

/// The token grids of `n` images, `h` × `w` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrid {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    /// Stored as (n, h, w) even when n = 1 (otherwise (h, w)).
    pub batched: bool,
    /// n·h·w indices, image after image, each in raster order.
    pub data: Vec<i64>,
}

impl TokenGrid {
    /// The array shape this grid is stored with.
    pub fn shape(&self) -> Vec<usize> {
        if self.batched {
            vec![self.n, self.h, self.w]
        } else {
            vec![self.h, self.w]
        }
    }

    /// The indices of image `i`.
    pub fn image(&self, i: usize) -> &[i64] {
        let plane = self.h * self.w;
        &self.data[i * plane..(i + 1) * plane]
    }

    /// Whether (row, column) is a cell of the grid.
    pub fn contains(&self, row: usize, col: usize) -> bool {
        row < self.h && col < self.w
    }

    /// Reads a token file; any integer dtype, shape (h, w) or (n, h, w), not empty.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let a = npy::read_npy(path)?;
        let Some(data) = a.as_i64() else {
            return Err(Error::format(
                path,
                format!("tokens must be an integer array, found dtype {}", a.descr),
            ));
        };
        let (batched, n, h, w) = match a.shape.as_slice() {
            [h, w] => (false, 1, *h, *w),
            [n, h, w] => (true, *n, *h, *w),
            s => {
                return Err(Error::format(
                    path,
                    format!("tokens must have shape (h, w) or (n, h, w), found {s:?}"),
                ))
            }
        };
        if n == 0 || h == 0 || w == 0 {
            return Err(Error::format(
                path,
                format!("token array is empty (shape {:?})", a.shape),
            ));
        }
        Ok(Self {
            batched,
            n,
            h,
            w,
            data: data.to_vec(),
        })
    }

    /// Writes the grid as int64 `.npy` (atomically: no partial file on failure).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        npy::write_npy_i64(path, &self.shape(), &self.data)
    }

    /// The cell of flat index `i`, as `[r, c]` or `[image, r, c]`.
    fn cell(&self, i: usize) -> String {
        let (img, r, c) = (i / (self.h * self.w), (i / self.w) % self.h, i % self.w);
        if self.batched {
            format!("[{img}, {r}, {c}]")
        } else {
            format!("[{r}, {c}]")
        }
    }

    /// Every index must be ≥ 0 (what can be checked without a model; see
    /// [`check_codebook`](Self::check_codebook)); the error names `path` and the cell.
    pub fn check_non_negative(&self, path: impl AsRef<Path>) -> Result<()> {
        match self.data.iter().position(|&v| v < 0) {
            None => Ok(()),
            Some(i) => Err(Error::format(
                path,
                format!(
                    "token {} at {} is negative (codebook indices start at 0)",
                    self.data[i],
                    self.cell(i)
                ),
            )),
        }
    }

    /// Every index must name one of `n_embed` codes ([`codes::first_out_of_range`]); the
    /// error names `path` and the cell.
    pub fn check_codebook(&self, path: impl AsRef<Path>, n_embed: usize) -> Result<()> {
        let Some((i, v)) = codes::first_out_of_range(&self.data, n_embed) else {
            return Ok(());
        };
        let at = self.cell(i);
        Err(Error::format(
            path,
            format!(
                "token {v} at {at} is outside the codebook (n_embed = {n_embed}, valid 0..={})",
                n_embed as i64 - 1
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_token_dtype_widens_past_65536_codes() {
        assert_eq!(TokenDtype::for_codebook(1 << 16), TokenDtype::U16);
        assert_eq!(TokenDtype::for_codebook((1 << 16) + 1), TokenDtype::I32);
        // LFQ's 2^18 codes: the largest index survives the round trip.
        let t = TokenDtype::for_codebook(1 << 18);
        let b = t.le_bytes(&[(1 << 18) - 1, 0]);
        assert_eq!(
            i32::from_le_bytes(b[..4].try_into().unwrap()),
            (1 << 18) - 1
        );
        assert_eq!(TokenDtype::U16.le_bytes(&[65_535]), vec![255, 255]);
    }

    use super::*;

    #[test]
    fn out_of_range_token_is_located() {
        let t = TokenGrid {
            n: 2,
            h: 2,
            w: 3,
            batched: true,
            data: vec![0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 9, 5],
        };
        t.check_codebook("t.npy", 10).unwrap();
        let e = t.check_codebook("t.npy", 9).unwrap_err().to_string();
        assert_eq!(
            e,
            "t.npy: token 9 at [1, 1, 1] is outside the codebook (n_embed = 9, valid 0..=8)"
        );
    }

    #[test]
    fn files_roundtrip_with_their_shape() {
        let d = tempfile::tempdir().unwrap();
        for batched in [false, true] {
            let t = TokenGrid {
                n: 1,
                h: 2,
                w: 2,
                batched,
                data: vec![3, 1, 4, 1],
            };
            let p = d.path().join("t.npy");
            t.write(&p).unwrap();
            assert_eq!(TokenGrid::read(&p).unwrap(), t);
        }
    }
}
