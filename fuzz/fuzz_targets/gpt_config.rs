#![no_main]
//! Fuzz target `gpt_config`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_gpt::config::GptConfig::fuzz_bytes(data));
