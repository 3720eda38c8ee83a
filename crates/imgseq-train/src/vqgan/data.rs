//! The training images: decoded once at every training scale, then random crops drawn from
//! them for each step.

use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::{Error, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use std::path::PathBuf;

/// Loads every image as RGB, once per scale in `sides`: its shorter side resized to
/// `max(side, crop)` (aspect kept). Each file is decoded once for all its scales (decoding is
/// most of the time), files in parallel, with a progress bar. A broken file is an error naming
/// it.
///
/// The result is scale-major: all images at `sides[0]` in `paths` order, then all at
/// `sides[1]`, … (the order [`random_crops`] draws from, so a resumed run sees the same list).
pub fn load_training_images(
    paths: &[PathBuf],
    sides: &[usize],
    crop: usize,
) -> Result<Vec<RgbImage>> {
    let bar = imgseq_core::progress::items(paths.len(), "loading training images");
    let per_file: Vec<Vec<RgbImage>> = paths
        .par_iter()
        .map(|p| {
            let img = image_io::load_rgb(p)?;
            let scaled = sides
                .iter()
                .map(|&side| shorter_side_at_least(&img, side.max(crop)))
                .collect::<Result<Vec<_>>>()?;
            bar.inc(1);
            Ok(scaled)
        })
        .collect::<Result<_>>()?;
    bar.finish_and_clear();
    let mut out = Vec::with_capacity(paths.len() * sides.len());
    let mut scales: Vec<_> = per_file.into_iter().map(Vec::into_iter).collect();
    for _ in sides {
        out.extend(scales.iter_mut().filter_map(Iterator::next));
    }
    Ok(out)
}

/// `img` with its shorter side resized to `side` (aspect kept, each side at least `side`);
/// the image itself when it already is that size.
fn shorter_side_at_least(img: &RgbImage, side: usize) -> Result<RgbImage> {
    let side = side as f64;
    let (w, h) = img.dimensions();
    let s = side / w.min(h) as f64;
    let (nw, nh) = (
        ((w as f64 * s).round() as u32).max(side as u32),
        ((h as f64 * s).round() as u32).max(side as u32),
    );
    if (nw, nh) == (w, h) {
        Ok(img.clone())
    } else {
        image_io::resize_exact(img, nw, nh)
    }
}

pub use imgseq_core::data::idx::load_idx_rgb_centered as load_idx_training_images;

/// A batch of random `crop`×`crop` crops (random image, random offset, optional horizontal
/// flip, optional random order of the colour channels) drawn from a generator seeded with
/// `seed`, in [-1, 1]. `channels` 1: the crops' luma ([`image_io::luma`]; channel shuffling
/// then changes nothing), 3: RGB.
///
/// # Shapes
/// → (batch, channels, crop, crop)
pub fn random_crops(
    images: &[RgbImage],
    crop: usize,
    batch: usize,
    hflip: bool,
    shuffle_channels: bool,
    channels: usize,
    seed: u64,
) -> Result<Tensor> {
    if channels != 1 && channels != 3 {
        return Err(Error::setting(
            "in_channels",
            channels,
            "must be 1 (gray) or 3 (RGB) to train on images",
        ));
    }
    if images.is_empty() {
        return Err(Error::invalid("no training images"));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let plane = crop * crop;
    let mut out = vec![0f32; batch * channels * plane];
    for b in 0..batch {
        let img = &images[rng.random_range(0..images.len())];
        let (w, h) = (img.width() as usize, img.height() as usize);
        if w < crop || h < crop {
            return Err(Error::invalid(format!(
                "a training image is {w}x{h}, smaller than the crop {crop}"
            )));
        }
        let ox = rng.random_range(0..=w - crop);
        let oy = rng.random_range(0..=h - crop);
        let flip = hflip && rng.random::<bool>();
        // One of the 6 orders of (r, g, b): new colours from the same shapes.
        const PERMS: [[usize; 3]; 6] = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let perm = if shuffle_channels {
            PERMS[rng.random_range(0..6)]
        } else {
            PERMS[0]
        };
        let raw = img.as_raw();
        let dst = &mut out[b * channels * plane..(b + 1) * channels * plane];
        for y in 0..crop {
            let row = (oy + y) * w;
            for x in 0..crop {
                let sx = if flip { crop - 1 - x } else { x };
                let px = &raw[(row + ox + sx) * 3..(row + ox + sx) * 3 + 3];
                if channels == 1 {
                    dst[y * crop + x] = PixelRange::MinusOneOne.to_f32(image_io::luma(px));
                    continue;
                }
                for c in 0..3 {
                    dst[perm[c] * plane + y * crop + x] = PixelRange::MinusOneOne.to_f32(px[c]);
                }
            }
        }
    }
    Ok(Tensor::from_vec(
        out,
        (batch, channels, crop, crop),
        &Device::Cpu,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use imgseq_vqgan::data::{as_gray, to_input};

    #[test]
    fn training_images_are_scale_major_with_the_shorter_side_at_each_scale() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.png"), d.path().join("b.png"));
        RgbImage::from_fn(60, 40, |x, y| image::Rgb([x as u8 * 4, y as u8 * 6, 9]))
            .save(&a)
            .unwrap();
        RgbImage::from_fn(30, 50, |x, y| image::Rgb([7, x as u8 * 8, y as u8 * 5]))
            .save(&b)
            .unwrap();
        let paths = vec![a.clone(), b.clone()];
        // Sides below the crop are raised to it; a side equal to the image's keeps it.
        let imgs = load_training_images(&paths, &[20, 40, 10], 16).unwrap();
        let dims: Vec<_> = imgs.iter().map(|i| i.dimensions()).collect();
        assert_eq!(
            dims,
            vec![(30, 20), (20, 33), (60, 40), (40, 67), (24, 16), (16, 27)]
        );
        assert_eq!(imgs[2], image_io::load_rgb(&a).unwrap());
        // Each scale is the one-file resize of the decoded image.
        let want = image_io::resize_exact(&image_io::load_rgb(&b).unwrap(), 20, 33).unwrap();
        assert_eq!(imgs[1], want);
        let e = load_training_images(&[d.path().join("gone.png")], &[16], 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gone.png"), "{e}");
    }

    #[test]
    fn shuffled_channels_are_a_permutation_of_the_crop() {
        let img = RgbImage::from_fn(40, 30, |x, y| {
            image::Rgb([(x * 6) as u8, (y * 8) as u8, ((x + y) * 3) as u8])
        });
        let planes = |t: &Tensor| -> Vec<Vec<f32>> {
            (0..3)
                .map(|c| {
                    t.get(0)
                        .unwrap()
                        .get(c)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap()
                })
                .collect()
        };
        let mut moved = 0;
        for seed in 0..12 {
            let one = std::slice::from_ref(&img);
            let plain = planes(&random_crops(one, 16, 1, true, false, 3, seed).unwrap());
            let shuf = planes(&random_crops(one, 16, 1, true, true, 3, seed).unwrap());
            let mut a = plain.clone();
            let mut b = shuf.clone();
            a.sort_by(|x, y| x.partial_cmp(y).unwrap());
            b.sort_by(|x, y| x.partial_cmp(y).unwrap());
            assert_eq!(a, b, "seed {seed}: not the same planes");
            moved += usize::from(plain != shuf);
        }
        assert!(moved >= 6, "only {moved} of 12 crops were recoloured");
    }

    #[test]
    fn gray_crops_and_inputs_are_the_luma_of_the_rgb_ones() {
        let img = RgbImage::from_fn(20, 20, |x, y| {
            image::Rgb([(x * 12) as u8, (y * 11) as u8, ((x * y) % 256) as u8])
        });
        let one = std::slice::from_ref(&img);
        let rgb = random_crops(one, 16, 2, true, false, 3, 5).unwrap();
        let gray = random_crops(one, 16, 2, true, false, 1, 5).unwrap();
        assert_eq!(gray.dims(), &[2, 1, 16, 16]);
        // Same crops (same seed), each pixel the 601 luma of the RGB crop's pixel.
        let (r, g) = (
            rgb.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            gray.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        let back = |v: f32| PixelRange::MinusOneOne.to_u8(v);
        for b in 0..2 {
            for i in 0..256 {
                let px = [0, 1, 2].map(|c| back(r[b * 768 + c * 256 + i]));
                assert_eq!(
                    back(g[b * 256 + i]),
                    image_io::luma(&px),
                    "crop {b} pixel {i}"
                );
            }
        }
        assert!(random_crops(one, 16, 1, false, false, 2, 0).is_err());

        let x = to_input(one, 1).unwrap();
        assert_eq!(x.dims(), &[1, 1, 20, 20]);
        let gray_img = as_gray(&img);
        assert!(gray_img
            .pixels()
            .all(|p| p.0[0] == p.0[1] && p.0[1] == p.0[2]));
        let want = image_io::to_tensor_chw(
            &image_io::rgb_to_gray(&img),
            PixelRange::MinusOneOne,
            &Device::Cpu,
        )
        .unwrap();
        let diff = (x.squeeze(0).unwrap() - want).unwrap().abs().unwrap();
        assert_eq!(diff.max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        // A gray picture (r = g = b) keeps its values.
        assert_eq!(as_gray(&gray_img), gray_img);
        assert_eq!(to_input(one, 3).unwrap().dims(), &[1, 3, 20, 20]);
        assert!(to_input(one, 4).is_err());
    }

    #[test]
    fn crops_are_deterministic_and_in_range() {
        let img = RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8 * 6, y as u8 * 8, 0]));
        let a = random_crops(std::slice::from_ref(&img), 16, 3, true, true, 3, 7).unwrap();
        let b = random_crops(std::slice::from_ref(&img), 16, 3, true, true, 3, 7).unwrap();
        assert_eq!(a.dims(), &[3, 3, 16, 16]);
        let (va, vb) = (
            a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(va, vb);
        assert!(va.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert!(random_crops(std::slice::from_ref(&img), 32, 1, false, false, 3, 0).is_err());
    }
}
