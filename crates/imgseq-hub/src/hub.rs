//! The Hub client: a repository's files at a revision into the cache ([`Hub::snapshot`]),
//! as `huggingface_hub` does — the same environment (`HF_ENDPOINT`, `HF_TOKEN` or the token
//! file, `HF_HUB_OFFLINE`, `HF_HUB_CACHE`/`HF_HOME`), the same URLs and headers, the same
//! cache — with every file checked before it enters the cache ([`crate::download`]).

use crate::cache::{hf_home, is_commit, Cache};
use crate::download::{free_bytes, FileInfo, Lock, Receiving};
use crate::source::{is_safe_path, HubSource};
use imgseq_core::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// The Hub when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The largest file downloaded unless `IMGSEQ_HUB_MAX_GB` says otherwise.
pub const MAX_FILE_GB: f64 = 64.0;
/// Redirects followed for one file (the Hub sends LFS files to its CDN, once).
const MAX_REDIRECTS: usize = 10;

/// A connection to the Hub (or, offline, to the cache alone).
pub struct Hub {
    pub endpoint: String,
    pub cache: Cache,
    /// `HF_HUB_OFFLINE`: the cache only.
    pub offline: bool,
    /// Largest file accepted, in bytes.
    pub max_bytes: u64,
    /// A progress bar (bytes, rate, ETA) on stderr while downloading.
    pub progress: bool,
    token: Option<String>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never printed.
        f.debug_struct("Hub")
            .field("endpoint", &self.endpoint)
            .field("cache", &self.cache)
            .field("offline", &self.offline)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// A model's rule for the files it needs: given every file name of the source's folder
/// (relative to it) and, when the source names a file, that file's name, the names to fetch.
pub type Want<'a> = dyn Fn(&[String], Option<&str>) -> Vec<String> + 'a;

/// What [`Hub::snapshot`] made available.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The source's file or folder in the cache's snapshot of the commit.
    pub path: PathBuf,
    /// The commit the revision resolved to.
    pub commit: String,
    /// The files fetched (or found), relative to the repository, with their ETags.
    pub files: Vec<(String, String)>,
}

fn env_true(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), else the token file `huggingface-cli
/// login` writes (`$HF_TOKEN_PATH`, default `$HF_HOME/token`).
fn token_from_env() -> Option<String> {
    for v in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        if let Ok(t) = std::env::var(v) {
            if !t.trim().is_empty() {
                return Some(t.trim().to_string());
            }
        }
    }
    let path =
        std::env::var_os("HF_TOKEN_PATH").map_or_else(|| hf_home().join("token"), PathBuf::from);
    let t = std::fs::read_to_string(path).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// A failure to talk to the Hub: an HTTP status (with its answer's text) or no answer.
enum Failure {
    Status(u16),
    Unreachable(String),
}

