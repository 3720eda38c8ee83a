#![no_main]
//! Fuzz target `token_shard`: the body is a library function, shared with the corpus replay test.
//! The memory budget is set to 1 GiB, so that everything it bounds (pages, dictionaries,
//! the cursor pool, whole columns) stays well inside libFuzzer's 2 GiB limit.

libfuzzer_sys::fuzz_target!(
    init: std::env::set_var("IMGSEQ_MAX_MEMORY_GB", "1"),
    |data: &[u8]| imgseq_shards::fuzz::fuzz_token_shard(data)
);
