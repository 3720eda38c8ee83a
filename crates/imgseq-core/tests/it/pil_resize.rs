//! `resize_bilinear_pil` against Pillow itself (fixture from scripts/make_resize_fixtures.py):
//! byte for byte, including shrinking (antialiased), RGB and the shapes Pillow 13 resizes
//! vertically first — what makes the shipped ViT's `preprocessor_config.json` reproduce
//! imgseq's inputs in HF's pipeline.

use imgseq_core::resample::resize_bilinear_pil;

#[test]
fn bilinear_resize_equals_pillow_byte_for_byte() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pil_resize.json"
    );
    let fx: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    let as_vec = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    };
    for case in cases {
        let s = as_vec(&case["shape"]);
        let o = as_vec(&case["out"]);
        let src: Vec<u8> = as_vec(&case["src"]).into_iter().map(|v| v as u8).collect();
        let want: Vec<u8> = as_vec(&case["expected"])
            .into_iter()
            .map(|v| v as u8)
            .collect();
        let got = resize_bilinear_pil(&src, (s[0], s[1], s[2]), (o[0], o[1])).unwrap();
        let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            diff,
            0,
            "{s:?} -> {o:?}: {diff} of {} bytes differ from Pillow",
            want.len()
        );
    }
}
