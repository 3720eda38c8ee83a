//! Process-wide CPU runtime settings.

/// glibc returns every freed block above its mmap threshold (adaptive, from 128 KiB) to the
/// kernel, so each large temporary tensor costs fresh zero-filled pages: about a quarter of a
/// ViT training step went to page faults, and at 384² (75 MB per 128-channel map, above any
/// mmap threshold glibc accepts) the kernel clearing pages took 30–50% of the VQGAN's CPU
/// time, twice as much per image at batch 2 as at batch 1. So every block comes from the
/// heap and is reused once freed: no block gets its own mmap (`M_MMAP_MAX` = 0), all threads
/// share the main heap (`M_ARENA_MAX` = 1: a thread's own heap is capped at 64 MiB and maps
/// anything larger afresh), the heap is trimmed only above 1 GiB free at its top and grows in
/// 128 MiB steps. `IMGSEQ_MALLOC=default` leaves glibc's settings alone. Call once at
/// start-up, before other threads exist; a no-op on other C libraries.
pub fn tune_allocator() {
    if std::env::var("IMGSEQ_MALLOC").is_ok_and(|v| v == "default") {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_MMAP_MAX, 0);
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

/// Asks Linux to back `buf` with 2 MiB pages where transparent huge pages are on request
/// (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`): a buffer above the mmap
/// threshold is fresh memory, and filling 75 MB of it in 4 KiB pages took ~18,000 page faults
/// — as long as the AMX conv's products at 384². Call before the first write; buffers under
/// 4 MiB are left alone, and a refusal changes nothing (a hint, not a requirement).
pub fn advise_huge_pages<T>(buf: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (start, len) = (buf.as_mut_ptr() as usize, std::mem::size_of_val(buf));
        if len < 2 * HUGE {
            return;
        }
        let lo = start.next_multiple_of(HUGE);
        let hi = (start + len) / HUGE * HUGE;
        if hi > lo {
            // SAFETY: [lo, hi) lies inside `buf` (page-aligned); MADV_HUGEPAGE changes how its
            // pages are backed, never their contents.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// An empty Vec with room for `n` elements, for a caller that writes all of them and then
/// calls `set_len(n)`: 2 MiB pages advised ([`advise_huge_pages`]), and in debug builds the
/// room filled with `poison` first, so that an element left unwritten shows (NaN through a
/// conv's output) instead of reading whatever the allocator returned.
pub(crate) fn unfilled<T: Copy>(n: usize, poison: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_huge_pages(v.spare_capacity_mut());
    if cfg!(debug_assertions) {
        v.resize(n, poison);
        v.clear();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::{advise_huge_pages, thread_count_to_set};

    #[test]
    fn the_thread_count_is_always_settled_so_candle_never_rereads_proc_cpuinfo() {
        assert_eq!(thread_count_to_set(Some(3), true, || 8), Some(3)); // --threads wins
        assert_eq!(thread_count_to_set(None, false, || 8), Some(8)); // default: all cores
        assert_eq!(thread_count_to_set(None, true, || 8), None); // the user's variable stays
    }

    #[test]
    fn huge_page_hint_keeps_contents_and_takes_any_buffer() {
        // Unaligned start (a sub-slice), above and below the 4 MiB floor, and empty.
        let mut v = vec![0u32; (9 << 20) / 4 + 7];
        advise_huge_pages(&mut v[3..]);
        for (i, x) in v.iter_mut().enumerate() {
            *x = i as u32;
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
        advise_huge_pages(&mut vec![1f32; 100]);
        advise_huge_pages::<f32>(&mut []);
    }
}
