//! Codes in the layout LlamaGen's class-conditional training reads
//! (`autoregressive/train/extract_codes_c2i.py` writes it, `dataset/imagenet.py`'s
//! `CustomDataset` reads it): for the i-th image of a torchvision `ImageFolder`,
//! `{dataset}{size}_codes/{i}.npy` — int64 of shape (1, augmentations, tokens) — and
//! `{dataset}{size}_labels/{i}.npy` — int64 (1,), the image's class index.
//!
//! * The images and labels are `ImageFolder`'s: class folders in sorted order (index = rank),
//!   in each the files of an image extension, walked in sorted order.
//! * Two augmentations (default): the tokenizer's crop at `size` and its horizontal flip
//!   (`torch.flip(x, dims=[-1])`). With `ten_crop`: the crop at ⌊size · crop_range⌋, then
//!   torchvision's `TenCrop(size)`: top-left, top-right, bottom-left, bottom-right, centre
//!   (offset `round((side − size) / 2)`, half to even as Python's), then the same five of the
//!   mirrored picture.
//! * A killed export resumes: an image whose two files exist is skipped; files are written
//!   atomically.

use image::{imageops, RgbImage};
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::{image_io, npy, progress, Error, Result};
use std::path::{Path, PathBuf};

/// torchvision's `IMG_EXTENSIONS`.
const IMAGE_EXTENSIONS: [&str; 9] = [
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
];

/// How the codes are made.
#[derive(Debug, Clone)]
pub struct Options {
    /// The name before the size in the folder names (`imagenet` → `imagenet256_codes`).
    pub dataset: String,
    /// Ten crops of a larger centre crop instead of the crop and its flip.
    pub ten_crop: bool,
    /// The larger crop's side over the input side (LlamaGen's `--crop-range`, 1.1).
    pub crop_range: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            dataset: "imagenet".into(),
            ten_crop: false,
            crop_range: 1.1,
        }
    }
}

/// What an export did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub images: usize,
    pub written: usize,
    pub skipped: usize,
    pub classes: usize,
    pub codes_dir: PathBuf,
    pub labels_dir: PathBuf,
}

/// An image file and its class index.
pub type Labelled = (PathBuf, i64);

/// The images of an `ImageFolder` with their class indices, in its order, and the classes.
pub fn image_folder(root: &Path) -> Result<(Vec<Labelled>, Vec<String>)> {
    let mut classes: Vec<String> = std::fs::read_dir(root)
        .map_err(|e| Error::io(root, e))?
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    classes.sort();
    if classes.is_empty() {
        return Err(Error::invalid(format!(
            "{}: no class folders (an ImageFolder holds one folder per class)",
            root.display()
        )));
    }
    let mut out = Vec::new();
    for (idx, class) in classes.iter().enumerate() {
        // `sorted(os.walk(...))`: folder by folder in the order of their paths, each folder's
        // files sorted by name.
        let mut files = Vec::new();
        walk(&root.join(class), &mut files)?;
        files.sort();
        out.extend(
            files
                .into_iter()
                .map(|(dir, name)| (PathBuf::from(dir).join(name), idx as i64)),
        );
    }
    Ok((out, classes))
}

/// Every image file under `dir` as (its folder's path, its name), links followed.
fn walk(dir: &Path, out: &mut Vec<(String, String)>) -> Result<()> {
    let here = dir.to_string_lossy().into_owned();
    for e in std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            let name = e.file_name().to_string_lossy().into_owned();
            let lower = name.to_lowercase();
            if IMAGE_EXTENSIONS.iter().any(|x| lower.ends_with(x)) {
                out.push((here.clone(), name));
            }
        }
    }
    Ok(())
}

/// torchvision's `five_crop` of a square-or-not picture: tl, tr, bl, br, centre.
fn five_crop(img: &RgbImage, s: u32) -> [RgbImage; 5] {
    let (w, h) = img.dimensions();
    let crop = |x, y| imageops::crop_imm(img, x, y, s, s).to_image();
    // Python's round(): half to even.
    let mid = |d: u32| ((d - s) as f64 / 2.0).round_ties_even() as u32;
    [
        crop(0, 0),
        crop(w - s, 0),
        crop(0, h - s),
        crop(w - s, h - s),
        crop(mid(w), mid(h)),
    ]
}

