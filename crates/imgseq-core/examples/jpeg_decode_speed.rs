//! JPEG decode time per image: imgseq's decoder (libjpeg-turbo's, as Pillow decodes) against
//! the `image` crate's pure-Rust decoder it replaced, and how many bytes the two disagree on.
//!
//!     cargo run --release -p imgseq-core --example jpeg_decode_speed -- photo.jpg [repeats]
//!
//! Pillow's time on the same file: `python -m timeit -s "from PIL import Image"
//! "Image.open('photo.jpg').convert('RGB')"`.

use imgseq_core::image_io::decode_rgb_bytes;
use std::path::Path;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: jpeg_decode_speed FILE.jpg [repeats]");
        std::process::exit(2);
    };
    let repeats: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(50);
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {path}: {e}");
            std::process::exit(1);
        }
    };
    let name = Path::new(path);
    let time = |f: &dyn Fn() -> image::RgbImage| {
        let first = f();
        let t = Instant::now();
        for _ in 0..repeats {
            std::hint::black_box(f());
        }
        (first, t.elapsed().as_secs_f64() * 1e3 / repeats as f64)
    };
    let (ours, t_ours) = time(&|| decode_rgb_bytes(name, &bytes).expect("decodes"));
    let (theirs, t_theirs) = time(&|| {
        image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
            .expect("decodes")
            .to_rgb8()
    });
    let differ = ours
        .as_raw()
        .iter()
        .zip(theirs.as_raw())
        .filter(|(a, b)| a != b)
        .count();
    println!(
        "{}x{}: libjpeg-turbo (Pillow's pixels) {t_ours:.2} ms, image crate {t_theirs:.2} ms; \
         {differ} of {} bytes differ",
        ours.width(),
        ours.height(),
        ours.as_raw().len()
    );
}
