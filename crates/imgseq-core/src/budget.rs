//! The one memory budget: every forward pass whose size comes from a file or a flag is
//! estimated and checked here before anything is allocated, so that an absurd size is a clean
//! error instead of an aborted allocation. Work done side by side by several threads (image
//! decodes) also takes its share from [`reserve`], so that what runs at once fits too.

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

/// Bytes held by live [`Reserved`] values, and the condition waiters sleep on.
static IN_USE: Mutex<u128> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A share of the budget held by one piece of work running beside others; released on drop.
#[derive(Debug)]
pub struct Reserved(u128);

impl Drop for Reserved {
    fn drop(&mut self) {
        let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        *used -= self.0;
        FREED.notify_all();
    }
}

/// Reserves `bytes` of the shared half of the budget (half of [`memory_limit`]; the other half
/// is for what the command keeps, e.g. a model and its batch): waits while work running in other
/// threads holds too much of it, and refuses at once a piece of work that needs more than the
/// whole share (the reason, as [`check_memory`]'s, for the caller to put after the file).
pub fn reserve(bytes: u128) -> std::result::Result<Reserved, String> {
    let share = memory_limit()? / 2;
    if bytes > share {
        return Err(format!(
            "needs about {} of memory, more than the {} that work running side by side may \
             take (half the {} limit, IMGSEQ_MAX_MEMORY_GB)",
            size_text(bytes),
            size_text(share),
            size_text(share * 2)
        ));
    }
    let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    while *used + bytes > share {
        used = FREED.wait(used).unwrap_or_else(|e| e.into_inner());
    }
    *used += bytes;
    Ok(Reserved(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_over_the_shared_half_are_refused_and_others_wait_their_turn() {
        let limit = memory_limit().unwrap();
        let e = reserve(limit / 2 + 1).unwrap_err();
        assert!(e.contains("IMGSEQ_MAX_MEMORY_GB"), "{e}");
        // Two reservations of 40% each cannot be held at once: the second waits for the first.
        let first = reserve(limit / 5 * 2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let r = reserve(limit / 5 * 2).unwrap();
            tx.send(()).unwrap();
            drop(r);
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
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
