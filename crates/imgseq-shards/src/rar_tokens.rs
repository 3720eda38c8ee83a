//! Tokens in the layout RAR's and TiTok's training reads (bytedance/1d-tokenizer:
//! `scripts/pretokenization.py` writes it, `data/webdataset_reader.py`'s
//! `PretoeknizedDataSetJSONL` reads it): `pretokenized.jsonl`, one line per augmented view of
//! an image, `{"class_id": C, "tokens": [t0, t1, ...]}` with the view's codes flattened in
//! raster order.
//!
//! * The images and class indices are a torchvision `ImageFolder`'s ([`image_folder`]).
//! * Each picture is brought to the input by ADM's centre crop (the script's
//!   `center_crop_arr`, whatever the tokenizer's own crop), then two views — the crop and its
//!   horizontal flip — or, with `ten_crop`, the crop at ⌊size · 1.1⌋ and torchvision's
//!   `TenCrop(size)`: the augmentations of [`augmentations`], which are LlamaGen's.
//! * The lines of an image are consecutive (the script groups a batch's originals before their
//!   flips; `PretoeknizedDataSetJSONL` reads lines independently, so the order does not change
//!   what training sees).
//! * A killed export resumes: `pretokenized.progress.json` records the images done, the file's
//!   length at that point and the settings; a resumed run cuts the file back to that length
//!   and goes on, and refuses other settings.

use crate::llamagen_codes::{augmentations, image_folder, Options};
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::{image_io, progress, Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The output file's name.
pub const FILE: &str = "pretokenized.jsonl";
/// The resume record's name.
pub const PROGRESS: &str = "pretokenized.progress.json";
/// Images between two resume points.
const CHUNK: usize = 64;

/// What an export was started with and how far it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Progress {
    /// The tokenizer's description (family, config, weights hash), the input side and the
    /// augmentation.
    settings: serde_json::Value,
    images_done: usize,
    bytes: u64,
}

/// What an export did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub images: usize,
    /// Images encoded by this run (the rest were done before).
    pub written: usize,
    pub lines: usize,
    pub classes: usize,
    pub file: PathBuf,
}

/// Writes (or resumes) `out/pretokenized.jsonl` for the `ImageFolder` at `root`.
pub fn export(
    t: &dyn Tokenizer,
    root: &Path,
    out: &Path,
    ten_crop: bool,
    show_progress: bool,
) -> Result<Report> {
    let (images, classes) = image_folder(root)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let (file, record) = (out.join(FILE), out.join(PROGRESS));
    let mut description =
        serde_json::to_value(t.describe()).map_err(|e| Error::bad_data(e.to_string()))?;
    if let Some(m) = description.as_object_mut() {
        m.remove("weights");
    }
    let settings = serde_json::json!({
        "model": description,
        "weights": t.describe().weights.map(|w| w.sha256),
        "size": t.input().size,
        "ten_crop": ten_crop,
        "images": images.len(),
    });
    let mut done = resume_point(&file, &record, settings)?;
    // ADM's centre crop, as the script makes every picture.
    let input = InputSpec {
        crop: Crop::AdmCenterCrop,
        ..t.input()
    };
    let o = Options {
        ten_crop,
        ..Options::default()
    };
    let pb = if show_progress {
        progress::items(images.len(), "encoding")
    } else {
        indicatif::ProgressBar::hidden()
    };
    pb.inc(done.images_done as u64);
    let start = done.images_done;
    let mut lines = 0;
    for chunk in images[start..].chunks(CHUNK) {
        let mut text = String::new();
        for (path, label) in chunk {
            let img = image_io::load_rgb(path)?;
            let pics = augmentations(&input, path, &img, &o)?;
            let tokens = t
                .encode_pictures(&pics)
                .and_then(|e| e.into_tokens())
                .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
            let per = tokens.data.len() / pics.len().max(1);
            for view in tokens.data.chunks(per.max(1)) {
                let line = serde_json::json!({"class_id": label, "tokens": view});
                text.push_str(&line.to_string());
                text.push('\n');
                lines += 1;
            }
            pb.inc(1);
        }
        append(&file, text.as_bytes())?;
        done.images_done += chunk.len();
        done.bytes += text.len() as u64;
        write_json(&record, &done)?;
    }
    pb.finish_and_clear();
    Ok(Report {
        images: images.len(),
        written: images.len() - start,
        lines,
        classes: classes.len(),
        file,
    })
}

/// Where a run starts: a fresh record, or the folder's record (same settings only) with the
/// file cut back to the length it recorded.
fn resume_point(file: &Path, record: &Path, settings: serde_json::Value) -> Result<Progress> {
    let mut done = Progress {
        settings,
        images_done: 0,
        bytes: 0,
    };
    if record.exists() {
        let before: Progress = read_json(record, "an export's progress record")?;
        if before.settings != done.settings {
            return Err(Error::invalid(format!(
                "{}: an export with other settings (model, size, augmentation or image count) \
                 is there; use another folder",
                file.parent().unwrap_or(Path::new(".")).display()
            )));
        }
        done = before;
    } else if file.exists() {
        return Err(Error::invalid(format!(
            "{}: exists without its progress record ({PROGRESS}); remove it or use another \
             folder",
            file.display()
        )));
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(file)
        .map_err(|e| Error::io(file, e))?;
    f.set_len(done.bytes).map_err(|e| Error::io(file, e))?;
    Ok(done)
}

/// Appends `bytes` to `path` and waits for the disk.
fn append(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_data())
        .map_err(|e| Error::io(path, e))
}
