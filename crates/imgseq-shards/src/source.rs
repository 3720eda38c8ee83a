//! What to tokenize: the ordered index of samples of one or more sources.
//!
//! A source is an image folder (every image below it, sorted), a `.txt` list (one path a line,
//! `#` comments, relative to the list's folder), or a WebDataset `.tar` shard as img2dataset
//! writes them: members grouped by key (the path up to the first `.` of the file name), an
//! image `KEY.jpg|jpeg|png|webp|bmp` and optional `KEY.json`, `KEY.txt` (caption) and
//! `KEY.cls` (label), which are kept as metadata, or a Parquet file of images
//! ([`crate::parquet_source`]: img2dataset's and Hugging Face `datasets`' layouts). Listing reads
//! names and sizes only; the bytes are read when a sample is processed, so memory does not grow
//! with the images. An IDX image
//! file (`train-images-idx3-ubyte[.gz]`, MNIST layout) is the exception: it is read whole and
//! every image held in memory as a small gray PNG, with its label from the label file beside it.

use crate::parquet_source;
pub use crate::sample::{
    key_problem, Location, Sample, SampleRef, MAX_IMAGE_BYTES, MAX_KEY_BYTES, MAX_META_BYTES,
};
use imgseq_core::data::folder::list_images;
use imgseq_core::data::idx::{
    is_idx_images_name, read_idx_images, read_idx_labels, sibling_labels, FASHION_MNIST_CLASSES,
};
use imgseq_core::{Error, Result};
use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

const IMAGE_EXTS: [&str; 5] = ["jpg", "jpeg", "png", "webp", "bmp"];
const META_EXTS: [&str; 3] = ["json", "txt", "cls"];

/// Bytes of memory one listed sample takes in the index and the job's bookkeeping (its key,
/// source, location and metadata entries, and the key set): an IDX of 3M samples listed at
/// 3.3 GB peak RSS.
pub const SAMPLE_INDEX_BYTES: u128 = 1152;

/// Fails when an index of `n` samples ([`SAMPLE_INDEX_BYTES`] each) does not fit the budget.
fn check_index_size(n: usize) -> Result<()> {
    imgseq_core::budget::check_memory(n as u128 * SAMPLE_INDEX_BYTES)
        .map_err(|e| Error::invalid(format!("an index of {n} samples {e}")))
}

/// How sources are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// The column of Parquet sources that holds the images (found by itself when `None`).
    pub image_column: Option<String>,
}

/// The index of all samples of `sources`, in order (sources in the order given; a folder
/// sorted; a list in its order; a tar in member order; a Parquet file in row order). Keys are
/// made unique and checked by the key rule ([`unique_keys`]).
pub fn index(sources: &[PathBuf]) -> Result<Vec<SampleRef>> {
    index_with(sources, &SourceOptions::default())
}

/// [`index`] with options.
pub fn index_with(sources: &[PathBuf], o: &SourceOptions) -> Result<Vec<SampleRef>> {
    if let Some(col) = &o.image_column {
        if !sources.iter().any(|s| has_ext(s, "parquet")) {
            return Err(Error::setting(
                "image_column",
                col,
                "names a column of Parquet sources, but no source is a .parquet file",
            ));
        }
    }
    let mut all = Vec::new();
    for src in sources {
        let meta = std::fs::metadata(src).map_err(|e| Error::io(src, e))?;
        if meta.is_dir() {
            for p in list_images(src)? {
                let rel = p.strip_prefix(src).unwrap_or(&p).to_path_buf();
                all.push(file_sample(&rel, p));
            }
        } else if has_ext(src, "tar") {
            all.extend(tar_samples(src)?);
        } else if has_ext(src, "parquet") {
            all.extend(parquet_source::samples(src, o.image_column.as_deref())?);
        } else if is_idx_images_name(src) {
            all.extend(idx_samples(src)?);
        } else if has_ext(src, "txt") {
            all.extend(list_samples(src)?);
        } else if IMAGE_EXTS.iter().any(|e| has_ext(src, e)) {
            let name = PathBuf::from(src.file_name().unwrap_or_default());
            all.push(file_sample(&name, src.clone()));
        } else {
            return Err(Error::format(
                src,
                "not a folder, a .txt list of images, a WebDataset .tar, a .parquet file of \
                 images, an IDX image file (…-images-idx3-ubyte[.gz]) or an image",
            ));
        }
    }
    check_index_size(all.len())?;
    unique_keys(&mut all);
    Ok(all)
}