/// The pictures of one image as the augmentation makes them, in LlamaGen's order.
pub fn augmentations(
    input: &InputSpec,
    name: &Path,
    img: &RgbImage,
    o: &Options,
) -> Result<Vec<RgbImage>> {
    if !o.ten_crop {
        let x = input.prepare(name, img, true)?;
        let flip = imageops::flip_horizontal(&x);
        return Ok(vec![x, flip]);
    }
    if !(o.crop_range >= 1.0 && o.crop_range <= 4.0) {
        return Err(Error::setting("crop_range", o.crop_range, "must be 1 to 4"));
    }
    let big = (input.size as f64 * o.crop_range) as u32;
    let wide = InputSpec {
        size: big,
        ..*input
    };
    let x = wide.prepare(name, img, true)?;
    let mut out: Vec<RgbImage> = five_crop(&x, input.size).into();
    out.extend(five_crop(&imageops::flip_horizontal(&x), input.size));
    Ok(out)
}

/// Writes the codes and labels of every image of the `ImageFolder` at `root` under `out`.
pub fn export(
    t: &dyn Tokenizer,
    root: &Path,
    out: &Path,
    o: &Options,
    show_progress: bool,
) -> Result<Report> {
    let (images, classes) = image_folder(root)?;
    let size = t.input().size;
    let codes_dir = out.join(format!("{}{size}_codes", o.dataset));
    let labels_dir = out.join(format!("{}{size}_labels", o.dataset));
    for d in [&codes_dir, &labels_dir] {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    let pb = if show_progress {
        progress::items(images.len(), "encoding")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let (mut written, mut skipped) = (0, 0);
    for (i, (path, label)) in images.iter().enumerate() {
        let (c, l) = (
            codes_dir.join(format!("{i}.npy")),
            labels_dir.join(format!("{i}.npy")),
        );
        if c.is_file() && l.is_file() {
            skipped += 1;
            pb.inc(1);
            continue;
        }
        let img = image_io::load_rgb(path)?;
        let pics = augmentations(&t.input(), path, &img, o)?;
        let tokens = t
            .encode_pictures(&pics)
            .and_then(|e| e.into_tokens())
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        let per = tokens.h * tokens.w;
        npy::write_npy_i64(&c, &[1, pics.len(), per], &tokens.data)?;
        npy::write_npy_i64(&l, &[1], &[*label])?;
        written += 1;
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(Report {
        images: images.len(),
        written,
        skipped,
        classes: classes.len(),
        codes_dir,
        labels_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_crop_centre_rounds_half_to_even_as_python() {
        let img = RgbImage::from_fn(281, 281, |x, y| image::Rgb([x as u8, y as u8, 0]));
        let c = five_crop(&img, 256);
        // (281 − 256) / 2 = 12.5 → 12 (Python's round).
        assert_eq!(c[4].get_pixel(0, 0), &image::Rgb([12, 12, 0]));
        assert_eq!(c[1].get_pixel(0, 0), &image::Rgb([25, 0, 0]));
        assert_eq!(c[2].get_pixel(0, 0), &image::Rgb([0, 25, 0]));
        let img = RgbImage::from_fn(283, 283, |x, y| image::Rgb([x as u8, y as u8, 0]));
        // 13.5 → 14.
        assert_eq!(
            five_crop(&img, 256)[4].get_pixel(0, 0),
            &image::Rgb([14, 14, 0])
        );
    }

    #[test]
    fn image_folder_order_is_torchvisions() {
        let d = tempfile::tempdir().unwrap();
        for (class, files) in [
            ("b", vec!["2.png", "10.png", "x.txt"]),
            ("a", vec!["z.JPG"]),
        ] {
            std::fs::create_dir_all(d.path().join(class).join("sub")).unwrap();
            for f in files {
                std::fs::write(d.path().join(class).join(f), b"").unwrap();
            }
        }
        std::fs::write(d.path().join("b/sub/0.png"), b"").unwrap();
        // A folder's own files come before its subfolders' (os.walk), whatever the names.
        std::fs::write(d.path().join("b/zz.png"), b"").unwrap();
        let (imgs, classes) = image_folder(d.path()).unwrap();
        assert_eq!(classes, vec!["a", "b"]);
        let names: Vec<(String, i64)> = imgs
            .iter()
            .map(|(p, l)| {
                let rel = p.strip_prefix(d.path()).unwrap();
                (rel.to_string_lossy().into_owned(), *l)
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("a/z.JPG".into(), 0),
                ("b/10.png".into(), 1),
                ("b/2.png".into(), 1),
                ("b/zz.png".into(), 1),
                ("b/sub/0.png".into(), 1)
            ]
        );
    }
}
