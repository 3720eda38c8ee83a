#![no_main]
//! Fuzz target `torch_ckpt`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_torch::fuzz_checkpoint_bytes(data));
