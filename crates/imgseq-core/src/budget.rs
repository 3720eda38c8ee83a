//! The one memory budget: every forward pass whose size comes from a file or a flag is
//! estimated and checked here before anything is allocated, so that an absurd size is a clean
//! error instead of an aborted allocation ([`check_memory`]). What runs at once takes its
//! estimate from one process-wide pool of the same size while it runs — image decodes with
//! [`reserve`], forward passes with [`admit`] — so that the sum of what runs side by side
//! (a server's uploads beside another request's decode, a CLI's prefetching beside its batch)
//! stays within the limit under any interleaving: work waits its turn instead.

use std::sync::{Condvar, Mutex};

/// Default cap, in GiB, on the memory one operation may need ([`check_memory`]): every
/// shipped command runs within it at its defaults. The environment variable
/// `IMGSEQ_MAX_MEMORY_GB` overrides it (e.g. `IMGSEQ_MAX_MEMORY_GB=16` on a big machine).
pub const MAX_MEMORY_GB: f64 = 2.0;

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
/// otherwise the reason, e.g. "needs about 17.0 GiB of memory, more than the 2.0 GiB limit
/// (IMGSEQ_MAX_MEMORY_GB)", for the caller to put after the setting or file it concerns.
/// Called before allocating anything sized by a file or a flag, so that an absurd size is a
/// clean error instead of an aborted allocation.
pub fn check_memory(bytes: u128) -> std::result::Result<(), String> {
    let limit = memory_limit()?;
    if bytes <= limit {
        return Ok(());
    }
    Err(format!(
        "needs about {} of memory, more than the {} limit (IMGSEQ_MAX_MEMORY_GB)",
        size_text(bytes),
        size_text(limit)
    ))
}

/// `bytes` for people: `2.0 GiB`, `1.52e12 GiB`, or `12.5 MiB` below a tenth of a GiB.
pub fn size_text(bytes: u128) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1e6 {
        format!("{gib:.2e} GiB")
    } else if gib >= 0.1 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Bytes held by live [`Reserved`] values across the process, the most ever held at once,
/// and the condition waiters sleep on.
static IN_USE: Mutex<u128> = Mutex::new(0);
static PEAK: Mutex<u128> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

thread_local! {
    /// Bytes admitted by [`admit`] on this thread and still held (nested admissions take
    /// only what exceeds it, so a thread never waits for itself).
    static HELD_HERE: std::cell::Cell<u128> = const { std::cell::Cell::new(0) };
}

/// A share of the one process-wide budget held by a piece of work; released on drop.
#[derive(Debug)]
pub struct Reserved {
    bytes: u128,
    /// For an [`admit`]: this thread's admitted bytes before it, restored on drop.
    restore_here: Option<u128>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(before) = self.restore_here {
            HELD_HERE.with(|h| h.set(before));
        }
        if self.bytes > 0 {
            let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
            *used -= self.bytes;
            FREED.notify_all();
        }
    }
}

/// Takes `bytes` from the pool, waiting while other work holds too much of it.
fn take(bytes: u128, limit: u128) -> Reserved {
    let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    while *used + bytes > limit {
        used = FREED.wait(used).unwrap_or_else(|e| e.into_inner());
    }
    *used += bytes;
    let mut peak = PEAK.lock().unwrap_or_else(|e| e.into_inner());
    *peak = (*peak).max(*used);
    Reserved {
        bytes,
        restore_here: None,
    }
}

/// Reserves `bytes` for work that runs beside other work and holds nothing else while it
/// waits (an image decode): from the one process-wide pool of [`memory_limit`], waiting while
/// other work holds too much of it. One piece of such work may take at most half the limit
/// (the rest stays for forward passes); more is refused at once (the reason, as
/// [`check_memory`]'s, for the caller to put after the file).
pub fn reserve(bytes: u128) -> std::result::Result<Reserved, String> {
    let limit = memory_limit()?;
    let share = limit / 2;
    if bytes > share {
        return Err(format!(
            "needs about {} of memory, more than the {} that one piece of work running \
             beside others may take (half the {} limit, IMGSEQ_MAX_MEMORY_GB)",
            size_text(bytes),
            size_text(share),
            size_text(limit)
        ));
    }
    Ok(take(bytes, limit))
}

/// Admits a forward pass estimated at `bytes` (refused over [`memory_limit`], as
/// [`check_memory`]): holds them in the one process-wide pool until the returned value drops,
/// waiting while image decodes and other passes hold too much. Every piece of work whose size
/// comes from a request or a file takes from this pool, so their sum stays within the limit
/// under any interleaving. Nested admissions on one thread (a batch, then its chunks) take
/// only what exceeds what the thread already holds.
pub fn admit(bytes: u128) -> std::result::Result<Reserved, String> {
    check_memory(bytes)?;
    let limit = memory_limit()?;
    let here = HELD_HERE.with(|h| h.get());
    let extra = bytes.saturating_sub(here);
    let mut r = take(extra, limit);
    HELD_HERE.with(|h| h.set(here.max(bytes)));
    r.restore_here = Some(here);
    Ok(r)
}

/// The most bytes the pool held at once since the process started (`/metrics`).
pub fn peak_in_use() -> u128 {
    *PEAK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes the pool holds now.
pub fn in_use() -> u128 {
    *IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes (reserve) and forward passes (admit) take from one pool: a pass of 70% waits
    /// while a decode holds 40%, and no piece of decode work takes more than half.
    #[test]
    fn decodes_and_forward_passes_share_one_pool_and_wait_their_turn() {
        let limit = memory_limit().unwrap();
        let e = reserve(limit / 2 + 1).unwrap_err();
        assert!(e.contains("IMGSEQ_MAX_MEMORY_GB"), "{e}");
        let e = admit(limit + 1).unwrap_err();
        assert!(e.contains("IMGSEQ_MAX_MEMORY_GB"), "{e}");
        let decode = reserve(limit / 5 * 2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let r = admit(limit / 10 * 7).unwrap();
            tx.send(()).unwrap();
            drop(r);
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(decode);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
    }

    /// A thread that admits a batch and then its chunks (or the same batch twice) does not
    /// wait for itself: nested admissions take only what exceeds what it holds.
    #[test]
    fn nested_admissions_on_one_thread_take_only_the_excess() {
        let limit = memory_limit().unwrap();
        std::thread::spawn(move || {
            let outer = admit(limit / 10 * 6).unwrap();
            let inner = admit(limit / 10 * 6).unwrap();
            assert_eq!(inner.bytes, 0);
            let more = admit(limit / 10 * 8).unwrap();
            assert_eq!(more.bytes, limit / 10 * 8 - limit / 10 * 6);
            drop(more);
            drop(inner);
            drop(outer);
            assert_eq!(HELD_HERE.with(|h| h.get()), 0);
        })
        .join()
        .unwrap();
    }

    /// Many threads admitting and reserving at random never hold more than the limit at once.
    #[test]
    fn interleaved_work_never_holds_more_than_the_limit() {
        let limit = memory_limit().unwrap();
        let ts: Vec<_> = (0..8u64)
            .map(|i| {
                std::thread::spawn(move || {
                    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..200 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let frac = (x % 45 + 1) as u128;
                        let held = if x % 2 == 0 {
                            reserve(limit * frac / 100).unwrap()
                        } else {
                            admit(limit * frac / 100).unwrap()
                        };
                        assert!(in_use() <= limit);
                        drop(held);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert!(peak_in_use() <= limit);
    }

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
