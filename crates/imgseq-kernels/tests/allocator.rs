//! `tune_allocator` in a fresh process (no test harness: its threads would get their own
//! heaps before the settings apply): a large buffer freed and allocated again, on the main
//! thread and on a thread started afterwards (as `imgseq serve` runs its models), comes back
//! with its pages in place instead of as fresh zero-filled pages.

/// Minor page faults of the calling thread so far.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn thread_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        u.ru_minflt
    }
}

/// Faults of a second 96 MiB buffer (a 128-channel 384² activation at batch 1 is 75 MB)
/// after a first one was written and freed; fresh 4 KiB pages would be 24,576 faults.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn refault() -> i64 {
    let n = 96 << 20;
    let touch = || {
        let mut v = vec![1u8; n];
        v[n / 2] = 2;
        std::hint::black_box(&v);
    };
    touch();
    let before = thread_faults();
    touch();
    thread_faults() - before
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    if std::env::var_os("IMGSEQ_MALLOC").is_some() {
        eprintln!("allocator test skipped: IMGSEQ_MALLOC is set");
        return;
    }
    imgseq_kernels::tune_allocator();
    let main = refault();
    let worker = std::thread::spawn(refault).join().expect("worker thread");
    println!("page faults of a reused 96 MiB buffer: main thread {main}, worker thread {worker}");
    assert!(
        main < 500,
        "main thread: {main} page faults for a reused buffer"
    );
    assert!(
        worker < 500,
        "worker thread: {worker} page faults for a reused buffer"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {}
