#![no_main]
//! Fuzz target `tar_source`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_shards::fuzz::fuzz_tar_source(data));
