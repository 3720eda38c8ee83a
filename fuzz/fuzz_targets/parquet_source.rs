#![no_main]
//! Fuzz target `parquet_source`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_shards::fuzz::fuzz_parquet_source(data));
