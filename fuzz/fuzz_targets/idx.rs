#![no_main]
//! Fuzz target `idx`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_core::data::idx::fuzz_idx_bytes(data));
