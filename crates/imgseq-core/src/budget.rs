//! The one memory budget: every forward pass whose size comes from a file or a flag is
//! estimated and checked here before anything is allocated, so that an absurd size is a clean
//! error instead of an aborted allocation.

/// Default cap, in GiB, on the memory one model forward may need ([`check_memory`]);
/// the environment variable `IMGSEQ_MAX_MEMORY_GB` overrides it.
pub const MAX_MEMORY_GB: f64 = 8.0;

/// The memory cap in bytes: `IMGSEQ_MAX_MEMORY_GB` (a positive number of GiB) when set,
/// else [`MAX_MEMORY_GB`].
pub fn memory_limit() -> std::result::Result<u128, String> {
    let gb = match std::env::var("IMGSEQ_MAX_MEMORY_GB") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<f64>() {
            Ok(g) if g > 0.0 && g.is_finite() => g,
            _ => {
                return Err(format!(
                    "IMGSEQ_MAX_MEMORY_GB={v} is not a positive number of GiB"
                ))
            }
        },
        _ => MAX_MEMORY_GB,
    };
    Ok((gb * (1u64 << 30) as f64) as u128)
}

/// `Ok` when an operation that needs about `bytes` of memory fits under [`memory_limit`];
/// otherwise the reason, e.g. "needs about 17.0 GiB of memory, more than the 8 GiB limit
/// (IMGSEQ_MAX_MEMORY_GB)", for the caller to put after the setting or file it concerns.
/// Called before allocating anything sized by a file or a flag, so that an absurd size is a
/// clean error instead of an aborted allocation.
pub fn check_memory(bytes: u128) -> std::result::Result<(), String> {
    let limit = memory_limit()?;
    if bytes <= limit {
        return Ok(());
    }
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    let need = gib(bytes);
    let need = if need >= 1e6 {
        format!("{need:.2e}")
    } else {
        format!("{need:.1}")
    };
    Err(format!(
        "needs about {need} GiB of memory, more than the {} GiB limit (IMGSEQ_MAX_MEMORY_GB)",
        gib(limit)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_check_names_the_limit() {
        assert!(check_memory(1 << 20).is_ok());
        let e = check_memory(1 << 50).unwrap_err();
        assert!(
            e.contains("needs about") && e.contains("IMGSEQ_MAX_MEMORY_GB"),
            "{e}"
        );
    }
}