impl Hub {
    /// The Hub the environment names, with its cache.
    pub fn from_env() -> Result<Self> {
        let gb = match std::env::var("IMGSEQ_HUB_MAX_GB") {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|g| *g > 0.0 && g.is_finite())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "IMGSEQ_HUB_MAX_GB={v} is not a positive number of GiB"
                    ))
                })?,
            _ => MAX_FILE_GB,
        };
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let mut hub = Self::new(
            &endpoint,
            Cache::from_env(),
            env_true("HF_HUB_OFFLINE"),
            token_from_env(),
            (gb * (1u64 << 30) as f64) as u64,
        );
        hub.progress = !env_true("HF_HUB_DISABLE_PROGRESS_BARS");
        Ok(hub)
    }

    /// A Hub at `endpoint` with `cache` (tests: a mock on loopback and a temporary cache).
    pub fn new(
        endpoint: &str,
        cache: Cache,
        offline: bool,
        token: Option<String>,
        max_bytes: u64,
    ) -> Self {
        // HTTPS_PROXY / HTTP_PROXY as huggingface_hub honours them, except for a Hub on this
        // machine (a local mirror or the tests' stand-in).
        let local = ["://127.", "://localhost", "://[::1]"]
            .iter()
            .any(|h| endpoint.contains(h));
        let agent = ureq::AgentBuilder::new()
            .try_proxy_from_env(!local)
            .redirects(0)
            .timeout_connect(Duration::from_secs(10))
            .timeout_read(Duration::from_secs(60))
            .user_agent(concat!("imgseq/", env!("CARGO_PKG_VERSION")))
            .build();
        Self {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            cache,
            offline,
            max_bytes,
            progress: true,
            token,
            agent,
        }
    }

    /// The one-line error of a failed request about `what` (`ORG/NAME` or a file of it).
    fn explain(&self, src: &HubSource, what: &str, f: Failure) -> Error {
        match f {
            Failure::Status(401 | 403) => {
                Error::invalid(format!(
                "{what}: the Hub refused access ({}): the model may be gated or private — accept \
                 its licence at {}/{} and set HF_TOKEN (or log in with `huggingface-cli login`)",
                if self.token.is_some() { "with the token given" } else { "no token set" },
                self.endpoint,
                src.repo
            ))
            }
            Failure::Status(404) => Error::invalid(format!(
                "{what}: not found on {} (check the repository, the revision {:?} and the path)",
                self.endpoint, src.revision
            )),
            Failure::Status(s) => Error::invalid(format!("{what}: the Hub answered HTTP {s}")),
            Failure::Unreachable(why) => Error::invalid(format!(
                "{what}: cannot reach {} ({why}) and it is not in the cache {}",
                self.endpoint,
                self.cache.root.display()
            )),
        }
    }

    fn request(&self, method: &str, url: &str, auth: bool) -> ureq::Request {
        let r = self.agent.request(method, url);
        match (&self.token, auth) {
            (Some(t), true) => r.set("Authorization", &format!("Bearer {t}")),
            _ => r,
        }
    }

    fn call(&self, req: ureq::Request) -> std::result::Result<ureq::Response, Failure> {
        match req.call() {
            Ok(r) => Ok(r),
            Err(ureq::Error::Status(s, r)) if (300..400).contains(&s) => Ok(r),
            Err(ureq::Error::Status(s, _)) => Err(Failure::Status(s)),
            Err(ureq::Error::Transport(t)) => Err(Failure::Unreachable(t.to_string())),
        }
    }

    /// The commit `src`'s revision is at and the repository's files there.
    fn listing(&self, src: &HubSource) -> std::result::Result<(String, Vec<String>), Failure> {
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.endpoint, src.repo, src.revision
        );
        let r = self.call(self.request("GET", &url, true))?;
        if r.status() != 200 {
            return Err(Failure::Status(r.status()));
        }
        let mut body = Vec::new();
        use std::io::Read;
        r.into_reader()
            .take(64 << 20)
            .read_to_end(&mut body)
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        parse_listing(&body).ok_or(Failure::Status(502))
    }

    /// The ETag, size and commit of a file (`HEAD` of its `resolve` URL; the Hub's headers on
    /// the first answer, relative redirects of renamed repositories followed).
    fn head(
        &self,
        src: &HubSource,
        commit: &str,
        name: &str,
    ) -> std::result::Result<FileInfo, Failure> {
        let mut url = format!("{}/{}/resolve/{commit}/{name}", self.endpoint, src.repo);
        for _ in 0..MAX_REDIRECTS {
            let r = self.call(
                self.request("HEAD", &url, true)
                    .set("Accept-Encoding", "identity"),
            )?;
            let h = |k: &str| r.header(k).map(|v| v.trim().to_string());
            let etag = h("X-Linked-Etag").or_else(|| h("ETag"));
            if (300..400).contains(&r.status()) && etag.is_none() {
                match h("Location") {
                    Some(l) if l.starts_with('/') => {
                        url = format!("{}{l}", self.endpoint);
                        continue;
                    }
                    _ => return Err(Failure::Status(r.status())),
                }
            }
            let size = h("X-Linked-Size")
                .or_else(|| h("Content-Length"))
                .and_then(|s| s.parse::<u64>().ok());
            let (Some(etag), Some(size)) = (etag, size) else {
                return Err(Failure::Status(502));
            };
            let etag = etag.trim_start_matches("W/").trim_matches('"').to_string();
            if !is_safe_path(&etag) || etag.contains('/') {
                return Err(Failure::Status(502));
            }
            return Ok(FileInfo {
                commit: h("X-Repo-Commit"),
                etag,
                size,
            });
        }
        Err(Failure::Unreachable(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// Downloads one file into `blobs/` (resuming a partial one), following the CDN redirect.
    fn download(&self, src: &HubSource, commit: &str, name: &str, info: &FileInfo) -> Result<()> {
        let what = format!("{name} of {}", src.repo);
        if info.size > self.max_bytes {
            return Err(Error::resource_limit(format!(
                "{what}: {} bytes, more than the {} a file may have here (IMGSEQ_HUB_MAX_GB)",
                info.size, self.max_bytes
            )));
        }
        let rx = Receiving {
            cache: &self.cache,
            repo: &src.repo,
            name,
            info,
        };
        let have = rx.have().min(info.size);
        let blobs = self.cache.repo_dir(&src.repo).join("blobs");
        std::fs::create_dir_all(&blobs).map_err(|e| Error::io(&blobs, e))?;
        if let Some(free) = free_bytes(&blobs) {
            if info.size - have > free {
                return Err(Error::resource_limit(format!(
                    "{what}: {} bytes to download, more than the {free} free on the disk of {}",
                    info.size - have,
                    self.cache.root.display()
                )));
            }
        }
        let mut url = format!("{}/{}/resolve/{commit}/{name}", self.endpoint, src.repo);
        let hub = origin(&self.endpoint);
        for _ in 0..MAX_REDIRECTS {
            // The token goes to the Hub only, never to the host a redirect names.
            let mut req = self.request("GET", &url, origin(&url) == hub);
            if have > 0 {
                req = req.set("Range", &format!("bytes={have}-"));
            }
            let r = self.call(req).map_err(|f| self.explain(src, &what, f))?;
            if (300..400).contains(&r.status()) {
                let l = r.header("Location").unwrap_or("").to_string();
                url = if l.starts_with('/') {
                    format!("{}{l}", origin(&url))
                } else {
                    l
                };
                continue;
            }
            let from = if r.status() == 206 { have } else { 0 };
            let bar = self.bar(name, info.size);
            rx.receive(r.into_reader(), from, &bar)?;
            bar.finish_and_clear();
            return rx.finish();
        }
        Err(Error::invalid(format!(
            "{what}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    fn bar(&self, name: &str, size: u64) -> indicatif::ProgressBar {
        if !self.progress {
            return indicatif::ProgressBar::hidden();
        }
        let pb = indicatif::ProgressBar::new(size);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} (ETA {eta})",
            )
            .expect("constant template is valid")
            .progress_chars("=> "),
        );
        pb.set_prefix(name.to_string());
        pb
    }

    /// One file of the repository at `commit`, in the cache (fetched unless its blob is there).
    fn fetch(&self, src: &HubSource, commit: &str, name: &str) -> Result<(PathBuf, String)> {
        let what = format!("{name} of {}", src.repo);
        let info = self
            .head(src, commit, name)
            .map_err(|f| self.explain(src, &what, f))?;
        let blob = self.cache.blob(&src.repo, &info.etag);
        if !blob.is_file() {
            let _lock = Lock::take(&self.cache.lock(&src.repo, &info.etag))?;
            // Another process may have finished it while this one waited.
            if !blob.is_file() {
                self.download(src, commit, name, &info)?;
            }
        }
        let at = self.cache.link(&src.repo, commit, name, &info.etag)?;
        Ok((at, info.etag))
    }

    /// `src`'s file, or the files `want` picks of its folder (given every file name under it,
    /// relative to it), in the cache's snapshot of the commit its revision is at: fetched when
    /// online, found when offline (`HF_HUB_OFFLINE`) or the Hub cannot be reached.
    pub fn snapshot(&self, src: &HubSource, want: &Want<'_>) -> Result<Snapshot> {
        if self.offline {
            return self.cached(src, want, "HF_HUB_OFFLINE is set");
        }
        let (commit, names) = match self.listing(src) {
            Ok(l) => l,
            Err(Failure::Unreachable(why)) => {
                return self.cached(
                    src,
                    want,
                    &format!("cannot reach {} ({why})", self.endpoint),
                )
            }
            Err(f) => return Err(self.explain(src, &src.to_string(), f)),
        };
        let picked = pick(src, &names, want)?;
        let mut files = Vec::new();
        for name in &picked {
            let (_, etag) = self.fetch(src, &commit, name)?;
            files.push((name.clone(), etag));
        }
        self.cache.set_ref(&src.repo, &src.revision, &commit)?;
        Ok(Snapshot {
            path: self.cache.snapshot(&src.repo, &commit).join(&src.path),
            commit,
            files,
        })
    }

    /// [`Self::snapshot`] from the cache alone (`why`: why the Hub is not asked).
    fn cached(&self, src: &HubSource, want: &Want<'_>, why: &str) -> Result<Snapshot> {
        let missing = |what: &str| {
            Error::invalid(format!(
                "{src}: {what} is not in the cache {} and {why}",
                self.cache.root.display()
            ))
        };
        let commit = self
            .cache
            .commit_of(&src.repo, &src.revision)
            .ok_or_else(|| missing(&format!("revision {:?}", src.revision)))?;
        let snap = self.cache.snapshot(&src.repo, &commit);
        let names = list_files(&snap);
        if names.is_empty() {
            return Err(missing("the snapshot"));
        }
        let picked = pick(src, &names, want).map_err(|_| missing(&format!("{:?}", src.path)))?;
        let files = picked
            .iter()
            .map(|n| {
                let etag = std::fs::read_link(snap.join(n))
                    .ok()
                    .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
                    .unwrap_or_default();
                (n.clone(), etag)
            })
            .collect();
        Ok(Snapshot {
            path: snap.join(&src.path),
            commit,
            files,
        })
    }
}

/// The files of `src` among the repository's `names`: the file it names, or what `want`
/// picks of its folder; every name safe to write under the cache.
fn pick(src: &HubSource, names: &[String], want: &Want<'_>) -> Result<Vec<String>> {
    if let Some(bad) = names.iter().find(|n| !is_safe_path(n)) {
        return Err(Error::invalid(format!(
            "{src}: the repository lists a file named {bad:?}, which could leave the cache \
             folder; nothing was fetched"
        )));
    }
    // A file: the rule picks among its folder's files (its configs), with the file named.
    let (folder, file) = match names
        .iter()
        .find(|n| !src.path.is_empty() && **n == src.path)
    {
        Some(f) => match f.rsplit_once('/') {
            Some((d, n)) => (d.to_string(), Some(n.to_string())),
            None => (String::new(), Some(f.clone())),
        },
        None => (src.path.clone(), None),
    };
    let prefix = if folder.is_empty() {
        String::new()
    } else {
        format!("{folder}/")
    };
    let under: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix(&prefix).map(str::to_string))
        .filter(|n| file.is_none() || !n.contains('/'))
        .collect();
    if under.is_empty() {
        return Err(Error::invalid(format!(
            "{src}: the repository has no file or folder {:?}",
            src.path
        )));
    }
    let picked = want(&under, file.as_deref());
    if picked.is_empty() {
        return Err(Error::invalid(format!(
            "{src}: none of its files is a model imgseq reads ({})",
            under.join(", ")
        )));
    }
    Ok(picked.into_iter().map(|n| format!("{prefix}{n}")).collect())
}

/// Every file under `dir`, relative, `/`-separated (links followed as the cache's are).
fn list_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let p = e.path();
            if p.is_dir() {
                stack.push((p, r));
            } else if p.is_file() {
                out.push(r);
            }
        }
    }
    out.sort();
    out
}

/// The commit and file names of a `/api/models/.../revision/...` answer.
pub fn parse_listing(body: &[u8]) -> Option<(String, Vec<String>)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let sha = v.get("sha")?.as_str()?.to_string();
    if !is_commit(&sha) {
        return None;
    }
    let names = v
        .get("siblings")?
        .as_array()?
        .iter()
        .map(|s| {
            s.get("rfilename")
                .and_then(|f| f.as_str())
                .map(str::to_string)
        })
        .collect::<Option<Vec<_>>>()?;
    Some((sha, names))
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split('/').next().unwrap_or("");
    format!("{scheme}://{host}")
}

/// Fuzz body: bytes as a Hub listing answer.
#[doc(hidden)]
pub fn fuzz_listing(bytes: &[u8]) {
    if let Some((_, names)) = parse_listing(bytes) {
        for n in &names {
            let _ = is_safe_path(n);
        }
    }
}
