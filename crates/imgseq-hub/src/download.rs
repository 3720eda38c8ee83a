//! One file from the Hub into the cache: checked before it enters it.
//!
//! The bytes go to `blobs/<etag>.incomplete` (a later run resumes it with an HTTP `Range`),
//! under a lock on `.locks/.../<etag>.lock` so that processes of a job array download a blob
//! once. A body longer than declared, or whose hash is not its ETag (LFS files: SHA-256; others:
//! git's blob SHA-1), is deleted; only a complete, verified file is renamed to `blobs/<etag>`.

use crate::cache::Cache;
use imgseq_core::{Error, Result};
use sha1::Digest as _;
use std::io::{Read, Write};
use std::path::Path;

/// What a `HEAD` of a file said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    pub commit: Option<String>,
    pub etag: String,
    pub size: u64,
}

/// An exclusive lock on a file, released on drop (`flock`, which `huggingface_hub`'s
/// `filelock` takes too).
pub struct Lock(std::fs::File);

impl Lock {
    pub fn take(path: &Path) -> Result<Self> {
        let dir = path.parent().expect("a lock file in a folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a descriptor this value owns; blocks until the lock is free.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::io(path, std::io::Error::last_os_error()));
        }
        Ok(Self(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: unlocking the descriptor this value owns.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Free bytes on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the plain struct for a NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0)
        .then(|| s.f_bavail as u64 * s.f_frsize as u64)
}

/// Whether `file` (of `size` bytes) has the hash its `etag` names: an LFS ETag is the
/// SHA-256 of the content, a git one the SHA-1 of `blob <size>\0<content>`; another form is
/// not checked (`None`).
pub fn verify(file: &Path, etag: &str, size: u64) -> Result<Option<bool>> {
    if !etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let hash = match etag.len() {
        64 => digest_hex(sha2::Sha256::new(), b"", file)?,
        40 => digest_hex(sha1::Sha1::new(), format!("blob {size}\0").as_bytes(), file)?,
        _ => return Ok(None),
    };
    Ok(Some(hash == etag.to_ascii_lowercase()))
}

/// The hex digest of `prefix` and then `file`'s bytes.
fn digest_hex<D: sha1::Digest>(mut h: D, prefix: &[u8], file: &Path) -> Result<String> {
    let mut f = std::fs::File::open(file).map_err(|e| Error::io(file, e))?;
    let mut buf = vec![0u8; 1 << 20];
    h.update(prefix);
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(file, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|x| format!("{x:02x}")).collect())
}

/// A body being received: where it goes and what it must come to.
pub struct Receiving<'a> {
    pub cache: &'a Cache,
    pub repo: &'a str,
    /// The file's name in the repository (for messages).
    pub name: &'a str,
    pub info: &'a FileInfo,
}

impl Receiving<'_> {
    /// Bytes already in `blobs/<etag>.incomplete` (what a `Range` asks for from).
    pub fn have(&self) -> u64 {
        std::fs::metadata(self.partial())
            .map(|m| m.len())
            .unwrap_or(0)
    }

    pub fn partial(&self) -> std::path::PathBuf {
        let b = self.cache.blob(self.repo, &self.info.etag);
        b.with_file_name(format!("{}.incomplete", self.info.etag))
    }

    /// Appends `body` (from byte `from`; 0 restarts the file) to the partial file, at most the
    /// declared size; a longer body is an error and the partial file is deleted. A short one
    /// leaves it for the next run to resume.
    pub fn receive(
        &self,
        mut body: impl Read,
        from: u64,
        bar: &indicatif::ProgressBar,
    ) -> Result<()> {
        let part = self.partial();
        let dir = part.parent().expect("blobs folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(from > 0)
            .write(true)
            .truncate(from == 0)
            .open(&part)
            .map_err(|e| Error::io(&part, e))?;
        let want = self.info.size - from;
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        bar.set_position(from);
        loop {
            let n = body.read(&mut buf).map_err(|e| {
                Error::invalid(format!(
                    "{} of {}: the download broke off after {} of {} bytes ({e}); run again to \
                     resume it",
                    self.name,
                    self.repo,
                    from + got,
                    self.info.size
                ))
            })?;
            if n == 0 {
                break;
            }
            if got + n as u64 > want {
                drop(f);
                let _ = std::fs::remove_file(&part);
                return Err(Error::invalid(format!(
                    "{} of {}: the Hub sent more than the {} bytes it declared; nothing was kept",
                    self.name, self.repo, self.info.size
                )));
            }
            f.write_all(&buf[..n]).map_err(|e| Error::io(&part, e))?;
            got += n as u64;
            bar.inc(n as u64);
        }
        f.flush().map_err(|e| Error::io(&part, e))?;
        if got < want {
            return Err(Error::invalid(format!(
                "{} of {}: the download ended after {} of {} bytes; run again to resume it",
                self.name,
                self.repo,
                from + got,
                self.info.size
            )));
        }
        Ok(())
    }

    /// Checks the complete partial file against its ETag and moves it into `blobs/`; a file
    /// whose hash differs is deleted.
    pub fn finish(&self) -> Result<()> {
        let part = self.partial();
        if verify(&part, &self.info.etag, self.info.size)? == Some(false) {
            let _ = std::fs::remove_file(&part);
            return Err(Error::invalid(format!(
                "{} of {}: the downloaded bytes do not have the hash the Hub gave ({}); nothing \
                 was kept",
                self.name, self.repo, self.info.etag
            )));
        }
        let blob = self.cache.blob(self.repo, &self.info.etag);
        std::fs::rename(&part, &blob).map_err(|e| Error::io(&blob, e))
    }
}
