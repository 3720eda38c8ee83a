//! The zip layout of `torch.save` (torch ≥ 1.6): `<prefix>/data.pkl`, the pickle describing
//! the object tree, and `<prefix>/data/<key>`, the raw bytes of each tensor storage.
//!
//! The legacy format of torch < 1.6 (a bare pickle followed by storages) is not read; such a
//! file, or any bare pickle, is reported as such.
//!
//! Every read is bounded: only regular files are opened (a device or FIFO would never end),
//! `data.pkl` may inflate to at most [`MAX_PICKLE_BYTES`], a storage entry is read only up to
//! the bytes its tensors need, and compressed storages (torch never compresses them) may
//! inflate to at most [`inflate_budget`] bytes in all, so a small file cannot make the reader
//! allocate gigabytes.

use crate::error::{FormatError, Result, TorchError};
use std::fs::File;
use std::io::{Cursor, Read, Seek};
use std::path::{Path, PathBuf};

/// Largest `data.pkl` read. A taming checkpoint's pickle is a few hundred KB; one with
/// optimizer state for thousands of tensors a few MB.
pub const MAX_PICKLE_BYTES: u64 = 32 << 20;

/// Most bytes compressed storage entries of a file of `file_len` bytes may inflate to in all:
/// 16 times the file, at least 256 MiB. (torch stores storages uncompressed; a re-zipped
/// checkpoint of float weights compresses by far less than 16×.)
pub fn inflate_budget(file_len: u64) -> u64 {
    file_len.saturating_mul(16).max(256 << 20)
}

/// What an archive is read from.
pub(crate) trait Source: Read + Seek {}
impl<T: Read + Seek> Source for T {}

/// An opened checkpoint archive.
pub(crate) struct Archive {
    path: PathBuf,
    zip: zip::ZipArchive<Box<dyn Source>>,
    /// Directory of `data.pkl` inside the archive, with its trailing `/` (may be empty).
    prefix: String,
    /// Size of the whole file.
    file_len: u64,
    /// Bytes inflated so far from compressed storage entries.
    inflated: u64,
}

/// True for the start of a pickle (`PROTO 2..=5`), i.e. a bare pickle rather than a zip.
pub(crate) fn looks_like_pickle(head: &[u8]) -> bool {
    matches!(head, [0x80, 2..=5, ..])
}

impl Archive {
    /// Opens `path` (a regular file) as a zip archive and finds its `data.pkl`.
    pub fn open(path: &Path) -> Result<Self> {
        let io = |err| TorchError::Io {
            path: path.to_path_buf(),
            err,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(TorchError::format(path, FormatError::NotARegularFile));
        }
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut head = [0u8; 2];
        let mut f = file;
        let got = f.read(&mut head).map_err(io)?;
        f.rewind().map_err(io)?;
        Self::new(path, Box::new(f), len, &head[..got])
    }