/// The key rule: a key that cannot name an output ([`key_problem`]) makes its sample a listed
/// skip; a repeated key is renamed `KEY_2`, `KEY_3`, ..., the first number that no other key
/// of the index has (so that `a, b, a, a_2` gives `a, b, a_3, a_2`): every key is unique.
fn unique_keys(all: &mut [SampleRef]) {
    let mut used: HashSet<String> = all.iter().map(|s| s.key.clone()).collect();
    let mut first: HashSet<String> = HashSet::new();
    for s in all.iter_mut() {
        if let Some(why) = key_problem(&s.key) {
            s.image = Location::Refused(why);
            s.meta.clear();
        }
        if first.insert(s.key.clone()) {
            continue;
        }
        let mut n = 2usize;
        while used.contains(&format!("{}_{n}", s.key)) {
            n += 1;
        }
        s.key = format!("{}_{n}", s.key);
        used.insert(s.key.clone());
        first.insert(s.key.clone());
    }
}

fn has_ext(p: &Path, ext: &str) -> bool {
    p.extension()
        .is_some_and(|e| e.to_string_lossy().eq_ignore_ascii_case(ext))
}

/// A WebDataset key for a file: its relative path without the extension, no `..` or root,
/// and no `.` left in the file name (WebDataset splits a member name at the first dot).
fn key_of(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().replace('.', "_")),
            _ => None,
        })
        .collect();
    let k = parts.join("/");
    if k.is_empty() {
        "image".into()
    } else {
        k
    }
}

fn file_sample(rel: &Path, path: PathBuf) -> SampleRef {
    SampleRef {
        key: key_of(rel),
        source: path.display().to_string(),
        image: Location::File(path),
        meta: Vec::new(),
    }
}

/// The samples of an IDX image file (MNIST layout) and its label file beside it
/// ([`sibling_labels`], required): keys `PREFIX-NNNNN` (the file name up to `-images`, e.g.
/// `train-00042`, the index zero-padded to 5 digits or more), the image re-encoded as a gray
/// PNG at its stored size, the label as `label` and, when the file's path names Fashion-MNIST
/// (contains `fashion`), its class name as `class`.
fn idx_samples(images: &Path) -> Result<Vec<SampleRef>> {
    let (n, h, w, pixels) = read_idx_images(images)?;
    // The header's count, before a sample is built (3 KB of gzip can hold 3M 1x1 images).
    check_index_size(n).map_err(|e| Error::format(images, e.to_string()))?;
    let labels_path = sibling_labels(images)?;
    let labels = read_idx_labels(&labels_path)?;
    if labels.len() != n {
        return Err(Error::format(
            &labels_path,
            format!(
                "{} labels for the {n} images of {}",
                labels.len(),
                images.display()
            ),
        ));
    }
    let fashion = images
        .to_string_lossy()
        .to_ascii_lowercase()
        .contains("fashion");
    if let Some(&bad) = labels
        .iter()
        .find(|&&l| fashion && l as usize >= FASHION_MNIST_CLASSES.len())
    {
        return Err(Error::format(
            &labels_path,
            format!("label {bad} is not a Fashion-MNIST class (0-9)"),
        ));
    }
    let name = images.file_name().unwrap_or_default().to_string_lossy();
    let prefix = name
        .split("-images")
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("idx")
        .replace('.', "_");
    let digits = n.saturating_sub(1).to_string().len().max(5);
    let inline = |b: Vec<u8>| Location::Inline(Arc::new(b));
    (0..n)
        .map(|i| {
            let img = image::GrayImage::from_raw(
                w as u32,
                h as u32,
                pixels[i * h * w..(i + 1) * h * w].to_vec(),
            )
            .expect("buffer size matches");
            let mut png = Vec::new();
            img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                .map_err(|e| Error::format(images, format!("image {i}: {e}")))?;
            let mut meta = vec![(
                "cls".to_string(),
                inline(labels[i].to_string().into_bytes()),
            )];
            if fashion {
                let class = FASHION_MNIST_CLASSES[labels[i] as usize];
                meta.push(("class".to_string(), inline(class.as_bytes().to_vec())));
            }
            Ok(SampleRef {
                key: format!("{prefix}-{i:0digits$}"),
                source: format!("{}:{i}", images.display()),
                image: inline(png),
                meta,
            })
        })
        .collect()
}

fn list_samples(list: &Path) -> Result<Vec<SampleRef>> {
    let bytes = Location::File(list.to_path_buf()).read(1 << 30)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::format(list, "not a text list of image paths (not UTF-8 text)"))?;
    Ok(imgseq_core::data::list::parse(list, &text)?
        .into_iter()
        .map(|e| file_sample(&e.written, e.path))
        .collect())
}

/// (key, extension) of a WebDataset member name: the key is the path up to the first `.` of
/// the file name.
pub fn split_member(name: &str) -> Option<(&str, &str)> {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_start..].find('.')? + base_start;
    Some((&name[..dot], &name[dot + 1..]))
}

/// The consecutive members of one key while a tar is listed.
struct Group {
    key: String,
    /// (member name, where) of the first image member.
    image: Option<(String, Location)>,
    meta: Vec<(String, Location)>,
}

