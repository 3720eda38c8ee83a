//! transformers' image processors (their PIL backend), as the vision towers read pictures:
//! `CLIPImageProcessor`, `SiglipImageProcessor` and `BitImageProcessor` (DINOv2's). A model
//! folder's `preprocessor_config.json` is read where there is one (beside `config.json`); the
//! family's released settings apply where it is absent or silent.
//!
//! The processors' steps, each as imgseq runs it:
//! - **resize** with Pillow (`Image.resize`, the config's `resample`: 2 bilinear, 3 bicubic,
//!   4 box): `size: {"shortest_edge": S}` (or a bare number) resizes the shorter side to S and
//!   the longer to `int(S · longer / shorter)` (truncated, transformers'
//!   `get_resize_output_image_size`); `size: {"height": S, "width": S}` resizes the whole
//!   picture to S×S;
//! - **centre crop** (`do_center_crop`, `crop_size`): the top left at ⌊(side − crop) / 2⌋,
//!   black where the picture is smaller than the crop;
//! - **rescale** (`do_rescale`, `rescale_factor`): each byte times the factor in f64, then
//!   f32 (numpy's `astype(float64) * scale` then `astype(float32)`);
//! - **normalise** (`do_normalize`, `image_mean`, `image_std`): (x − mean) / std in f32.
//!
//! Both are [`Crop`] rules of the tower's input ([`Crop::ShortestEdgeCrop`],
//! [`Crop::ResizeSquare`]), so that files, arrays, the server and the dataset job prepare one
//! picture the same way; the tensor step is [`Pixels::value`].

use crate::tower::Pixels;
use imgseq_core::input::Crop;
use imgseq_core::resample::Filter;
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The processor config's file name.
pub const PROCESSOR_FILE: &str = "preprocessor_config.json";

/// OpenAI CLIP's normalisation (`OPENAI_CLIP_MEAN`, `OPENAI_CLIP_STD`).
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];
/// ImageNet's (`IMAGENET_DEFAULT_MEAN`, `IMAGENET_DEFAULT_STD`): DINOv2's released processors.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];
/// 0.5 per channel (`IMAGENET_STANDARD_MEAN`, `IMAGENET_STANDARD_STD`): SigLIP's.
pub const HALF: [f32; 3] = [0.5, 0.5, 0.5];

/// The resize step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// `{"shortest_edge": S}`: the shorter side to S, the aspect ratio kept.
    ShortestEdge(u32),
    /// `{"height": S, "width": S}`: the whole picture to S×S.
    Square(u32),
}

