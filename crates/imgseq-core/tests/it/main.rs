//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq-core --test it MODULE::`.

mod fuzz_corpus_replay;
mod hostile_files;
mod npy_format;
mod pil_resize;
mod pillow_pixels;
