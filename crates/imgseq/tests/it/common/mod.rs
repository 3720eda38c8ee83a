//! Running the built `imgseq` binary from the integration tests.

use std::process::{Command, Output};

/// Runs `imgseq` with `args`; the shipped default weights are hidden so that tests say which
/// model they use.
pub fn imgseq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(args)
        .env("IMGSEQ_WEIGHTS_DIR", "/nonexistent-imgseq-weights")
        .output()
        .expect("run imgseq")
}

/// A command that must succeed; returns its stdout.
#[allow(dead_code)]
pub fn ok(args: &[&str]) -> String {
    let o = imgseq(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A command that must fail: exit ≠ 0 and exactly one `error: ` line on stderr (returned).
#[allow(dead_code)]
pub fn fails(args: &[&str]) -> String {
    let o = imgseq(args);
    assert!(!o.status.success(), "{args:?} succeeded");
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: stderr not one line: {err}"
    );
    assert!(err.starts_with("error: "), "{err}");
    err
}
