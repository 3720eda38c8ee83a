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
    /// A tensor operation failed.
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Result alias used throughout the imgseq crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
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
