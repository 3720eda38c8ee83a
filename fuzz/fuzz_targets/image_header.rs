#![no_main]
//! Fuzz target `image_header`: the bytes as an image file, through the checks the CLI makes
//! (format sniffing, dimensions, the size limits, then decoding under limits). The image
//! readers take a path, so the bytes go through one temp file per process. The corpus replay
//! test (crates/imgseq-core/tests/it/fuzz_corpus_replay.rs) runs the same steps.

use std::sync::OnceLock;

fn scratch() -> &'static std::path::PathBuf {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| std::env::temp_dir().join(format!("imgseq-fuzz-{}.img", std::process::id())))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let p = scratch();
    std::fs::write(p, data).expect("write scratch file");
    if let Ok((w, h)) = imgseq_core::image_io::image_dimensions(p) {
        let _ = imgseq_core::image_io::check_min_size(p, w, h, 16, false);
        let _ = imgseq_core::image_io::load_dynamic(p);
    }
});
