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
