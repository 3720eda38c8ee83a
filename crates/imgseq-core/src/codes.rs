//! Codebook indices: the one owner of the range rule (`0 ≤ index < n_codes`) and of usage
//! statistics (distinct codes used, perplexity). The VQ model, token files, the CLI and the
//! metrics all ask here.

/// The first index outside `0..n_codes`: its position in `indices` and its value.
pub fn first_out_of_range<T: Copy + Into<i64>>(
    indices: &[T],
    n_codes: usize,
) -> Option<(usize, i64)> {
    indices
        .iter()
        .map(|&i| i.into())
        .enumerate()
        .find(|&(_, v)| !in_range(v, n_codes))
}

/// Whether `index` names one of `n_codes` codebook entries.
pub fn in_range(index: i64, n_codes: usize) -> bool {
    usize::try_from(index).is_ok_and(|u| u < n_codes)
}

/// Distinct codes used and the perplexity `exp(-Σ p log p)` of per-code `counts` (1 when one
/// code is used, `counts.len()` when all are used equally); `(0, 0.0)` when nothing was counted.
pub fn usage_from_counts(counts: &[u64]) -> (usize, f64) {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return (0, 0.0);
    }
    let used = counts.iter().filter(|&&c| c > 0).count();
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum();
    (used, entropy.exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_rule_rejects_negative_and_past_the_end() {
        assert_eq!(first_out_of_range(&[0i64, 3, 4, -1], 4), Some((2, 4)));
        assert_eq!(first_out_of_range(&[0u32, 3], 4), None);
        assert_eq!(first_out_of_range(&[-1i64], 4), Some((0, -1)));
        assert!(!in_range(0, 0));
    }

    #[test]
    fn usage_counts() {
        assert_eq!(usage_from_counts(&[0, 0]), (0, 0.0));
        let (u, p) = usage_from_counts(&[5, 5, 0, 5, 5]);
        assert_eq!(u, 4);
        assert!((p - 4.0).abs() < 1e-12);
    }
}
