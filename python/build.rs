//! Puts the shipped default models into the Python package folder (`imgseq/weights/`), so that
//! maturin packs them into the wheel: the VQGAN (`weights/vqgan/{model.safetensors,
//! config.json}`) and the ViT (`weights/vit-fashion-mnist/{model.safetensors, config.json,
//! training.json}`). Only the files inference needs; the copies are git-ignored.

use std::path::Path;

const FILES: [(&str, &[&str]); 2] = [
    ("vqgan", &["model.safetensors", "config.json"]),
    (
        "vit-fashion-mnist",
        &["model.safetensors", "config.json", "training.json"],
    ),
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("../weights");
    let dst = root.join("imgseq/weights");
    for (model, files) in FILES {
        std::fs::create_dir_all(dst.join(model)).expect("create imgseq/weights");
        for f in files {
            let (from, to) = (src.join(model).join(f), dst.join(model).join(f));
            println!("cargo:rerun-if-changed={}", from.display());
            // A copy that is missing (deleted, fresh clone) makes cargo run this again.
            println!("cargo:rerun-if-changed={}", to.display());
            let same = std::fs::read(&to).ok() == std::fs::read(&from).ok();
            if !same {
                std::fs::copy(&from, &to)
                    .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", from.display(), to.display()));
            }
        }
    }
}
