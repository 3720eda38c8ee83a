#![no_main]
//! Fuzz target `npy`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_core::npy::fuzz_npy_bytes(data));
