#![no_main]
//! Fuzz target `safetensors_audited`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_vqgan::load::fuzz_safetensors_tiny(data));