/// The settings of an image processor that decide the pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Processor {
    /// `None`: `do_resize` false.
    pub resize: Option<Resize>,
    /// The centre crop's side (`None`: `do_center_crop` false).
    pub crop: Option<u32>,
    pub filter: Filter,
    /// `rescale_factor` (1 when `do_rescale` is false).
    pub rescale: f64,
    /// `image_mean` and `image_std` (0 and 1 when `do_normalize` is false).
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Processor {
    /// `CLIPImageProcessor` as the released CLIP models configure it at `side` (224, 336):
    /// shortest edge and crop both `side`, bicubic, CLIP's mean and std.
    pub fn clip(side: u32) -> Self {
        Self {
            resize: Some(Resize::ShortestEdge(side)),
            crop: Some(side),
            filter: Filter::Bicubic,
            rescale: 1.0 / 255.0,
            mean: CLIP_MEAN,
            std: CLIP_STD,
        }
    }

    /// `SiglipImageProcessor` as the released SigLIP models configure it at `side`: the
    /// whole picture to `side`², bicubic, no crop, mean = std = 0.5.
    pub fn siglip(side: u32) -> Self {
        Self {
            resize: Some(Resize::Square(side)),
            crop: None,
            filter: Filter::Bicubic,
            rescale: 1.0 / 255.0,
            mean: HALF,
            std: HALF,
        }
    }

    /// `BitImageProcessor` as the released DINOv2 models configure it: shortest edge 256,
    /// centre crop 224, bicubic, ImageNet's mean and std; at another crop side, the shortest
    /// edge in the same proportion ([`Self::at_side`]).
    pub fn dinov2(crop: u32) -> Self {
        Self {
            resize: Some(Resize::ShortestEdge(256)),
            crop: Some(224),
            filter: Filter::Bicubic,
            rescale: 1.0 / 255.0,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        }
        .at_side(crop)
    }

    /// The processor giving `side`×`side` pictures: the crop at `side` with the shortest
    /// edge scaled by the same factor (rounded: 224/256 → 518/592), or the square resize at
    /// `side`; itself when it already gives that side.
    pub fn at_side(self, side: u32) -> Self {
        match (self.resize, self.crop) {
            (Some(Resize::ShortestEdge(r)), Some(c)) if c != side && c > 0 => Self {
                resize: Some(Resize::ShortestEdge(
                    (side as f64 * r as f64 / c as f64).round() as u32,
                )),
                crop: Some(side),
                ..self
            },
            (Some(Resize::Square(r)), crop) if r != side || crop.is_some_and(|c| c != side) => {
                Self {
                    resize: Some(Resize::Square(side)),
                    crop: crop.map(|_| side),
                    ..self
                }
            }
            _ => self,
        }
    }

    /// `self` with the fields of the processor config `v` (read from `path`, which errors
    /// name) in place of its own.
    pub fn with_config(mut self, v: &Value, path: &Path) -> Result<Self> {
        let bad = |m: String| Error::format(path, m);
        let flag = |k: &str| -> Result<Option<bool>> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(o) => Err(bad(format!("{k} is {o}, not true or false"))),
            }
        };
        if let Some(s) = v.get("size").filter(|s| !s.is_null()) {
            self.resize = Some(size_of(s, false).map_err(|m| bad(format!("size: {m}")))?);
        }
        if flag("do_resize")? == Some(false) {
            self.resize = None;
        }
        if let Some(s) = v.get("crop_size").filter(|s| !s.is_null()) {
            match size_of(s, true).map_err(|m| bad(format!("crop_size: {m}")))? {
                Resize::Square(c) => self.crop = Some(c),
                Resize::ShortestEdge(_) => unreachable!("crop sizes are squares"),
            }
        }
        match flag("do_center_crop")? {
            Some(false) => self.crop = None,
            Some(true) if self.crop.is_none() => {
                return Err(bad(
                    "do_center_crop is true but there is no crop_size".into()
                ))
            }
            _ => {}
        }
        if let Some(r) = v.get("resample").filter(|s| !s.is_null()) {
            self.filter = r.as_i64().and_then(Filter::from_pil).ok_or_else(|| {
                bad(format!(
                    "resample {r}: imgseq resizes with Pillow's box (4), bilinear (2) and \
                     bicubic (3)"
                ))
            })?;
        }
        if let Some(f) = v.get("rescale_factor").filter(|s| !s.is_null()) {
            self.rescale = f
                .as_f64()
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| bad(format!("rescale_factor {f} is not a positive number")))?;
        }
        if flag("do_rescale")? == Some(false) {
            self.rescale = 1.0;
        }
        if let Some(m) = v.get("image_mean").filter(|s| !s.is_null()) {
            self.mean = three(m).map_err(|e| bad(format!("image_mean: {e}")))?;
        }
        if let Some(s) = v.get("image_std").filter(|s| !s.is_null()) {
            self.std = three(s).map_err(|e| bad(format!("image_std: {e}")))?;
            if self.std.contains(&0.0) {
                return Err(bad("image_std has a zero".into()));
            }
        }
        if flag("do_normalize")? == Some(false) {
            (self.mean, self.std) = ([0.0; 3], [1.0; 3]);
        }
        Ok(self)
    }

    /// The tower's pictures: the output side, the crop rule, the tensor step. A processor
    /// whose pictures are not squares (no crop after a shortest-edge resize, no resize) or
    /// that crops a square resize to another side is refused; `path` names it.
    pub fn pixels(&self, path: &Path) -> Result<Pixels> {
        let bad = |m: &str| Err(Error::format(path, m.to_string()));
        let (size, crop) = match (self.resize, self.crop) {
            (None, _) => {
                return bad(
                    "do_resize is false: pictures would reach the tower at their own size \
                     (imgseq's towers read the processor's square)",
                )
            }
            (Some(Resize::ShortestEdge(r)), Some(c)) => (
                c,
                Crop::ShortestEdgeCrop {
                    resize: r,
                    filter: self.filter,
                },
            ),
            (Some(Resize::ShortestEdge(_)), None) => {
                return bad(
                    "a shortest_edge resize without a centre crop keeps each picture's aspect \
                     ratio (imgseq's towers read squares)",
                )
            }
            (Some(Resize::Square(r)), None) => (
                r,
                Crop::ResizeSquare {
                    filter: self.filter,
                },
            ),
            (Some(Resize::Square(r)), Some(c)) if c == r => (
                r,
                Crop::ResizeSquare {
                    filter: self.filter,
                },
            ),
            (Some(Resize::Square(r)), Some(c)) => {
                return Err(Error::format(
                    path,
                    format!("a {r}x{r} resize cropped to {c}x{c} is not a rule imgseq runs"),
                ))
            }
        };
        if size == 0 || crop.resize_side() == Some(0) {
            return bad("sizes must be positive");
        }
        Ok(Pixels {
            size,
            crop,
            rescale: self.rescale,
            mean: self.mean,
            std: self.std,
        })
    }
}

