//! Replays the committed `fuzz/corpus/gpt_config` inputs through the function the fuzz target
//! calls (`GptConfig::fuzz_bytes`), without nightly.

use imgseq_gpt::config::GptConfig;
use std::path::Path;

#[test]
fn gpt_config_corpus_replays_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/gpt_config");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        GptConfig::fuzz_bytes(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 0, "{}: empty corpus", dir.display());
}

#[test]
fn gpt_configs_with_absurd_widths_or_grids_are_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/gpt_config");
    let load = |name: &str| {
        GptConfig::load(dir.join(name))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    load("fashion.json").unwrap();
    let e = load("wide.json").unwrap_err();
    assert!(
        e.contains("parameters") && e.contains("IMGSEQ_MAX_MEMORY_GB"),
        "{e}"
    );
    let e = load("grid-wraps.json").unwrap_err();
    assert!(e.contains("imgseq_grid 4294967296x4294967296"), "{e}");
    let e = load("codes-max.json").unwrap_err();
    assert!(e.contains("imgseq_n_codes"), "{e}");
}
