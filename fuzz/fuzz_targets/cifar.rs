#![no_main]
//! Fuzz target `cifar`: the body is a library function, shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_core::data::cifar::fuzz_cifar_bytes(data));