fn tar_samples(tar_path: &Path) -> Result<Vec<SampleRef>> {
    let (f, _) = imgseq_core::fsutil::open_regular_file(tar_path)?;
    let mut ar = tar::Archive::new(f);
    let bad = |e: std::io::Error| Error::format(tar_path, format!("not a readable tar: {e}"));
    let mut out: Vec<SampleRef> = Vec::new();
    let mut current: Option<Group> = None;
    let flush = |cur: Option<Group>, out: &mut Vec<SampleRef>| {
        if let Some(Group {
            key,
            image: Some((name, image)),
            meta,
        }) = cur
        {
            out.push(SampleRef {
                key,
                source: format!("{}:{name}", tar_path.display()),
                image,
                meta,
            });
        }
    };
    for entry in ar.entries_with_seek().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some((key, ext)) = split_member(&name) else {
            continue;
        };
        let ext = ext.to_ascii_lowercase();
        let loc = Location::TarMember {
            tar: tar_path.to_path_buf(),
            offset: entry.raw_file_position(),
            size: entry.size(),
        };
        if current.as_ref().is_none_or(|c| c.key != key) {
            flush(current.take(), &mut out);
            current = Some(Group {
                key: key.to_string(),
                image: None,
                meta: Vec::new(),
            });
        }
        let cur = current.as_mut().expect("set above");
        if IMAGE_EXTS.contains(&ext.as_str()) && cur.image.is_none() {
            cur.image = Some((name.clone(), loc));
        } else if META_EXTS.contains(&ext.as_str()) {
            cur.meta.push((ext, loc));
        }
    }
    flush(current.take(), &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webdataset_member_names_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(
            split_member("a/b.c/000012.tokens.npy"),
            Some(("a/b.c/000012", "tokens.npy"))
        );
        assert_eq!(split_member("x.jpg"), Some(("x", "jpg")));
        assert_eq!(split_member("noext"), None);
    }

    fn idx_file(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn idx_files_are_a_source_with_labels_and_class_names() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("Fashion-MNIST");
        std::fs::create_dir_all(&dir).unwrap();
        let images = dir.join("train-images-idx3-ubyte");
        let pixels: Vec<u8> = (0..3 * 2 * 3).map(|i| i as u8 * 10).collect();
        std::fs::write(&images, idx_file(0x803, &[3, 2, 3], &pixels)).unwrap();
        let labels = dir.join("train-labels-idx1-ubyte");
        std::fs::write(&labels, idx_file(0x801, &[3], &[9, 0, 4])).unwrap();

        let idx = index(std::slice::from_ref(&images)).unwrap();
        let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["train-00000", "train-00001", "train-00002"]);
        let s = idx[2].load().unwrap();
        assert_eq!(s.source, format!("{}:2", images.display()));
        assert_eq!(s.meta["label"], 4);
        assert_eq!(s.meta["class"], "Coat");
        let img = image::load_from_memory(&s.image).unwrap();
        let img = img.as_luma8().expect("stored as a gray PNG");
        assert_eq!(img.dimensions(), (3, 2));
        assert_eq!(img.as_raw(), &pixels[12..18]);
        assert_eq!(idx[0].load().unwrap().meta["class"], "Ankle boot");

        // Outside a Fashion-MNIST folder the label is kept, without a class name.
        let other = d.path().join("digits");
        std::fs::create_dir_all(&other).unwrap();
        let images2 = other.join("t10k-images-idx3-ubyte");
        std::fs::copy(&images, &images2).unwrap();
        std::fs::write(
            other.join("t10k-labels-idx1-ubyte"),
            idx_file(0x801, &[3], &[9, 0, 4]),
        )
        .unwrap();
        let s = index(std::slice::from_ref(&images2)).unwrap()[1]
            .load()
            .unwrap();
        assert_eq!(
            (s.key.as_str(), &s.meta["label"]),
            ("t10k-00001", &serde_json::json!(0))
        );
        assert!(!s.meta.contains_key("class"));

        // Labels that do not fit the images are an error naming the label file.
        std::fs::write(&labels, idx_file(0x801, &[2], &[9, 0])).unwrap();
        let e = index(std::slice::from_ref(&images))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train-labels-idx1-ubyte: 2 labels for the 3 images"),
            "{e}"
        );
        std::fs::write(&labels, idx_file(0x801, &[3], &[9, 0, 10])).unwrap();
        let e = index(std::slice::from_ref(&images))
            .unwrap_err()
            .to_string();
        assert!(e.contains("label 10 is not a Fashion-MNIST class"), "{e}");
        std::fs::remove_file(&labels).unwrap();
        let e = index(std::slice::from_ref(&images))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train-labels-idx1-ubyte[.gz] is not beside it"),
            "{e}"
        );
    }

    #[test]
    fn keys_keep_the_relative_path_without_dots() {
        assert_eq!(key_of(Path::new("cats/a.b.jpg")), "cats/a_b");
        assert_eq!(key_of(Path::new("../x/./y.png")), "x/y");
    }
}
