#![no_main]
//! Fuzz target `vq_family_config`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_vqgan::family::fuzz_family_config_bytes(data));
