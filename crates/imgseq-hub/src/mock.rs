//! A stand-in of the Hub's HTTP API on loopback, for tests (no test reaches the network):
//! `GET /api/models/ORG/NAME/revision/REV` (the commit and file list), `HEAD` and `GET
//! /ORG/NAME/resolve/REV/PATH` with the Hub's headers (`X-Repo-Commit`, `ETag`; an LFS file
//! answers 302 to a CDN path with `X-Linked-Etag` and `X-Linked-Size`), `Range` requests,
//! 401 for a gated repository without its token, 404 for what does not exist — and, on demand,
//! hostile answers ([`Hostile`]).

use sha1::Digest as _;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One file of a mock repository.
#[derive(Debug, Clone)]
pub struct MockFile {
    pub bytes: Vec<u8>,
    /// Stored with LFS (ETag = SHA-256, served through the CDN redirect) or in git (ETag = the
    /// git blob SHA-1).
    pub lfs: bool,
}

/// A mock repository at one commit.
#[derive(Debug, Clone)]
pub struct MockRepo {
    pub commit: String,
    pub files: BTreeMap<String, MockFile>,
    /// Answers 401 unless the request carries this token.
    pub token: Option<String>,
}

/// Answers a hostile Hub gives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hostile {
    /// Bodies carry 100 bytes more than declared.
    pub overlong: bool,
    /// Bodies have a byte changed (the hash is not the ETag).
    pub wrong_hash: bool,
    /// The CDN redirect points back at itself.
    pub redirect_loop: bool,
    /// Bodies stop halfway through.
    pub truncated: bool,
    /// `HEAD` declares 5 GB.
    pub huge: bool,
    /// The listing names `../escape.bin` and `/etc/passwd`.
    pub bad_names: bool,
}

/// A running mock; stops when dropped (the thread ends with the process).
pub struct MockHub {
    pub url: String,
    hostile: Arc<Mutex<Hostile>>,
    /// Every request line received, in order.
    pub log: Arc<Mutex<Vec<String>>>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl MockFile {
    pub fn etag(&self) -> String {
        if self.lfs {
            hex(&sha2::Sha256::digest(&self.bytes))
        } else {
            let mut h = sha1::Sha1::new();
            h.update(format!("blob {}\0", self.bytes.len()).as_bytes());
            h.update(&self.bytes);
            hex(&h.finalize())
        }
    }
}

struct Req {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Req {
    fn header(&self, k: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
}

fn read_req(s: &TcpStream) -> Option<Req> {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Some(Req {
        method,
        path,
        headers,
    })
}

fn answer(mut s: &TcpStream, status: &str, headers: &[(&str, String)], body: &[u8], head: bool) {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.write_all(out.as_bytes());
    if !head {
        let _ = s.write_all(body);
    }
    let _ = s.flush();
}

impl MockHub {
    /// Serves `repos` (by `ORG/NAME`) on a loopback port.
    pub fn start(repos: Vec<(String, MockRepo)>) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", l.local_addr().expect("its address"));
        let repos: Arc<BTreeMap<String, MockRepo>> = Arc::new(repos.into_iter().collect());
        let hostile = Arc::new(Mutex::new(Hostile::default()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (h, lg, base_url) = (hostile.clone(), log.clone(), url.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (repos, h, lg) = (repos.clone(), h.clone(), lg.clone());
                let base = base_url.clone();
                std::thread::spawn(move || {
                    if let Some(req) = read_req(&s) {
                        lg.lock()
                            .unwrap()
                            .push(format!("{} {}", req.method, req.path));
                        let hostile = *h.lock().unwrap();
                        serve(&s, &req, &repos, hostile, &base);
                    }
                });
            }
        });
        Self { url, hostile, log }
    }

    pub fn set_hostile(&self, h: Hostile) {
        *self.hostile.lock().unwrap() = h;
    }

