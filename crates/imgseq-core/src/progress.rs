//! The one progress-bar style of imgseq's long jobs (training, encoding many images).
//!
//! indicatif draws only when stderr is a terminal, so logs and tests see nothing from it; jobs
//! that must leave a trace without a terminal print their own log lines.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps starting at `pos`, labelled `prefix`: `prefix [=====>    ] pos/len msg (ETA)`.
pub fn bar(len: u64, pos: u64, prefix: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>9} [{bar:30}] {pos}/{len} {msg} (ETA {eta})")
            .expect("constant template is valid")
            .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb.set_position(pos);
    pb
}

/// A bar for `n` items of work, hidden when there is only one item.
pub fn items(n: usize, prefix: &str) -> ProgressBar {
    if n < 2 {
        return ProgressBar::hidden();
    }
    bar(n as u64, 0, prefix)
}
