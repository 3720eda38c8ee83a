//! Image folders: [`list_images`] for VQGAN training / evaluation and [`image_folder`], a
//! classification dataset with one subfolder per class.

use super::Dataset;
use crate::image_io::{fit_dynamic, load_image, AsChw, Fit, IMAGE_EXTENSIONS};
use crate::{Error, Result};
use rayon::prelude::*;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn is_hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

fn is_image(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, out: &mut Vec<PathBuf>) -> Result<()> {
    // Follow symlinked folders, but never the same folder twice (no loops).
    let canon = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    if !seen.insert(canon) {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p = entry.path();
        if is_hidden(&p) {
            continue;
        }
        // `metadata` follows symlinks; dangling links are skipped.
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            walk(&p, seen, out)?;
        } else if meta.is_file() && is_image(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// All image files (png, jpg, jpeg, webp, bmp; any case) under `dir`, recursively, sorted.
/// Hidden files and folders (name starting with `.`) are skipped. Finding no image is an
/// error naming the folder.
pub fn list_images(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let dir = dir.as_ref();
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        return Err(Error::format(dir, "not a folder"));
    }
    let mut out = Vec::new();
    walk(dir, &mut HashSet::new(), &mut out)?;
    if out.is_empty() {
        return Err(Error::format(
            dir,
            format!(
                "no images found (extensions: {})",
                IMAGE_EXTENSIONS.join(", ")
            ),
        ));
    }
    out.sort();
    Ok(out)
}

/// The class subfolders of `dir` (non-hidden, sorted by name) and their names.
pub fn class_folders(dir: impl AsRef<Path>) -> Result<Vec<(String, PathBuf)>> {
    let dir = dir.as_ref();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut classes = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p = entry.path();
        if is_hidden(&p) || !p.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        classes.push((name, p));
    }
    classes.sort();
    if classes.is_empty() {
        return Err(Error::format(
            dir,
            "no class subfolders (expected one folder of images per class)",
        ));
    }
    if classes.len() > u16::MAX as usize {
        return Err(Error::format(
            dir,
            format!("too many classes ({})", classes.len()),
        ));
    }
    Ok(classes)
}

/// A classification dataset from `dir/<class>/**/<image>`: class ids follow the sorted
/// subfolder names, every image is loaded with `channels` (1 or 3) and brought to
/// `size`×`size` with `fit`. An empty class folder is an error naming it.
pub fn image_folder(
    dir: impl AsRef<Path>,
    size: u32,
    channels: usize,
    fit: Fit,
) -> Result<Dataset> {
    let dir = dir.as_ref();
    if channels != 1 && channels != 3 {
        return Err(Error::invalid(format!(
            "image folder: channels must be 1 or 3, not {channels}"
        )));
    }
    if size == 0 || size > 4096 {
        return Err(Error::invalid(format!(
            "image folder: size must be in 1..=4096, not {size}"
        )));
    }
    let classes = class_folders(dir)?;
    let mut items: Vec<(PathBuf, u16)> = Vec::new();
    for (id, (_, p)) in classes.iter().enumerate() {
        let files = list_images(p)?;
        items.extend(files.into_iter().map(|f| (f, id as u16)));
    }
    let per = channels * size as usize * size as usize;
    let decoded: Vec<Vec<u8>> = items
        .par_iter()
        .map(|(p, _)| -> Result<Vec<u8>> {
            let img = load_image(p, channels)?;
            let img = fit_dynamic(&img, size, fit)?;
            let (c, h, w, data) = img.to_chw_u8();
            debug_assert_eq!(c * h * w, per);
            Ok(data)
        })
        .collect::<Result<_>>()?;
    let mut images = Vec::with_capacity(items.len() * per);
    for d in decoded {
        images.extend_from_slice(&d);
    }
    let s = size as usize;
    Dataset::new(
        images,
        items.iter().map(|(_, l)| *l).collect(),
        (channels, s, s),
        classes.into_iter().map(|(n, _)| n).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image_io::save_png;
    use image::{Rgb, RgbImage};

    fn make_tree(root: &Path) {
        let save = |p: PathBuf, v: u8| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            save_png(p, &RgbImage::from_pixel(12, 8, Rgb([v, v / 2, 0]))).unwrap();
        };
        save(root.join("cat/b.png"), 10);
        save(root.join("cat/a.PNG"), 20);
        save(root.join("dog/deep/c.png"), 30);
        std::fs::write(root.join("dog/readme.txt"), "x").unwrap();
        save(root.join(".hidden/x.png"), 40);
        save(root.join("dog/.y.png"), 50);
    }

    #[test]
    fn lists_recursively_sorted() {
        let d = tempfile::tempdir().unwrap();
        make_tree(d.path());
        let l = list_images(d.path()).unwrap();
        let rel: Vec<String> = l
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(rel, vec!["cat/a.PNG", "cat/b.png", "dog/deep/c.png"]);
        let e = list_images(d.path().join("missing")).unwrap_err();
        assert!(matches!(e, Error::Io { .. }));
        std::fs::create_dir(d.path().join("empty")).unwrap();
        let e = list_images(d.path().join("empty")).unwrap_err().to_string();
        assert!(e.contains("empty") && e.contains("no images"), "{e}");
        #[cfg(unix)]
        {
            // A symlink loop does not hang.
            std::os::unix::fs::symlink(d.path(), d.path().join("cat/loop")).unwrap();
            assert_eq!(list_images(d.path()).unwrap().len(), 3);
        }
    }

    #[test]
    fn loads_class_folders() {
        let d = tempfile::tempdir().unwrap();
        make_tree(d.path());
        let ds = image_folder(d.path(), 4, 3, Fit::Exact).unwrap();
        assert_eq!(ds.class_names, vec!["cat", "dog"]);
        assert_eq!(ds.labels, vec![0, 0, 1]);
        assert_eq!((ds.n, ds.channels, ds.height, ds.width), (3, 3, 4, 4));
        // a.PNG (20) sorts before b.png (10)
        assert_eq!(ds.image(0)[0], 20);
        assert_eq!(ds.image(0)[16], 10);
        let g = image_folder(d.path(), 6, 1, Fit::CenterCrop).unwrap();
        assert_eq!(g.image_len(), 36);
        assert!(image_folder(d.path(), 6, 2, Fit::Exact).is_err());

        std::fs::create_dir(d.path().join("zebra")).unwrap();
        let e = image_folder(d.path(), 4, 3, Fit::Exact)
            .unwrap_err()
            .to_string();
        assert!(e.contains("zebra") && e.contains("no images"), "{e}");

        let empty = tempfile::tempdir().unwrap();
        let e = image_folder(empty.path(), 4, 3, Fit::Exact)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no class subfolders"), "{e}");

        std::fs::remove_dir(d.path().join("zebra")).unwrap();
        std::fs::write(d.path().join("dog/broken.png"), "not png").unwrap();
        let e = image_folder(d.path(), 4, 3, Fit::Exact)
            .unwrap_err()
            .to_string();
        assert!(e.contains("broken.png"), "{e}");
    }
}
