//! How closely two hidden states agree ([`StateAgreement`]): what the towers' bf16 is held
//! to against f32, and imgseq's states against transformers'.

use candle_core::{Result, Tensor};

/// How closely two hidden states (b, tokens, D) agree: the least cosine similarity of a
/// token's two vectors, and the largest difference of a value relative to the reference's
/// largest magnitude.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateAgreement {
    pub min_cosine: f64,
    pub max_rel: f64,
}

impl StateAgreement {
    /// `got` against `want` (the same shape, last axis the token's vector).
    pub fn of(got: &Tensor, want: &Tensor) -> Result<Self> {
        if got.dims() != want.dims() {
            candle_core::bail!("states of {:?} and {:?} compared", got.dims(), want.dims());
        }
        let d = want.dims().last().copied().unwrap_or(1).max(1);
        let a = got.flatten_all()?.to_vec1::<f32>()?;
        let b = want.flatten_all()?.to_vec1::<f32>()?;
        let mut min_cosine = 1f64;
        for (x, y) in a.chunks(d).zip(b.chunks(d)) {
            let (mut xy, mut xx, mut yy) = (0f64, 0f64, 0f64);
            for (&p, &q) in x.iter().zip(y) {
                let (p, q) = (p as f64, q as f64);
                xy += p * q;
                xx += p * p;
                yy += q * q;
            }
            let c = if xx == 0.0 && yy == 0.0 {
                1.0
            } else {
                xy / (xx.sqrt() * yy.sqrt()).max(f64::MIN_POSITIVE)
            };
            // NaN compares false: a NaN token makes the agreement NaN, which fails any bar.
            if c < min_cosine || c.is_nan() {
                min_cosine = c;
            }
        }
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        let diff = a
            .iter()
            .zip(&b)
            .fold(0f64, |m, (p, q)| m.max((*p as f64 - *q as f64).abs()));
        Ok(Self {
            min_cosine,
            max_rel: diff / scale.max(f64::MIN_POSITIVE),
        })
    }
}

impl std::fmt::Display for StateAgreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "least token cosine {:.6}, largest difference {:.2e} of the largest value",
            self.min_cosine, self.max_rel
        )
    }
}

/// The least token cosine between a tower's bf16 and f32 states that the tests and the
/// speed rows hold bf16 to (measured: ≥ 0.99985 on the fixture towers, ≥ 0.99998 at released
/// size against transformers' f32).
pub const MIN_BF16_COSINE: f64 = 0.999;