/// transformers' `get_size_dict`: a number is a shortest edge (`default_to_square` is false
/// for these processors) or, for a crop, a square; a dict has `shortest_edge` or `height` and
/// `width`; a list is `[height, width]`.
fn size_of(v: &Value, square_number: bool) -> std::result::Result<Resize, String> {
    let side = |x: &Value| -> std::result::Result<u32, String> {
        x.as_u64()
            .filter(|&n| n > 0 && n <= 1 << 16)
            .map(|n| n as u32)
            .ok_or_else(|| format!("{x} is not a positive side"))
    };
    let square = |h: &Value, w: &Value| -> std::result::Result<Resize, String> {
        let (h, w) = (side(h)?, side(w)?);
        if h != w {
            return Err(format!(
                "{h}x{w} is not a square (imgseq's towers read squares)"
            ));
        }
        Ok(Resize::Square(h))
    };
    match v {
        Value::Number(_) if square_number => Ok(Resize::Square(side(v)?)),
        Value::Number(_) => Ok(Resize::ShortestEdge(side(v)?)),
        Value::Array(a) if a.len() == 2 => square(&a[0], &a[1]),
        Value::Object(o) => {
            if o.contains_key("longest_edge") || o.contains_key("max_height") {
                return Err(format!("{v}: a longest edge is not a rule imgseq runs"));
            }
            match (o.get("shortest_edge"), o.get("height"), o.get("width")) {
                (Some(s), None, None) if !square_number => Ok(Resize::ShortestEdge(side(s)?)),
                (None, Some(h), Some(w)) => square(h, w),
                _ => Err(format!("{v}: expected shortest_edge, or height and width")),
            }
        }
        _ => Err(format!("{v}: expected a number or a size dict")),
    }
}

/// Three per-channel values (or one for all three).
fn three(v: &Value) -> std::result::Result<[f32; 3], String> {
    let num = |x: &Value| {
        x.as_f64()
            .filter(|f| f.is_finite())
            .map(|f| f as f32)
            .ok_or_else(|| format!("{x} is not a number"))
    };
    match v {
        Value::Array(a) if a.len() == 3 => Ok([num(&a[0])?, num(&a[1])?, num(&a[2])?]),
        Value::Number(_) => Ok([num(v)?; 3]),
        _ => Err(format!("{v}: expected 3 numbers (one per channel)")),
    }
}

/// A model folder's or weights file's `preprocessor_config.json` (in the folder; beside the
/// file).
pub fn processor_file(source: &Path) -> PathBuf {
    if source.is_dir() {
        source.join(PROCESSOR_FILE)
    } else {
        source.with_file_name(PROCESSOR_FILE)
    }
}

