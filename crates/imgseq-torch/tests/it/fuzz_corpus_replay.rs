//! Replays the committed `fuzz/corpus/torch_ckpt` inputs through the function the fuzz
//! target calls (no nightly needed), so past findings stay fixed.

use std::path::Path;

#[test]
fn torch_ckpt_corpus_replays_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/torch_ckpt");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        imgseq_torch::fuzz_checkpoint_bytes(&bytes);
        n += 1;
    }
    assert!(n > 0, "{}: empty corpus", dir.display());
}