    /// An archive held in memory; `path` is only used in messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let len = bytes.len() as u64;
        let head: Vec<u8> = bytes.iter().take(2).copied().collect();
        Self::new(path, Box::new(Cursor::new(bytes)), len, &head)
    }

    fn new(path: &Path, src: Box<dyn Source>, file_len: u64, head: &[u8]) -> Result<Self> {
        if looks_like_pickle(head) {
            return Err(TorchError::format(path, FormatError::BarePickle));
        }
        let zip = zip::ZipArchive::new(src).map_err(|e| {
            TorchError::format(
                path,
                FormatError::NotAZip {
                    detail: e.to_string(),
                },
            )
        })?;
        // `data.pkl` at the top level or one directory down (torch names that directory
        // after the file it saved).
        let pkl = zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .find(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
            .ok_or_else(|| TorchError::format(path, FormatError::NoPickle))?;
        let prefix = pkl.strip_suffix("data.pkl").unwrap_or("").to_string();
        Ok(Self {
            path: path.to_path_buf(),
            zip,
            prefix,
            file_len,
            inflated: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file the archive was read from.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The bytes of `data.pkl` (at most [`MAX_PICKLE_BYTES`]).
    pub fn read_pickle(&mut self) -> Result<Vec<u8>> {
        let entry = format!("{}data.pkl", self.prefix);
        let path = self.path.clone();
        let too_large = || {
            TorchError::format(
                &path,
                FormatError::EntryTooLarge {
                    entry: entry.clone(),
                    max: MAX_PICKLE_BYTES,
                },
            )
        };
        let mut f = self.open_entry(&entry)?;
        // The declared size first (no inflating at all), then the bytes actually inflated
        // (a damaged archive may declare anything).
        if f.size() > MAX_PICKLE_BYTES {
            return Err(too_large());
        }
        let mut buf = Vec::new();
        (&mut f)
            .take(MAX_PICKLE_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|err| read_error(&path, &entry, err))?;
        if buf.len() as u64 > MAX_PICKLE_BYTES {
            return Err(too_large());
        }
        Ok(buf)
    }

    /// Whether the archive is a TorchScript one (`torch.jit.save`): it has `constants.pkl` or
    /// `code/` beside its `data.pkl` (neither is ever read).
    pub fn is_torchscript(&self) -> bool {
        let constants = format!("{}constants.pkl", self.prefix);
        let code = format!("{}code/", self.prefix);
        self.zip
            .file_names()
            .filter_map(|n| n.ok())
            .any(|n| *n == constants || n.starts_with(&code))
    }

    /// The archive entry name of storage `key`.
    pub fn storage_entry(&self, key: &str) -> String {
        format!("{}data/{key}", self.prefix)
    }

    /// The first `want` bytes of storage `key` (`data/<key>`): an error if the entry holds
    /// fewer, and no more are read (or inflated) if it holds more.
    pub fn read_storage(&mut self, key: &str, want: usize) -> Result<Vec<u8>> {
        let entry = self.storage_entry(key);
        if self.zip.by_name(&entry).is_err() {
            return Err(TorchError::format(
                &self.path,
                FormatError::MissingStorage { entry },
            ));
        }
        let path = self.path.clone();
        let budget = inflate_budget(self.file_len);
        let (inflated, file_len) = (self.inflated, self.file_len);
        let truncated = |len: u64| {
            TorchError::format(
                &path,
                FormatError::TruncatedStorage {
                    entry: entry.clone(),
                    len: usize::try_from(len).unwrap_or(usize::MAX),
                    want,
                },
            )
        };
        let mut f = self.open_entry(&entry)?;
        if f.size() < want as u64 {
            return Err(truncated(f.size()));
        }
        let compressed = f.compression() != zip::CompressionMethod::Stored;
        if compressed && inflated.saturating_add(want as u64) > budget {
            return Err(TorchError::format(
                &path,
                FormatError::InflateBudget {
                    max: budget,
                    file_len,
                },
            ));
        }
        let mut buf = Vec::new();
        buf.try_reserve_exact(want)
            .map_err(|_| TorchError::format(&path, FormatError::OutOfMemory { bytes: want }))?;
        (&mut f)
            .take(want as u64)
            .read_to_end(&mut buf)
            .map_err(|err| read_error(&path, &entry, err))?;
        if buf.len() < want {
            return Err(truncated(buf.len() as u64));
        }
        drop(f);
        if compressed {
            self.inflated += want as u64;
        }
        Ok(buf)
    }

    fn open_entry(&mut self, entry: &str) -> Result<zip::read::ZipFile<'_, Box<dyn Source>>> {
        let path = &self.path;
        self.zip.by_name(entry).map_err(|e| {
            TorchError::format(
                path,
                FormatError::OpenEntry {
                    entry: entry.into(),
                    detail: e.to_string(),
                },
            )
        })
    }
}

fn read_error(path: &Path, entry: &str, err: std::io::Error) -> TorchError {
    TorchError::format(
        path,
        FormatError::ReadEntry {
            entry: entry.into(),
            err,
        },
    )
}