/// Refuses pictures of a side other than `side` (the tower's `image_size`) for the tower
/// (named `label`) at `source`.
pub fn check_side(p: &Pixels, side: u32, source: &Path, label: &str) -> imgseq_core::Result<()> {
    if p.size != side {
        return Err(imgseq_core::Error::format(
            processor_file(source),
            format!(
                "the processor gives {s}x{s} pictures; the {label} reads {side}x{side} (its \
                 image_size)",
                s = p.size
            ),
        ));
    }
    Ok(())
}

/// The pictures of the tower at `source`: `defaults` with the model's
/// `preprocessor_config.json` read over them where there is one, at `side` where asked
/// ([`Processor::at_side`]).
pub fn read_pixels(source: &Path, defaults: Processor, side: Option<u32>) -> Result<Pixels> {
    let path = processor_file(source);
    let p = if path.is_file() {
        let v = crate::tower::read_config(&path)?;
        if !v.is_object() {
            return Err(Error::format(&path, "not a JSON object"));
        }
        defaults.with_config(&v, &path)?
    } else {
        defaults
    };
    let p = match side {
        Some(s) => p.at_side(s),
        None => p,
    };
    p.pixels(&path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value, d: Processor) -> Result<Pixels> {
        let p = Path::new("preprocessor_config.json");
        d.with_config(&v, p)?.pixels(p)
    }

    #[test]
    fn released_configs_give_their_rules() {
        // openai/clip-vit-large-patch14-336 (the old number form).
        let clip = json!({"crop_size": 336, "do_center_crop": true, "do_normalize": true,
            "do_resize": true, "feature_extractor_type": "CLIPFeatureExtractor",
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 336});
        let p = read(clip, Processor::clip(224)).unwrap();
        assert_eq!(p.size, 336);
        assert_eq!(
            p.crop,
            Crop::ShortestEdgeCrop {
                resize: 336,
                filter: Filter::Bicubic
            }
        );
        assert_eq!(p.mean, CLIP_MEAN);
        // facebook/dinov2-base.
        let dino = json!({"crop_size": {"height": 224, "width": 224}, "do_center_crop": true,
            "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
            "resample": 3, "rescale_factor": 0.00392156862745098,
            "size": {"shortest_edge": 256}});
        let p = read(dino, Processor::dinov2(224)).unwrap();
        assert_eq!((p.size, p.crop.resize_side()), (224, Some(256)));
        assert_eq!(p, Processor::dinov2(224).pixels(Path::new("x")).unwrap());
        // google/siglip-so400m-patch14-384.
        let sig = json!({"do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 3,
            "rescale_factor": 0.00392156862745098, "size": {"height": 384, "width": 384}});
        let p = read(sig, Processor::siglip(224)).unwrap();
        assert_eq!(p.size, 384);
        assert_eq!(
            p.crop,
            Crop::ResizeSquare {
                filter: Filter::Bicubic
            }
        );
    }

    #[test]
    fn other_sides_keep_the_processors_proportion() {
        let p = Processor::dinov2(518).pixels(Path::new("x")).unwrap();
        assert_eq!((p.size, p.crop.resize_side()), (518, Some(592)));
        assert_eq!(Processor::siglip(384).at_side(224), Processor::siglip(224));
    }

    #[test]
    fn what_is_not_a_square_or_not_run_is_refused_naming_the_field() {
        let d = Processor::clip(224);
        for (v, want) in [
            (json!({"do_center_crop": false}), "shortest_edge"),
            (json!({"resample": 1}), "resample 1"),
            (json!({"size": {"height": 20, "width": 30}}), "20x30"),
            (json!({"do_resize": false}), "do_resize"),
            (json!({"image_mean": [0.5, 0.5]}), "image_mean"),
            (json!({"crop_size": "big"}), "crop_size"),
            (
                json!({"size": {"shortest_edge": 20, "longest_edge": 30}}),
                "longest",
            ),
        ] {
            let e = read(v.clone(), d).unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
            assert!(e.contains("preprocessor_config.json"), "{e}");
        }
    }

    #[test]
    fn without_rescale_or_normalize_the_values_are_the_bytes() {
        let p = read(
            json!({"do_rescale": false, "do_normalize": false}),
            Processor::clip(8),
        )
        .unwrap();
        assert_eq!(p.value(0, 200), 200.0);
    }
}
