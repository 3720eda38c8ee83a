//! File writing that never leaves a partial output behind.

use crate::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Writes a file by first writing `path.tmp-<pid>` in the same folder and renaming it into
/// place once `fill` succeeded. On any error the temporary file is removed and `path` is left
/// untouched (or absent), so a failed command never leaves a half-written output.
pub fn write_atomic<F>(path: impl AsRef<Path>, fill: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> std::io::Result<()>,
{
    let path = path.as_ref();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: not a file path", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let res = (|| -> std::io::Result<()> {
        let f = std::fs::File::create(&tmp)?;
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

/// Reads a JSON file into `T`; a parse failure names the file and says it is not a valid
/// `what` (e.g. "train.json").
pub fn read_json<T: serde::de::DeserializeOwned>(path: impl AsRef<Path>, what: &str) -> Result<T> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text)
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

    #[test]
    fn successful_write_renames_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        write_bytes_atomic(&p, b"abc").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
    }
}
