//! Parquet files of images as a source, in the two layouts datasets ship in:
//!
//! * **img2dataset** (`--output_format parquet`): one row per sample, the image bytes in a
//!   binary column named after their format (`jpg`, `png`, `webp`; null for a failed download)
//!   beside `key`, `url`, `caption`, `status`, `error_message`, `width`, `height`,
//!   `original_width`, `original_height`, ... (the columns of its per-sample `KEY.json`).
//! * **Hugging Face `datasets`**: an image feature stored as a struct `{bytes: binary, path:
//!   string}` (usually the column `image`), beside e.g. an integer `label`.
//!
//! The image column is found by itself (a binary column, or a struct with a binary `bytes`
//! field; by name `image`, `img`, `jpg`, `jpeg`, `png`, `webp`, `bmp` when there are several) or
//! named by the caller. Every other scalar column becomes the sample's metadata: all of them
//! under `json` (as img2dataset's `KEY.json`), and the first of `caption`/`txt`/`text` as the
//! caption and of `label`/`cls` as the label, as a WebDataset's `KEY.txt` / `KEY.cls`. Keys come
//! from the `key` column when there is one, else `STEM-ROW` (the file name and row index).
//!
//! Listing reads the footer and the `key` column only; image bytes and metadata are read when a
//! sample is processed ([`crate::parquet_in`]).

use crate::parquet_in::{is_text, Cell, ParquetCell, ParquetFile, ParquetRow};
use crate::sample::{Location, SampleRef};
use imgseq_core::{Error, Result};
use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::schema::types::Type as SchemaType;
use std::path::Path;
use std::sync::Arc;

/// Image column names, in the order they are preferred when a file has several candidates.
const IMAGE_NAMES: [&str; 7] = ["image", "img", "jpg", "jpeg", "png", "webp", "bmp"];
const CAPTION_NAMES: [&str; 3] = ["caption", "txt", "text"];
const LABEL_NAMES: [&str; 2] = ["label", "cls"];

/// A top-level field that can hold images: a binary column, or a struct with a binary
/// `bytes` field (Hugging Face's image feature). Returns the leaf of the bytes.
fn image_leaf(file: &ParquetFile, field: &SchemaType) -> Option<usize> {
    let schema = file.meta.file_metadata().schema_descr();
    let info = field.get_basic_info();
    if info.has_repetition() && info.repetition() == Repetition::REPEATED {
        return None;
    }
    let want: Vec<&str> = if field.is_primitive() {
        vec![field.name()]
    } else {
        let is_list_or_map = matches!(
            info.logical_type_ref(),
            Some(LogicalType::List | LogicalType::Map)
        ) || matches!(
            info.converted_type(),
            ConvertedType::LIST | ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE
        );
        if is_list_or_map {
            return None;
        }
        vec![field.name(), "bytes"]
    };
    schema.columns().iter().position(|c| {
        let parts: Vec<&str> = c.path().parts().iter().map(String::as_str).collect();
        parts == want
            && c.physical_type() == PhysicalType::BYTE_ARRAY
            && !is_text(c)
            && c.max_rep_level() == 0
    })
}

/// The leaf holding the images: the column `named`, or the only / best-named candidate.
fn find_image(file: &ParquetFile, named: Option<&str>) -> Result<usize> {
    let root = file.meta.file_metadata().schema_descr().root_schema();
    let fields = root.get_fields();
    let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
    if let Some(name) = named {
        let Some(field) = fields.iter().find(|f| f.name() == name) else {
            return Err(Error::format(
                &file.path,
                format!(
                    "no column {name} (--image-column); its columns: {}",
                    names.join(", ")
                ),
            ));
        };
        return image_leaf(file, field).ok_or_else(|| {
            Error::format(
                &file.path,
                format!(
                    "column {name} holds no image bytes (it is neither binary nor a struct \
                     with a binary `bytes` field)"
                ),
            )
        });
    }
    let candidates: Vec<(&str, usize)> = fields
        .iter()
        .filter_map(|f| image_leaf(file, f).map(|l| (f.name(), l)))
        .collect();
    match candidates.as_slice() {
        [(_, leaf)] => Ok(*leaf),
        [] => Err(Error::format(
            &file.path,
            format!(
                "no image column (a binary column, or a struct with a binary `bytes` field) \
                 among {}; img2dataset's metadata .parquet beside a .tar has no images: give \
                 the .tar",
                names.join(", ")
            ),
        )),
        several => IMAGE_NAMES
            .iter()
            .find_map(|want| several.iter().find(|(n, _)| n.eq_ignore_ascii_case(want)))
            .map(|(_, l)| *l)
            .ok_or_else(|| {
                let c: Vec<&str> = several.iter().map(|(n, _)| *n).collect();
                Error::format(
                    &file.path,
                    format!(
                        "several columns could hold the images ({}): name one with --image-column",
                        c.join(", ")
                    ),
                )
            }),
    }
}

