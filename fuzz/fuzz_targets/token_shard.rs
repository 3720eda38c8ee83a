#![no_main]
//! Fuzz target `token_shard`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_shards::fuzz::fuzz_token_shard(data));