    /// How many requests whose line contains `part` were received.
    pub fn count(&self, part: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(part))
            .count()
    }
}

fn serve(
    s: &TcpStream,
    req: &Req,
    repos: &BTreeMap<String, MockRepo>,
    hostile: Hostile,
    base: &str,
) {
    let head = req.method == "HEAD";
    let not_found = || answer(s, "404 Not Found", &[], b"{\"error\":\"not found\"}", head);
    let parts: Vec<&str> = req.path.trim_start_matches('/').splitn(6, '/').collect();
    // The CDN: /cdn/<sha256>
    if parts.first() == Some(&"cdn") {
        let sha = parts.get(1).copied().unwrap_or("");
        let file = repos
            .values()
            .flat_map(|r| r.files.values())
            .find(|f| f.lfs && f.etag() == sha);
        match file {
            Some(f) if hostile.redirect_loop => {
                let _ = f;
                answer(
                    s,
                    "302 Found",
                    &[("Location", format!("{base}{}", req.path))],
                    b"",
                    head,
                )
            }
            Some(f) => body(s, req, &f.bytes, hostile),
            None => not_found(),
        }
        return;
    }
    let (repo, rest) = if parts.first() == Some(&"api") {
        // api/models/ORG/NAME/revision/REV
        if parts.len() < 6 || parts[1] != "models" {
            return not_found();
        }
        (format!("{}/{}", parts[2], parts[3]), parts[4..].join("/"))
    } else if parts.len() >= 4 {
        (format!("{}/{}", parts[0], parts[1]), parts[2..].join("/"))
    } else {
        return not_found();
    };
    let Some(r) = repos.get(&repo) else {
        return not_found();
    };
    if let Some(t) = &r.token {
        if req.header("Authorization") != Some(&format!("Bearer {t}")) {
            return answer(s, "401 Unauthorized", &[], b"{\"error\":\"gated\"}", head);
        }
    }
    let (kind, rev_path) = rest.split_once('/').unwrap_or((&rest, ""));
    let (rev, path) = rev_path.split_once('/').unwrap_or((rev_path, ""));
    if rev != "main" && rev != r.commit {
        return not_found();
    }
    let commit = ("X-Repo-Commit", r.commit.clone());
    match kind {
        "revision" => {
            let mut names: Vec<String> = r.files.keys().cloned().collect();
            if hostile.bad_names {
                names.push("../escape.bin".into());
                names.push("/etc/passwd".into());
            }
            let siblings: Vec<serde_json::Value> = names
                .iter()
                .map(|n| serde_json::json!({ "rfilename": n }))
                .collect();
            let j = serde_json::json!({ "id": repo, "sha": r.commit, "siblings": siblings });
            answer(
                s,
                "200 OK",
                &[("Content-Type", "application/json".into())],
                j.to_string().as_bytes(),
                head,
            );
        }
        "resolve" => match r.files.get(path) {
            Some(f) => resolve(s, req, f, commit, hostile, base),
            None => not_found(),
        },
        _ => not_found(),
    }
}

/// `HEAD`/`GET` of a file's `resolve` URL: an LFS file answers 302 to the CDN (another host)
/// with its SHA-256 and size; a git file its git ETag and its bytes.
fn resolve(
    s: &TcpStream,
    req: &Req,
    f: &MockFile,
    commit: (&'static str, String),
    hostile: Hostile,
    base: &str,
) {
    let head = req.method == "HEAD";
    let size = if hostile.huge {
        5_000_000_000
    } else {
        f.bytes.len() as u64
    };
    if f.lfs {
        let h = [
            commit,
            ("X-Linked-Etag", format!("\"{}\"", f.etag())),
            ("X-Linked-Size", size.to_string()),
            // An absolute URL, as the Hub's CDN is another host.
            ("Location", format!("{base}/cdn/{}", f.etag())),
        ];
        answer(s, "302 Found", &h, b"", head);
    } else if head {
        let h = [
            commit,
            ("ETag", format!("\"{}\"", f.etag())),
            ("Content-Length", size.to_string()),
        ];
        answer(s, "200 OK", &h, b"", true);
    } else {
        body(s, req, &f.bytes, hostile);
    }
}

/// A file's bytes (from a `Range` start), as hostility has them.
fn body(s: &TcpStream, req: &Req, bytes: &[u8], hostile: Hostile) {
    let mut data = bytes.to_vec();
    if hostile.wrong_hash && !data.is_empty() {
        data[0] ^= 0xff;
    }
    let from = req
        .header("Range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
        .filter(|&f| f < data.len());
    let (status, part) = match from {
        Some(f) => ("206 Partial Content", data[f..].to_vec()),
        None => ("200 OK", data.clone()),
    };
    let mut part = part;
    let declared = part.len();
    if hostile.overlong {
        part.extend(std::iter::repeat_n(7u8, 100));
    }
    if hostile.truncated {
        part.truncate(declared / 2);
    }
    let len = if hostile.overlong {
        part.len()
    } else {
        declared
    };
    let mut h = vec![("Content-Length", len.to_string())];
    if let Some(f) = from {
        h.push((
            "Content-Range",
            format!("bytes {f}-{}/{}", data.len() - 1, data.len()),
        ));
    }
    answer(s, status, &h, &part, false);
}
