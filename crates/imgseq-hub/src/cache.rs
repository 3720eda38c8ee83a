//! The Hub cache as `huggingface_hub` lays it out, so that what transformers, diffusers or
//! `hf_hub_download` fetched loads here with no network, and what imgseq fetches, they find:
//!
//! ```text
//! $HF_HUB_CACHE (default $HF_HOME/hub, $HF_HOME default ~/.cache/huggingface)
//! ├── models--ORG--NAME/
//! │   ├── blobs/<etag>                     the file's bytes, named by its ETag (LFS: SHA-256)
//! │   ├── refs/<revision>                  the commit a branch or tag resolved to
//! │   └── snapshots/<commit>/<path>        a relative link to ../../blobs/<etag>
//! └── .locks/models--ORG--NAME/<etag>.lock one download of a blob at a time, across processes
//! ```

use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

/// A cache folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub root: PathBuf,
}

/// `$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home() -> PathBuf {
    if let Some(h) = std::env::var_os("HF_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h);
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("huggingface");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("huggingface")
}

/// Whether `s` is a full commit hash (40 hex digits).
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Cache {
    /// The cache `huggingface_hub` uses: `$HF_HUB_CACHE`, else `$HF_HOME/hub`.
    pub fn from_env() -> Self {
        let root = std::env::var_os("HF_HUB_CACHE")
            .filter(|v| !v.is_empty())
            .map_or_else(|| hf_home().join("hub"), PathBuf::from);
        Self { root }
    }

    /// `models--ORG--NAME`.
    fn folder_name(repo: &str) -> String {
        format!("models--{}", repo.replace('/', "--"))
    }

    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root.join(Self::folder_name(repo))
    }

    pub fn blob(&self, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(etag)
    }

    pub fn lock(&self, repo: &str, etag: &str) -> PathBuf {
        self.root
            .join(".locks")
            .join(Self::folder_name(repo))
            .join(format!("{etag}.lock"))
    }

    pub fn snapshot(&self, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }

    /// The commit `revision` names in the cache: itself when it is a commit, else what
    /// `refs/<revision>` records.
    pub fn commit_of(&self, repo: &str, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let r = std::fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
        let c = r.trim().to_string();
        is_commit(&c).then_some(c)
    }

    /// Records that `revision` resolved to `commit`.
    pub fn set_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let p = self.repo_dir(repo).join("refs").join(revision);
        write_atomic(&p, commit.as_bytes())
    }

    /// Links `snapshots/<commit>/<path>` to the blob `etag` (relative, as huggingface_hub).
    pub fn link(&self, repo: &str, commit: &str, path: &str, etag: &str) -> Result<PathBuf> {
        let at = self.snapshot(repo, commit).join(path);
        let dir = at.parent().expect("a snapshot file has a folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // snapshots/<commit>/<a>/<b>/file → ../../(..)*/blobs/<etag>
        let depth = path.split('/').count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag);
        // A new link under a temporary name, renamed over the old: processes linking the same
        // file at once never see it missing.
        let tmp = dir.join(format!(
            ".{}.{}.{:?}.link",
            at.file_name().and_then(|n| n.to_str()).unwrap_or("f"),
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &at).map_err(|e| Error::io(&at, e))?;
        Ok(at)
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename (no half-written file).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("a file in a folder");
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{}.{:?}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f"),
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_huggingface_hubs() {
        let c = Cache {
            root: PathBuf::from("/c"),
        };
        assert_eq!(
            c.blob("org/name", "abc"),
            PathBuf::from("/c/models--org--name/blobs/abc")
        );
        assert_eq!(
            c.lock("org/name", "abc"),
            PathBuf::from("/c/.locks/models--org--name/abc.lock")
        );
        let d = tempfile::tempdir().unwrap();
        let c = Cache {
            root: d.path().to_path_buf(),
        };
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(c.blob("o/n", "e").parent().unwrap()).unwrap();
        std::fs::write(c.blob("o/n", "e"), b"x").unwrap();
        let at = c.link("o/n", commit, "vae/config.json", "e").unwrap();
        assert_eq!(std::fs::read(&at).unwrap(), b"x");
        assert_eq!(
            std::fs::read_link(&at).unwrap(),
            PathBuf::from("../../../blobs/e")
        );
        c.set_ref("o/n", "main", commit).unwrap();
        assert_eq!(c.commit_of("o/n", "main").as_deref(), Some(commit));
        assert_eq!(c.commit_of("o/n", commit).as_deref(), Some(commit));
        assert_eq!(c.commit_of("o/n", "v2"), None);
    }
}
