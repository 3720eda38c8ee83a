//! The zip layout of `torch.save` (torch ≥ 1.6): `<prefix>/data.pkl`, the pickle describing
//! the object tree, and `<prefix>/data/<key>`, the raw bytes of each tensor storage.
//!
//! The legacy format of torch < 1.6 (a bare pickle followed by storages) is not read; such a
//! file is reported as "not a readable PyTorch zip checkpoint".

use crate::error::{FormatError, Result, TorchError};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most bytes reserved up front for one entry: its declared size is only a hint (a damaged
/// archive may claim anything); larger entries grow as they are read.
const MAX_PREALLOC: usize = 1 << 28;

/// An opened checkpoint archive.
pub(crate) struct Archive {
    path: PathBuf,
    zip: zip::ZipArchive<File>,
    /// Directory of `data.pkl` inside the archive, with its trailing `/` (may be empty).
    prefix: String,
}

impl Archive {
    /// Opens `path` as a zip archive and finds its `data.pkl`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|err| TorchError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        let zip = zip::ZipArchive::new(file).map_err(|e| {
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
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of `data.pkl`.
    pub fn read_pickle(&mut self) -> Result<Vec<u8>> {
        self.read_entry(&format!("{}data.pkl", self.prefix))
    }

    /// The archive entry name of storage `key`.
    pub fn storage_entry(&self, key: &str) -> String {
        format!("{}data/{key}", self.prefix)
    }

    /// The bytes of storage `key` (`data/<key>`).
    pub fn read_storage(&mut self, key: &str) -> Result<Vec<u8>> {
        let entry = self.storage_entry(key);
        if self.zip.by_name(&entry).is_err() {
            return Err(TorchError::format(
                &self.path,
                FormatError::MissingStorage { entry },
            ));
        }
        self.read_entry(&entry)
    }

    fn read_entry(&mut self, entry: &str) -> Result<Vec<u8>> {
        let path = &self.path;
        let mut f = self.zip.by_name(entry).map_err(|e| {
            TorchError::format(
                path,
                FormatError::OpenEntry {
                    entry: entry.into(),
                    detail: e.to_string(),
                },
            )
        })?;
        let mut buf = Vec::with_capacity((f.size() as usize).min(MAX_PREALLOC));
        f.read_to_end(&mut buf).map_err(|err| {
            TorchError::format(
                path,
                FormatError::ReadEntry {
                    entry: entry.into(),
                    err,
                },
            )
        })?;
        Ok(buf)
    }
}
