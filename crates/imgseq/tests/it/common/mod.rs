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

/// Runs `imgseq` with `args` (default weights hidden, as [`imgseq`]) and measures its peak
/// resident memory: `(exit success, stderr, peak RSS in MiB)`, from the kernel's accounting
/// of the child (`wait4`'s `ru_maxrss`).
#[allow(dead_code)]
// The child is reaped by `wait4` (which also gives its resource usage), not `Child::wait`.
#[allow(clippy::zombie_processes)]
pub fn peak_rss_mib(args: &[&str]) -> (bool, String, f64) {
    let err = tempfile::tempfile().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(args)
        .env("IMGSEQ_WEIGHTS_DIR", "/nonexistent-imgseq-weights")
        .stdout(std::process::Stdio::null())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .expect("run imgseq");
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills; the pid is our own child, waited once.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    let mut stderr = String::new();
    use std::io::{Read, Seek};
    let mut err = err;
    err.rewind().unwrap();
    err.read_to_string(&mut stderr).unwrap();
    let success = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (success, stderr, usage.ru_maxrss as f64 / 1024.0)
}
