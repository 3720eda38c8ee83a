//! Replays the committed `fuzz/corpus/{vq_config,vq_family_config,family_config,safetensors_audited}` inputs
//! through the
//! functions the fuzz targets call (no nightly needed), so past findings stay fixed.

use std::path::Path;

fn replay(target: &str, f: impl Fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        f(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 0, "{}: empty corpus", dir.display());
}

#[test]
fn vq_config_corpus_replays_without_panic() {
    replay("vq_config", imgseq_vqgan::config::fuzz_config_bytes);
}

#[test]
fn vq_family_config_corpus_replays_without_panic() {
    replay(
        "vq_family_config",
        imgseq_vqgan::family::fuzz_family_config_bytes,
    );
}

#[test]
fn family_config_corpus_replays_through_the_kl_janus_and_ibq_readers_without_panic() {
    replay("family_config", imgseq_vqgan::ibq::fuzz_family_file_bytes);
}

#[test]
fn safetensors_audited_corpus_replays_without_panic() {
    replay(
        "safetensors_audited",
        imgseq_vqgan::load::fuzz_safetensors_tiny,
    );
}

#[test]
fn the_fuzz_model_config_is_valid() {
    imgseq_vqgan::load::fuzz_tiny_config()
        .validate(Path::new("fuzz"))
        .unwrap();
}
