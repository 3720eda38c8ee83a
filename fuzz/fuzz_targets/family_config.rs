#![no_main]
//! Fuzz target `family_config`: the config readers of the model families (diffusers
//! `AutoencoderKL` and Janus `config.json`, Open-MAGVIT2 / IBQ yaml). The bodies are library
//! functions, shared with the corpus replay tests.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    imgseq_vqgan::ibq::fuzz_family_file_bytes(data);
    imgseq_lfq::config::fuzz_config_bytes(data);
});
