//! Process-wide CPU runtime settings.

/// glibc returns every freed block above its mmap threshold (adaptive, from 128 KiB) to the
/// kernel, so each large temporary tensor costs fresh zero-filled pages: about a quarter of a
/// ViT training step went to page faults. Keep blocks up to 32 MiB in the heap and do not trim
/// it eagerly. Call once at start-up; a no-op on other C libraries.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 128 << 20);
    }
}

/// The variable both thread pools read: rayon's (our kernels) and candle's matrix products.
pub const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// Fixes the process's thread count: `n`, or when none is given (and [`THREADS_VAR`] is not
/// set) the logical core count rayon uses anyway. Without the variable, candle asks for its
/// count at every matrix product and counts the physical cores by reading `/proc/cpuinfo`
/// each time — ~2,000 reads a second in `vq train`, ~3% of its CPU time in kernel text
/// formatting. Call at start-up, before any other thread exists (it sets an environment
/// variable).
pub fn settle_thread_count(n: Option<usize>) {
    let cores = || std::thread::available_parallelism().map_or(1, |c| c.get());
    if let Some(n) = thread_count_to_set(n, std::env::var_os(THREADS_VAR).is_some(), cores) {
        std::env::set_var(THREADS_VAR, n.to_string());
    }
}

/// The count [`settle_thread_count`] sets: the one given, else (when the variable is not
/// already set) all logical cores; `None`: leave the variable as it is.
fn thread_count_to_set(
    given: Option<usize>,
    already_set: bool,
    cores: impl Fn() -> usize,
) -> Option<usize> {
    match given {
        Some(n) => Some(n),
        None if already_set => None,
        None => Some(cores()),
    }
}

#[cfg(test)]
mod tests {
    use super::thread_count_to_set;

    #[test]
    fn the_thread_count_is_always_settled_so_candle_never_rereads_proc_cpuinfo() {
        assert_eq!(thread_count_to_set(Some(3), true, || 8), Some(3)); // --threads wins
        assert_eq!(thread_count_to_set(None, false, || 8), Some(8)); // default: all cores
        assert_eq!(thread_count_to_set(None, true, || 8), None); // the user's variable stays
    }
}
