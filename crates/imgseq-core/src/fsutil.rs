//! File writing: one path for every output of every command.
//!
//! * [`write_atomic`] writes `path.tmp-<pid>` beside the target, fsyncs it and renames it into
//!   place, so a failed or killed write never leaves a half-written file; before writing it
//!   refuses ([`check_output`]) to replace anything that is not a regular file — a device
//!   node, FIFO, socket, folder or symlink is left untouched.
//! * [`Outputs`] is one command's set of outputs: it also refuses an output that is one of the
//!   command's inputs (same file, by device and inode), and when the command fails it removes
//!   every output the command already wrote (and the folders it created), so a failed command
//!   leaves nothing behind.

use crate::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What kind of file system object `meta` (from `symlink_metadata`) is, in words.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        return "a symbolic link";
    }
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Checks that `path` may receive a new file: it is absent or a regular file. Anything else
/// (symlink — checked without following it —, folder, device node, FIFO, socket) is refused
/// with an error naming it, and is left untouched.
pub fn check_output(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    if path.file_name().is_none() {
        return Err(Error::format(path, "not a file path"));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) => Err(Error::format(
            path,
            format!(
                "is {}, not a regular file; refusing to write over it",
                kind(&m)
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The temporary file an atomic write of `path` fills before renaming it into place:
/// `.name.tmp-<pid>` in the same folder (every atomic writer of imgseq uses this name, and
/// [`temp_target`] recognises it).
pub fn temp_path(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::format(path, "not a file path"))?;
    Ok(path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// The name of the file whose temporary ([`temp_path`]) `name` is — `shard-000012.tar` for
/// `.shard-000012.tar.tmp-4242` — or `None` when `name` is not one (any name, any bytes).
pub fn temp_target(name: &str) -> Option<&str> {
    let (target, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    let is_pid = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (is_pid && !target.is_empty()).then_some(target)
}

/// Writes a file by first writing `.name.tmp-<pid>` in the same folder and renaming it into
/// place once `fill` succeeded and the data is on disk. Refuses a `path` that is not a regular
/// file ([`check_output`]). On any error the temporary file is removed and `path` is left
/// untouched (or absent), so a failed command never leaves a half-written output.
pub fn write_atomic<F>(path: impl AsRef<Path>, fill: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> std::io::Result<()>,
{
    let path = path.as_ref();
    check_output(path)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(
        temp_path(path)?
            .file_name()
            .expect("a temporary file has a name"),
    );
    // A stale temporary file of ours (same pid, an earlier crash) goes; a link there is
    // removed, never followed.
    if std::fs::symlink_metadata(&tmp).is_ok() {
        let _ = std::fs::remove_file(&tmp);
    }
    let res = (|| -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let mut w = std::io::BufWriter::new(f);
        fill(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

/// [`write_atomic`] for an in-memory buffer.
pub fn write_bytes_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// Which of `files` exist in `dir` (links included, not followed).
pub fn present_files(dir: &Path, files: &[&'static str]) -> Vec<&'static str> {
    files
        .iter()
        .copied()
        .filter(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
        .collect()
}

/// The one rule for starting a training run in `dir` whose files are `run_files`: resuming
/// needs a complete checkpoint (`state_file`, written last), a new run needs a folder without
/// run files (a run is never overwritten by accident; [`clear_run`] removes one on purpose).
pub fn check_run_start(
    dir: &Path,
    run_files: &[&'static str],
    state_file: &str,
    resume: bool,
) -> Result<()> {
    if resume && !dir.join(state_file).is_file() {
        return Err(Error::format(
            dir,
            format!("no run to resume (no complete checkpoint: {state_file} is missing)"),
        ));
    }
    let present = present_files(dir, run_files);
    if !resume && !present.is_empty() {
        return Err(Error::format(
            dir,
            format!(
                "already holds a training run ({}); resume it, or remove it first",
                present.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Removes the `run_files` present in `dir` (only those: other files and the folder stay).
pub fn clear_run(dir: &Path, run_files: &[&'static str]) -> Result<()> {
    for f in present_files(dir, run_files) {
        let p = dir.join(f);
        std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

/// The identity of an existing file: (device, inode) on Unix, the canonical path elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn file_id(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileId::Inode(m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::canonicalize(path).ok().map(FileId::Path)
    }
}

/// The outputs of one command.
///
/// Created with the command's inputs; every output goes through [`Outputs::check`] (before
/// any work, to fail fast) and [`Outputs::write`] (which checks again and records the file).
/// Dropping an `Outputs` that was not [`finish`](Outputs::finish)ed — the command failed —
/// removes every file it wrote and every folder it created, newest first.
#[derive(Debug, Default)]
pub struct Outputs {
    inputs: Vec<(PathBuf, FileId)>,
    written: Vec<PathBuf>,
    created_dirs: Vec<PathBuf>,
    finished: bool,
}

impl Outputs {
    /// The outputs of a command that reads `inputs` (files that do not exist are ignored:
    /// they cannot be overwritten by mistake).
    pub fn new<P: AsRef<Path>>(inputs: impl IntoIterator<Item = P>) -> Self {
        let mut o = Self::default();
        for p in inputs {
            o.add_input(p);
        }
        o
    }

    /// One more input of the command.
    pub fn add_input(&mut self, path: impl AsRef<Path>) {
        let path = path.as_ref();
        if let Some(id) = file_id(path) {
            self.inputs.push((path.to_path_buf(), id));
        }
    }

    /// Checks that `path` may be written: absent or a regular file ([`check_output`]), not
    /// one of the command's inputs, and in an existing folder.
    pub fn check(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        check_output(path)?;
        if let Some(id) = file_id(path) {
            if let Some((input, _)) = self.inputs.iter().find(|(_, i)| *i == id) {
                let what = if input == path {
                    "is also an input of this command".to_string()
                } else {
                    format!("is the same file as the input {}", input.display())
                };
                return Err(Error::format(
                    path,
                    format!("{what}; refusing to overwrite it"),
                ));
            }
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // Missing folders are made when the file is written; the nearest existing one must be
        // a folder (`-o a_file/x` is refused before any work).
        if !self.created_dirs.iter().any(|d| d == dir) && !dir.is_dir() {
            let existing = dir
                .ancestors()
                .filter(|a| !a.as_os_str().is_empty())
                .find(|a| std::fs::symlink_metadata(a).is_ok());
            if let Some(a) = existing.filter(|a| !a.is_dir()) {
                return Err(Error::format(
                    path,
                    format!("cannot write: {} is not a folder", a.display()),
                ));
            }
        }
        Ok(())
    }

    /// Checks an output folder before any work: absent, or a folder whose `files` (the ones
    /// `command` writes into it) may each be replaced ([`check`](Self::check)).
    pub fn check_folder(&self, dir: &Path, files: &[&str], command: &str) -> Result<()> {
        if std::fs::symlink_metadata(dir).is_err() {
            return Ok(());
        }
        if !dir.is_dir() {
            return Err(Error::format(
                dir,
                format!("not a folder (the output of {command} is a folder)"),
            ));
        }
        files.iter().try_for_each(|f| self.check(dir.join(f)))
    }

    /// Writes `path` with `write` (any writer that goes through [`write_atomic`]) after
    /// [`check`](Self::check)ing it, and records it for removal should the command fail.
    pub fn write<T>(
        &mut self,
        path: impl AsRef<Path>,
        write: impl FnOnce(&Path) -> Result<T>,
    ) -> Result<T> {
        let path = path.as_ref();
        self.check(path)?;
        self.make_parent(path)?;
        let v = write(path)?;
        self.written.push(path.to_path_buf());
        Ok(v)
    }

    /// Makes the missing folders of `path` (`-o new/folder/file`, as `roundtrip -o new/folder`
    /// does), removed again if the command fails.
    pub fn make_parent(&mut self, path: &Path) -> Result<()> {
        match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) if !dir.is_dir() => self.create_dir_all(dir),
            _ => Ok(()),
        }
    }

    /// Records `path` as written by the command through some other writer (one that writes
    /// several files at once, say) after [`check`](Self::check)ing it beforehand.
    pub fn record(&mut self, path: impl AsRef<Path>) {
        self.written.push(path.as_ref().to_path_buf());
    }

    /// [`write_bytes_atomic`] through [`write`](Self::write).
    pub fn write_bytes(&mut self, path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        self.write(path, |p| write_bytes_atomic(p, bytes))
    }

    /// Creates `dir` and its missing parents (refusing a path that exists and is not a
    /// folder); the folders created are removed again if the command fails.
    pub fn create_dir_all(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let mut missing = Vec::new();
        for a in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            match std::fs::symlink_metadata(a) {
                Ok(m) if m.is_dir() => break,
                // A link to a folder is a folder to write into (the user made it so).
                Ok(m) if m.file_type().is_symlink() && a.is_dir() => break,
                Ok(m) => return Err(Error::format(a, format!("is {}, not a folder", kind(&m)))),
                Err(_) => missing.push(a.to_path_buf()),
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // Outermost first, so that removal (newest first) takes the innermost first.
        self.created_dirs.extend(missing.into_iter().rev());
        Ok(())
    }

    /// The files written so far.
    pub fn written(&self) -> &[PathBuf] {
        &self.written
    }

    /// The command succeeded: keep its outputs.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for p in self.written.iter().rev() {
            let _ = std::fs::remove_file(p);
        }
        for d in self.created_dirs.iter().rev() {
            // Only if empty: never a file that was not ours.
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Opens `path` for reading if it is a regular file; returns the file and its length.
///
/// Every reader of a file named by the user goes through this (or [`read_regular_file`]):
/// a device (`/dev/zero`), a FIFO or a directory is refused with "not a regular file"
/// before it is opened (opening a FIFO blocks; reading `/dev/zero` never ends).
pub fn open_regular_file(path: &Path) -> Result<(std::fs::File, u64)> {
    let not_regular = |m: &std::fs::Metadata| {
        let what = if m.is_dir() {
            "a directory, not a regular file"
        } else {
            "not a regular file"
        };
        Error::format(path, what)
    };
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok((f, meta.len()))
}

/// Reads a regular file of at most `max` bytes (`what`, e.g. "a .npy file", names it in
/// the error). Reads no more than the length the file had when opened, so a file that
/// grows while being read cannot make this allocate without bound.
pub fn read_regular_file(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let (f, len) = open_regular_file(path)?;
    if len > max {
        return Err(Error::format(
            path,
            format!("{len} bytes is more than imgseq reads as {what} ({max} bytes)"),
        ));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(len as usize)
        .map_err(|_| Error::format(path, format!("cannot allocate {len} bytes to read it")))?;
    f.take(len)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, e))?;
    Ok(buf)
}

/// Largest JSON file read ([`read_json`]): manifests, records, configs.
pub const MAX_JSON_BYTES: u64 = 256 << 20;

/// Reads a JSON file into `T`; a parse failure names the file and says it is not a valid
/// `what` (e.g. "train.json").
pub fn read_json<T: serde::de::DeserializeOwned>(path: impl AsRef<Path>, what: &str) -> Result<T> {
    let path = path.as_ref();
    let bytes = read_regular_file(path, MAX_JSON_BYTES, "a JSON file")?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::format(path, format!("not a valid {what} ({e})")))
}

/// Writes `value` as pretty JSON, atomically (see [`write_atomic`]).
pub fn write_json<T: serde::Serialize>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("plain data serialises to JSON");
    write_bytes_atomic(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        let r = write_atomic(&p, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("boom"))
        });
        assert!(r.is_err());
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[cfg(unix)]
    #[test]
    fn writes_refuse_links_folders_and_sockets_and_leave_them() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write_bytes_atomic(&link, b"new").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(write_bytes_atomic(&sub, b"x")
            .unwrap_err()
            .to_string()
            .contains("folder"));
        let sock = dir.path().join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(write_bytes_atomic(&sock, b"x")
            .unwrap_err()
            .to_string()
            .contains("socket"));
    }

    #[test]
    fn outputs_refuse_inputs_and_remove_what_a_failed_command_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        std::fs::write(&input, b"input").unwrap();
        let outs = Outputs::new([&input]);
        let e = outs.check(&input).unwrap_err().to_string();
        assert!(e.contains("input"), "{e}");
        // A missing folder is made on writing; a file in the way is refused up front.
        outs.check(dir.path().join("missing/x")).unwrap();
        let e = outs.check(input.join("x")).unwrap_err().to_string();
        assert!(
            e.contains("not a folder") || e.contains("Not a directory"),
            "{e}"
        );
        drop(outs);
        // A failed command: its files and the folders it made go.
        let mut outs = Outputs::new([&input]);
        outs.create_dir_all(dir.path().join("a/b")).unwrap();
        outs.write_bytes(dir.path().join("a/b/one"), b"1").unwrap();
        outs.write_bytes(dir.path().join("two"), b"2").unwrap();
        drop(outs);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, vec!["in.txt"]);
        // A finished one keeps them.
        let mut outs = Outputs::new([&input]);
        outs.write_bytes(dir.path().join("two"), b"2").unwrap();
        outs.finish();
        assert_eq!(std::fs::read(dir.path().join("two")).unwrap(), b"2");
    }

    #[test]
    fn successful_write_renames_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        write_bytes_atomic(&p, b"abc").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
    }

    #[test]
    fn temporary_names_are_made_and_recognised_whatever_the_bytes() {
        let t = temp_path(Path::new("out/shard-000012.tar")).unwrap();
        let name = t.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_target(name), Some("shard-000012.tar"));
        assert_eq!(t.parent(), Some(Path::new("out")));
        assert_eq!(temp_target(".ßhard-é.tar.tmp-12"), Some("ßhard-é.tar"));
        for not_one in [
            "shard.tar",
            ".x.tmp-",
            ".x.tmp-12a",
            ".tmp-12",
            "é",
            ".é.tmp",
            "",
        ] {
            assert_eq!(temp_target(not_one), None, "{not_one}");
        }
    }
}
