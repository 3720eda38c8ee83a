//! Image lists: a text file of image paths, one a line (blank lines and `#` comments
//! skipped, relative paths taken from the list's folder). The one parser of the dataset job's
//! sources and of the VQGAN's training and eval data.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// One path of a list: as written, and resolved against the list's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub written: PathBuf,
    pub path: PathBuf,
}

/// The entries of the text of the list `list`; an empty list is an error naming it.
pub fn parse(list: &Path, text: &str) -> Result<Vec<Entry>> {
    let base = list.parent().unwrap_or(Path::new("."));
    let out: Vec<Entry> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let written = PathBuf::from(l);
            let path = if written.is_absolute() {
                written.clone()
            } else {
                base.join(&written)
            };
            Entry { written, path }
        })
        .collect();
    if out.is_empty() {
        return Err(Error::format(list, "the image list is empty"));
    }
    Ok(out)
}

/// The image files of `data`: a folder (all images below it, sorted), a `.txt` list (one
/// path a line, `#` comments; relative paths are taken from the list's folder), or one image
/// file (a set of one).
pub fn image_set(data: &Path) -> Result<Vec<PathBuf>> {
    if data.is_dir() {
        return crate::data::folder::list_images(data);
    }
    let text = match read_list(data)? {
        ListFile::Image => return Ok(vec![data.to_path_buf()]),
        ListFile::Text(text) => text,
    };
    Ok(parse(data, &text)?.into_iter().map(|e| e.path).collect())
}

/// Largest image list read, in bytes.
const MAX_LIST_BYTES: u64 = 64 << 20;

/// What a file given as image data turned out to be.
enum ListFile {
    /// An image file (its header is one): the set of that one image.
    Image,
    /// The text of an image list.
    Text(String),
}

/// The text of an image list or the news that the file is one image, refusing anything else
/// (binary data, a device that never ends, a list too large) with an error naming the file.
fn read_list(data: &Path) -> Result<ListFile> {
    use std::io::Read;
    let not_a_list = |why: &str| {
        Error::format(
            data,
            format!(
                "not a text list of image paths ({why}; give an image, a folder or a .txt list)"
            ),
        )
    };
    let meta = std::fs::metadata(data).map_err(|e| Error::io(data, e))?;
    if !meta.is_file() {
        return Err(not_a_list("not a regular file"));
    }
    let f = std::fs::File::open(data).map_err(|e| Error::io(data, e))?;
    let mut bytes = Vec::new();
    f.take(MAX_LIST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(data, e))?;
    if image::guess_format(&bytes).is_ok() {
        return Ok(ListFile::Image);
    }
    if bytes.len() as u64 > MAX_LIST_BYTES {
        return Err(not_a_list(&format!(
            "larger than {} MiB",
            MAX_LIST_BYTES >> 20
        )));
    }
    String::from_utf8(bytes)
        .map(ListFile::Text)
        .map_err(|_| not_a_list("not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blanks_and_relative_paths() {
        let e = parse(Path::new("d/list.txt"), "# x\n\n a.png \n/abs/b.png\n").unwrap();
        assert_eq!(e[0].written, PathBuf::from("a.png"));
        assert_eq!(e[0].path, PathBuf::from("d/a.png"));
        assert_eq!(e[1].path, PathBuf::from("/abs/b.png"));
        let err = parse(Path::new("l.txt"), "# only\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "l.txt: the image list is empty");
    }
}
