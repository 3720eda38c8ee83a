//! `--precision auto`'s agreement checks remembered across runs: one small file beside the
//! user's cache, a line per (model files, CPU kind, build), so a model checked once on a
//! machine starts at once the next time.
//!
//! The key names the model's files by canonical path, size and modification time (a
//! rewritten file is a new key — no hashing of gigabytes at start-up), the CPU by vendor,
//! model name and the bf16 units in use, and this build's version: an agreement measured
//! with other kernels is never reused.
//!
//! Location: `$IMGSEQ_PRECISION_CACHE` (a file; empty, `0` or `off` turn the cache off), else
//! `$XDG_CACHE_HOME/imgseq/precision-checks.tsv`, else `~/.cache/imgseq/precision-checks.tsv`.
//! Format: UTF-8 lines `key \t passed (0|1) \t summary`; lines that do not parse are ignored,
//! and a write replaces the file atomically (a temporary file renamed over it).

use crate::cpu::bf16::Kernel;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::UNIX_EPOCH;

/// Bumped when what a check measures changes (its picture, its bar).
const FORMAT: &str = "1";
/// At most this many lines are kept (the newest).
const MAX_LINES: usize = 512;

/// A check's outcome as remembered: whether it passed and what it measured (the fields of
/// [`crate::precision::Agreement`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Remembered {
    pub passed: bool,
    pub summary: String,
}

/// The remembered agreement checks in one file.
#[derive(Debug, Clone)]
pub struct CheckCache {
    path: PathBuf,
}

impl CheckCache {
    /// The user's cache file (see the module docs), or `None` where it is turned off or no
    /// home is known.
    pub fn user() -> Option<Self> {
        if let Some(v) = std::env::var_os("IMGSEQ_PRECISION_CACHE") {
            let off = v.is_empty() || v == "0" || v == "off";
            return (!off).then(|| Self::at(PathBuf::from(v)));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })?;
        Some(Self::at(base.join("imgseq").join("precision-checks.tsv")))
    }

    /// The cache kept in `path`.
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The outcome remembered for `key`, if any (an unreadable file is an empty cache).
    pub fn get(&self, key: &str) -> Option<Remembered> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        text.lines().rev().find_map(|line| {
            let (k, passed, summary) = parse(line)?;
            (k == key).then(|| Remembered {
                passed,
                summary: summary.to_string(),
            })
        })
    }

    /// Remembers `a` for `key` (replacing an older line for it). Best effort for the caller:
    /// an error means only that the next run checks again.
    pub fn put(&self, key: &str, a: &Remembered) -> std::io::Result<()> {
        let old = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut lines: Vec<&str> = old
            .lines()
            .filter(|l| parse(l).is_some_and(|(k, _, _)| k != key))
            .collect();
        let skip = lines.len().saturating_sub(MAX_LINES - 1);
        lines.drain(..skip);
        let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        text.push_str(&format!(
            "{}\t{}\t{}\n",
            clean(key),
            u8::from(a.passed),
            clean(&a.summary)
        ));
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

fn parse(line: &str) -> Option<(&str, bool, &str)> {
    let mut f = line.splitn(3, '\t');
    let (k, p, s) = (f.next()?, f.next()?, f.next()?);
    let passed = match p {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    (!k.is_empty()).then_some((k, passed, s))
}

/// Tabs and line breaks out of a field.
fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// The key of a model's check: what the model is (`what`, e.g. its family and the check it
/// runs), its files by canonical path, size and modification time, the CPU kind and this
/// build. `None` when a file cannot be read (no caching then).
pub fn check_key(what: &str, files: &[&Path]) -> Option<String> {
    let mut parts = vec![format!("v{FORMAT}"), what.to_string()];
    for f in files {
        let path = std::fs::canonicalize(f).ok()?;
        let meta = std::fs::metadata(&path).ok()?;
        let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
        parts.push(format!(
            "{}:{}:{}.{:09}",
            path.display(),
            meta.len(),
            mtime.as_secs(),
            mtime.subsec_nanos()
        ));
    }
    parts.push(cpu_kind().to_string());
    parts.push(format!("imgseq {}", env!("CARGO_PKG_VERSION")));
    Some(clean(&parts.join("|")))
}

/// The CPU as far as bf16 results go: vendor, model name, and which bf16 units run.
fn cpu_kind() -> &'static str {
    static KIND: OnceLock<String> = OnceLock::new();
    KIND.get_or_init(|| {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        let unit = match Kernel::best() {
            Kernel::Amx => "amx",
            Kernel::Native => "avx512bf16",
            Kernel::Portable => "portable",
        };
        format!("{} {model} {unit}", crate::cpu::features::vendor())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("imgseq-check-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_remembered_check_comes_back_and_a_new_one_replaces_it() {
        let d = tmp("roundtrip");
        let c = CheckCache::at(d.join("sub").join("checks.tsv"));
        assert_eq!(c.get("k"), None, "an absent file is an empty cache");
        let pass = Remembered {
            passed: true,
            summary: "40.0 dB\twith a tab".into(),
        };
        c.put("k", &pass).unwrap();
        c.put(
            "other",
            &Remembered {
                passed: false,
                summary: "no".into(),
            },
        )
        .unwrap();
        let got = c.get("k").unwrap();
        assert!(got.passed);
        assert_eq!(got.summary, "40.0 dB with a tab");
        c.put(
            "k",
            &Remembered {
                passed: false,
                summary: "later".into(),
            },
        )
        .unwrap();
        assert_eq!(c.get("k").unwrap().summary, "later");
        assert_eq!(c.get("other").unwrap().summary, "no");
        let text = std::fs::read_to_string(c.path()).unwrap();
        assert_eq!(text.lines().count(), 2, "one line per key: {text}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_cache_file_is_read_as_far_as_it_parses() {
        let d = tmp("damaged");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("checks.tsv");
        std::fs::write(&p, "garbage\nk\t7\tx\nk\t1\tgood\n\u{0}\u{0}\n").unwrap();
        let c = CheckCache::at(p);
        assert_eq!(c.get("k").unwrap().summary, "good");
        c.put(
            "j",
            &Remembered {
                passed: true,
                summary: "s".into(),
            },
        )
        .unwrap();
        assert_eq!(c.get("k").unwrap().summary, "good");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_rewritten_weights_file_changes_the_key() {
        let d = tmp("key");
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("model.safetensors");
        std::fs::write(&f, b"one").unwrap();
        let k1 = check_key("vq", &[&f]).unwrap();
        assert_eq!(check_key("vq", &[&f]).unwrap(), k1);
        assert_ne!(check_key("vit", &[&f]).unwrap(), k1);
        std::fs::write(&f, b"three").unwrap();
        assert_ne!(
            check_key("vq", &[&f]).unwrap(),
            k1,
            "size and mtime are in the key"
        );
        assert_eq!(check_key("vq", &[&d.join("missing")]), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
