#![no_main]
//! Fuzz target `hub_listing`: bytes as the Hub's answer to `GET /api/models/ORG/NAME/revision/REV`
//! (the commit and the file names, each checked as a cache path); the body is a library function,
//! shared with the corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| imgseq_hub::hub::fuzz_listing(data));
