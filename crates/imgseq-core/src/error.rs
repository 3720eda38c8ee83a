//! The one error type of the imgseq libraries.
//!
//! Every variant that concerns a file carries its path, so that the binary can print a
//! single line such as `weights.safetensors: missing tensor vit.layernorm.weight`.

use std::path::{Path, PathBuf};

/// Errors raised by the imgseq library crates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, read or written. (The I/O error is part of the message,
    /// not a `source`, so that `anyhow`'s `{:#}` chain does not print it twice.)
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    /// The file was read but its content is not what it should be.
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },
    /// A weight file does not match the model it should load into.
    #[error("{}: {msg}", path.display())]
    Weights { path: PathBuf, msg: String },
    /// A setting — a config field or an argument, under the name the library gives it
    /// (`crop`, `size`, `lr`, ...) — has a value the operation cannot use. The message says
    /// what is wrong in the library's terms (`crop 100 must be a positive multiple of 16`); the
    /// binary, which knows the flag behind each setting, prints the flag instead of the name.
    #[error("{name} {value} {msg}")]
    Setting {
        name: &'static str,
        value: String,
        msg: String,
    },
    /// An argument or input value is outside what the operation accepts.
    #[error("{0}")]
    Invalid(String),
    /// Data handed over in memory (an array, a token grid, a picture) is not what the
    /// operation reads: wrong shape, length, channels or values. The file-borne kind is
    /// [`Error::Format`].
    #[error("{0}")]
    BadData(String),
    /// The file is well formed but uses something imgseq does not support (a dtype, a byte
    /// order, a format version, a model family's option).
    #[error("{}: {msg}", path.display())]
    Unsupported { path: PathBuf, msg: String },
    /// The work would need more than a limit allows (memory, pixels, tokens, samples): refused
    /// before anything is allocated.
    #[error("{0}")]
    ResourceLimit(String),
    /// A tensor operation failed.
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
}

/// The kind of an [`Error`], for callers that react to kinds differently: a service answers
/// 4xx for the first four and 5xx otherwise, a dataset job skips a sample whose file is bad
/// but stops on a bad setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A file's content is not what it should be (corrupt, truncated, wrong shape, weights
    /// that do not fit the model).
    BadInput,
    /// A setting or argument has a value the operation cannot use.
    BadSetting,
    /// Well formed, but not supported.
    Unsupported,
    /// More than a limit allows.
    ResourceLimit,
    /// Opening, reading or writing a file failed.
    Io,
    /// A tensor operation failed (a bug, or the machine).
    Internal,
}

/// Result alias used throughout the imgseq crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// What kind of error this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } => ErrorKind::Io,
            Error::Format { .. } | Error::Weights { .. } | Error::BadData(_) => ErrorKind::BadInput,
            Error::Setting { .. } | Error::Invalid(_) => ErrorKind::BadSetting,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::ResourceLimit(_) => ErrorKind::ResourceLimit,
            Error::Candle(_) => ErrorKind::Internal,
        }
    }
    pub fn unsupported(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::Unsupported {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }
    pub fn resource_limit(msg: impl Into<String>) -> Self {
        Error::ResourceLimit(msg.into())
    }
    pub fn io(path: impl AsRef<Path>, err: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            err,
        }
    }
    pub fn format(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }
    pub fn weights(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::Weights {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
    /// In-memory data of the wrong shape, length or values ([`Error::BadData`]).
    pub fn bad_data(msg: impl Into<String>) -> Self {
        Error::BadData(msg.into())
    }
    /// `setting("crop", 100, "must be a positive multiple of 16")`.
    pub fn setting(
        name: &'static str,
        value: impl std::fmt::Display,
        msg: impl Into<String>,
    ) -> Self {
        Error::Setting {
            name,
            value: value.to_string(),
            msg: msg.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_keeps_its_one_line_message() {
        let cases = [
            (
                Error::format("a.npy", "truncated"),
                ErrorKind::BadInput,
                "a.npy: truncated",
            ),
            (
                Error::weights("w.safetensors", "missing x"),
                ErrorKind::BadInput,
                "w.safetensors: missing x",
            ),
            (
                Error::setting("crop", 100, "must be a multiple of 16"),
                ErrorKind::BadSetting,
                "crop 100 must be a multiple of 16",
            ),
            (
                Error::invalid("batch must be positive"),
                ErrorKind::BadSetting,
                "batch must be positive",
            ),
            (
                Error::bad_data("tokens (1, 4, 4) do not fill a 3x3 grid"),
                ErrorKind::BadInput,
                "tokens (1, 4, 4) do not fill a 3x3 grid",
            ),
            (
                Error::unsupported("b.npy", "big-endian data is not supported"),
                ErrorKind::Unsupported,
                "b.npy: big-endian data is not supported",
            ),
            (
                Error::resource_limit("an input of 9x9 pixels needs 9 GiB"),
                ErrorKind::ResourceLimit,
                "an input of 9x9 pixels needs 9 GiB",
            ),
            (
                Error::io("c", std::io::Error::other("boom")),
                ErrorKind::Io,
                "c: boom",
            ),
        ];
        for (e, kind, msg) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.to_string(), msg);
        }
    }
}