/// A key from a `key` column value: no empty, `.` or `..` parts, no dots (WebDataset splits
/// member names at the first dot).
fn clean_key(s: &str) -> Option<String> {
    let parts: Vec<String> = s
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .map(|p| p.replace('.', "_"))
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The samples of a Parquet file, one per row, in row order.
pub fn samples(path: &Path, image_column: Option<&str>) -> Result<Vec<SampleRef>> {
    let file = ParquetFile::open(path)?;
    file.check_codecs()?;
    let image = find_image(&file, image_column)?;
    let schema = file.meta.file_metadata().schema_descr();
    // The image struct's other fields (Hugging Face's `path`) are metadata like any other.
    let top_leaf = |name: &str| {
        schema.columns().iter().position(|c| {
            c.path().parts().len() == 1
                && c.path().parts()[0] == name
                && c.max_rep_level() == 0
                && (is_text(c)
                    || matches!(c.physical_type(), PhysicalType::INT32 | PhysicalType::INT64))
        })
    };
    let fields: Vec<(String, usize)> = schema
        .columns()
        .iter()
        .enumerate()
        .filter(|(leaf, c)| {
            *leaf != image
                && c.max_rep_level() == 0
                && match c.physical_type() {
                    PhysicalType::BYTE_ARRAY => is_text(c),
                    PhysicalType::FIXED_LEN_BYTE_ARRAY | PhysicalType::INT96 => false,
                    _ => true,
                }
        })
        .map(|(leaf, c)| (c.path().parts().join("."), leaf))
        .collect();
    let fields = Arc::new(fields);
    let caption = CAPTION_NAMES
        .iter()
        .find_map(|n| top_leaf(n).filter(|&l| is_text(schema.column(l).as_ref())));
    let label = LABEL_NAMES.iter().find_map(|n| top_leaf(n));
    let why_null = top_leaf("error_message");
    let keys: Option<Vec<Cell>> = match top_leaf("key") {
        // A key longer than the key rule allows is a listed skip: 1 KiB of it is enough.
        Some(leaf) => Some(file.whole_column(leaf, 1024)?),
        None => None,
    };
    let n = file.num_rows();
    let stem = path
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .replace('.', "_");
    let digits = n.saturating_sub(1).to_string().len().max(5);
    let file = Arc::new(file);
    let mut out = Vec::with_capacity(n);
    for group in 0..file.meta.num_row_groups() {
        let start = file.group_start[group];
        for row in start..start + file.meta.row_group(group).num_rows() as usize {
            let cell = |leaf| ParquetCell {
                file: file.clone(),
                group,
                row,
                leaf,
                why_null: None,
            };
            let key = keys
                .as_ref()
                .and_then(|k| match &k[row] {
                    Cell::Null => None,
                    c => clean_key(&String::from_utf8_lossy(&c.clone().into_bytes())),
                })
                .unwrap_or_else(|| format!("{stem}-{row:0digits$}"));
            let mut meta = vec![(
                "json".to_string(),
                Location::ParquetRow(ParquetRow {
                    file: file.clone(),
                    group,
                    row,
                    fields: fields.clone(),
                }),
            )];
            if let Some(l) = caption {
                meta.push(("txt".to_string(), Location::ParquetCell(cell(l))));
            }
            if let Some(l) = label {
                meta.push(("cls".to_string(), Location::ParquetCell(cell(l))));
            }
            out.push(SampleRef {
                key,
                source: format!("{}:{row}", path.display()),
                image: Location::ParquetCell(ParquetCell {
                    why_null,
                    ..cell(image)
                }),
                meta,
            });
        }
    }
    Ok(out)
}
