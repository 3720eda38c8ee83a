//! Models from the Hugging Face Hub, one flag away: `hf:ORG/NAME[@REVISION][/PATH]` sources
//! ([`source`]), the cache `huggingface_hub` keeps — shared with Python's transformers and
//! diffusers ([`cache`]) —, and downloads a user can trust: resumable, hash-checked before
//! they enter the cache, one per blob across processes, with a progress bar and one-line errors
//! for gated, missing and unreachable models ([`hub`], [`download`]).
//!
//! Which files of a repository a model needs is the family's rule (the loader's `want`); this
//! crate fetches exactly those into the cache's snapshot of the resolved commit, which the
//! loader then opens as any local folder.
//!
//! [`mock`] is a stand-in of the Hub's HTTP API on loopback, for tests.

pub mod cache;
pub mod download;
pub mod hub;
#[doc(hidden)]
pub mod mock;
pub mod source;

pub use cache::Cache;
pub use hub::{Hub, Snapshot, Want};
pub use source::HubSource;
