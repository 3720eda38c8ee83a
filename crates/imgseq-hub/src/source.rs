//! `hf:ORG/NAME[@REVISION][/PATH]`: a model on the Hugging Face Hub, as users name it.
//!
//! PATH is a file of the repository or a subfolder (diffusers' `vae`, `vqvae`); REVISION a
//! branch, tag or commit (default `main`). A plain `ORG/NAME[...]` names the Hub too where no
//! such local path exists ([`HubSource::from_arg`]).

use imgseq_core::{Error, Result};
use std::path::Path;

/// A repository, a revision and a path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSource {
    /// `ORG/NAME`.
    pub repo: String,
    /// Branch, tag or 40-hex commit.
    pub revision: String,
    /// A file or folder of the repository, `/`-separated; empty: the repository's root.
    pub path: String,
}

/// The revision when none is given.
pub const DEFAULT_REVISION: &str = "main";

/// Whether `s` is a repository or file name part the Hub accepts and a cache can hold: not
/// empty, not `.` or `..`, of letters, digits, `-`, `_`, `.` only.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `p` is a relative `/`-separated path without empty, `.` or `..` parts (what a
/// repository's file may be called here; anything else could leave the cache folder).
pub fn is_safe_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
}

impl HubSource {
    /// Parses `hf:ORG/NAME[@REVISION][/PATH]`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "{s}: {why} (a Hub model is hf:ORG/NAME[@REVISION][/PATH])"
            ))
        };
        let rest = s.strip_prefix("hf:").ok_or_else(|| bad("no hf: prefix"))?;
        let mut parts = rest.splitn(3, '/');
        let org = parts.next().unwrap_or("");
        let name_rev = parts.next().ok_or_else(|| bad("no repository name"))?;
        let path = parts.next().unwrap_or("").trim_end_matches('/').to_string();
        let (name, revision) = match name_rev.split_once('@') {
            Some((n, r)) => (n, r.to_string()),
            None => (name_rev, DEFAULT_REVISION.to_string()),
        };
        if !is_name(org) || !is_name(name) {
            return Err(bad("the organisation and name are letters, digits, - _ ."));
        }
        if revision.is_empty()
            || revision.contains("..")
            || revision.starts_with('/')
            || !revision
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        {
            return Err(bad("the revision is a branch, tag or commit"));
        }
        if !path.is_empty() && !is_safe_path(&path) {
            return Err(bad("the path has an empty, . or .. part"));
        }
        Ok(Self {
            repo: format!("{org}/{name}"),
            revision,
            path,
        })
    }

    /// A model argument as the CLI and Python take it: `hf:...`, or `ORG/NAME[@REV][/PATH]`
    /// when no such local path exists; `None` for a local path.
    pub fn from_arg(arg: &str) -> Option<Result<Self>> {
        if arg.starts_with("hf:") {
            return Some(Self::parse(arg));
        }
        let plain = !arg.starts_with('/')
            && !arg.starts_with('.')
            && !arg.starts_with('~')
            && arg.contains('/')
            && !Path::new(arg).exists()
            && !Path::new(arg.split('/').next().unwrap_or("")).exists();
        if !plain {
            return None;
        }
        Self::parse(&format!("hf:{arg}")).ok().map(Ok)
    }

    /// `hf:ORG/NAME@REVISION/PATH` with `revision` (the resolved commit, for records).
    pub fn at(&self, revision: &str) -> String {
        let mut s = format!("hf:{}@{revision}", self.repo);
        if !self.path.is_empty() {
            s.push('/');
            s.push_str(&self.path);
        }
        s
    }
}

impl std::fmt::Display for HubSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.at(&self.revision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_with_revision_and_path() {
        let s = HubSource::parse("hf:FoundationVision/LlamaGen@main/vq_ds16_c2i.pt").unwrap();
        assert_eq!(
            (s.repo.as_str(), s.revision.as_str(), s.path.as_str()),
            ("FoundationVision/LlamaGen", "main", "vq_ds16_c2i.pt")
        );
        let s = HubSource::parse("hf:stabilityai/sd-vae-ft-mse").unwrap();
        assert_eq!((s.revision.as_str(), s.path.as_str()), ("main", ""));
        let s = HubSource::parse("hf:org/name@v1.0/vae/").unwrap();
        assert_eq!((s.revision.as_str(), s.path.as_str()), ("v1.0", "vae"));
        assert_eq!(s.to_string(), "hf:org/name@v1.0/vae");
        for bad in [
            "hf:org",
            "hf:/name",
            "hf:org/..",
            "hf:org/name/../x",
            "hf:org/name//x",
            "hf:org/name@/x",
            "hf:org/na me",
            "hf:org/name@../../x",
        ] {
            let e = HubSource::parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(bad) && e.contains("hf:ORG/NAME"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn plain_names_are_the_hub_only_where_no_local_path_exists() {
        let s = HubSource::from_arg("stabilityai/sd-vae-ft-mse")
            .unwrap()
            .unwrap();
        assert_eq!(s.repo, "stabilityai/sd-vae-ft-mse");
        assert!(HubSource::from_arg("/abs/path").is_none());
        assert!(HubSource::from_arg("./rel/path").is_none());
        assert!(HubSource::from_arg("model.safetensors").is_none());
        // A path that exists here (tests run in the crate's folder) is a local path.
        assert!(HubSource::from_arg("src/lib.rs").is_none());
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for p in ["../x", "a/../b", "/etc/passwd", "a//b", "a\\b", "", "."] {
            assert!(!is_safe_path(p), "{p}");
        }
        assert!(is_safe_path("vae/diffusion_pytorch_model.safetensors"));
    }
}
