//! Labelled image grids: one row per class, its name drawn at the left with a built-in 5×7
//! bitmap font (upper case, digits, a little punctuation; other characters draw as `?`).

use image::{Rgb, RgbImage};
use imgseq_core::{Error, Result};

/// Glyph rows (5 bits each, most significant bit at the left) of a 5×7 font.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        ' ' => [0; 7],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0x1F],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        ':' => [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '=' => [0, 0, 0x1F, 0, 0x1F, 0, 0],
        '|' => [0x04; 7],
        _ => [0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04],
    }
}

/// Width in pixels of `text` drawn at `scale` (6 columns per character: 5 + 1 space).
pub fn text_width(text: &str, scale: u32) -> u32 {
    text.chars().count() as u32 * 6 * scale
}

/// Draws `text` with its top-left corner at (x, y), each font pixel a `scale`×`scale`
/// square; pixels outside the image are skipped.
pub fn draw_text(img: &mut RgbImage, x: u32, y: u32, text: &str, scale: u32, color: Rgb<u8>) {
    for (i, c) in text.chars().enumerate() {
        let g = glyph(c);
        let x0 = x + i as u32 * 6 * scale;
        for (r, bits) in g.iter().enumerate() {
            for col in 0..5u32 {
                if bits & (0x10 >> col) == 0 {
                    continue;
                }
                for dy in 0..scale {
                    for dx in 0..scale {
                        let (px, py) = (x0 + col * scale + dx, y + r as u32 * scale + dy);
                        if px < img.width() && py < img.height() {
                            img.put_pixel(px, py, color);
                        }
                    }
                }
            }
        }
    }
}

/// Nearest-neighbour enlargement by an integer factor.
pub fn upscale(img: &RgbImage, k: u32) -> RgbImage {
    if k <= 1 {
        return img.clone();
    }
    RgbImage::from_fn(img.width() * k, img.height() * k, |x, y| {
        *img.get_pixel(x / k, y / k)
    })
}

/// Largest enlargement of a grid's pictures.
pub const MAX_SCALE: u32 = 64;

/// Refuses a `scale` outside 1..=[`MAX_SCALE`].
pub fn check_scale(scale: u32) -> Result<()> {
    if scale == 0 || scale > MAX_SCALE {
        return Err(Error::setting(
            "scale",
            scale,
            format!("must be between 1 and {MAX_SCALE}"),
        ));
    }
    Ok(())
}

/// The (width, height) of a grid of `rows` rows of at most `cols` pictures of `pw`×`ph`
/// pixels at `scale`, with labels up to `label_chars` characters; refused (before anything is
/// drawn) when a side passes 65,535 pixels or the picture does not fit the memory budget.
pub fn check_grid(
    rows: usize,
    cols: usize,
    (pw, ph): (u32, u32),
    label_chars: usize,
    scale: u32,
) -> Result<()> {
    check_scale(scale)?;
    let s = u64::from(scale);
    let gap = 2 * s;
    let label = (label_chars as u64).saturating_mul(6 * s) + 2 * gap;
    let w = label.saturating_add((cols as u64).saturating_mul(u64::from(pw) * s + gap));
    let h = gap.saturating_add((rows as u64).saturating_mul(u64::from(ph) * s + gap));
    if w > 65_535 || h > 65_535 {
        return Err(Error::invalid(format!(
            "a grid of {rows} row(s) of {cols} picture(s) of {pw}x{ph} at scale {scale} would be \
             {w}x{h} pixels, more than 65535 a side"
        )));
    }
    imgseq_core::budget::check_memory(u128::from(w * h) * 3)
        .map_err(|e| Error::resource_limit(format!("a {w}x{h} grid {e}")))
}

/// Rows of pictures, each row labelled at its left: `rows[i] = (label, pictures)`. Pictures
/// are enlarged `scale`× (labels drawn at `scale` too), with a 2·scale pixel gap; the
/// background is white, labels black. The size is checked first ([`check_grid`]).
pub fn labelled_grid(rows: &[(String, Vec<RgbImage>)], scale: u32) -> Result<RgbImage> {
    let cols = rows.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
    let side = rows
        .iter()
        .flat_map(|(_, p)| p.iter())
        .map(|p| (p.width(), p.height()))
        .fold((0, 0), |(a, b), (w, h)| (a.max(w), b.max(h)));
    let chars = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    check_grid(rows.len(), cols, side, chars, scale)?;
    let gap = 2 * scale;
    let (cw, ch) = (side.0 * scale, side.1 * scale);
    let label_w = rows
        .iter()
        .map(|(l, _)| text_width(l, scale))
        .max()
        .unwrap_or(0)
        + if rows.iter().any(|(l, _)| !l.is_empty()) {
            2 * gap
        } else {
            gap
        };
    let cols = rows.iter().map(|(_, p)| p.len()).max().unwrap_or(0) as u32;
    let width = label_w + cols * (cw + gap);
    let height = gap + rows.len() as u32 * (ch + gap);
    let mut img = RgbImage::from_pixel(width.max(1), height.max(1), Rgb([255, 255, 255]));
    for (i, (label, pics)) in rows.iter().enumerate() {
        let y = gap + i as u32 * (ch + gap);
        let ty = y + ch.saturating_sub(7 * scale) / 2;
        draw_text(&mut img, gap, ty, label, scale, Rgb([0, 0, 0]));
        for (j, p) in pics.iter().enumerate() {
            let big = upscale(p, scale);
            let x = label_w + j as u32 * (cw + gap);
            image::imageops::replace(&mut img, &big, x as i64, y as i64);
        }
    }
    Ok(img)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyphs_draw_where_their_bits_are() {
        let mut img = RgbImage::from_pixel(12, 7, Rgb([255, 255, 255]));
        draw_text(&mut img, 0, 0, "T1", 1, Rgb([0, 0, 0]));
        // T: full top row, then the centre column.
        assert!((0..5).all(|x| img.get_pixel(x, 0)[0] == 0));
        assert_eq!(img.get_pixel(2, 6)[0], 0);
        assert_eq!(img.get_pixel(0, 6)[0], 255);
        // 1 starts at column 6: its foot is 3 wide.
        assert!((7..10).all(|x| img.get_pixel(x, 6)[0] == 0));
        assert_eq!(text_width("T1", 2), 24);
    }

    #[test]
    fn grid_places_rows_and_labels() {
        let p = RgbImage::from_pixel(4, 4, Rgb([10, 20, 30]));
        let rows = vec![
            ("A".to_string(), vec![p.clone(), p.clone()]),
            ("BAG".to_string(), vec![p.clone()]),
        ];
        let g = labelled_grid(&rows, 2).unwrap();
        // label column: 3 chars × 12 px + 2 gaps of 4; 2 columns of (8 + 4).
        assert_eq!(g.width(), 36 + 8 + 2 * 12);
        assert_eq!(g.height(), 4 + 2 * 12);
        assert_eq!(*g.get_pixel(44, 4), Rgb([10, 20, 30]));
        assert_eq!(*g.get_pixel(44 + 12, 4), Rgb([10, 20, 30]));
        assert_eq!(*g.get_pixel(44, 16), Rgb([10, 20, 30]));
        // Row 2 has one picture: its second cell stays white.
        assert_eq!(*g.get_pixel(44 + 12, 16), Rgb([255, 255, 255]));
        // The label is drawn in black inside the label column.
        assert!((0..44).any(|x| (4..16).any(|y| g.get_pixel(x, y)[0] == 0)));
    }
}
