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
