//! `.npy` reading and writing: NumPy's exact header layout, round trips, other dtypes and
//! one-line errors for bad files (moved out of `src/npy.rs` to keep it short).

use imgseq_core::npy::*;
use imgseq_core::Error;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn header_matches_numpy_byte_for_byte() {
    // Produced by numpy 2.4 `np.save` for the same dtype and shape.
    let cases: [(&str, &[usize], &str); 4] = [
        (
            "<i8",
            &[2, 3],
            "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }",
        ),
        (
            "<f4",
            &[5],
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
        ),
        (
            "<i4",
            &[],
            "{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
        ),
        (
            "<i8",
            &[0, 576],
            "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 576), }",
        ),
    ];
    for (descr, shape, dict) in cases {
        let h = npy_header(descr, shape);
        assert_eq!(h.len(), 128, "{descr} {shape:?}");
        assert_eq!(&h[..10], b"\x93NUMPY\x01\x00v\x00");
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with(dict), "{text:?}");
        assert!(text.ends_with('\n'));
        assert!(text[dict.len()..text.len() - 1].bytes().all(|b| b == b' '));
    }
    // A long shape crosses into the next 64-byte block.
    let h = npy_header("<i8", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert_eq!(h.len() % 64, 0);
    assert_eq!(*h.last().unwrap(), b'\n');
}

#[test]
fn file_is_exactly_what_numpy_writes() {
    // `np.save(f, np.arange(6, dtype=np.int64).reshape(2, 3))`
    let d = tmp();
    let p = d.path().join("t.npy");
    write_npy_i64(&p, &[2, 3], &[0, 1, 2, 3, 4, 5]).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(bytes.len(), 176);
    let mut expected = b"\x93NUMPY\x01\x00v\x00".to_vec();
    let dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }";
    expected.extend_from_slice(dict.as_bytes());
    expected.extend(std::iter::repeat_n(b' ', 117 - dict.len()));
    expected.push(b'\n');
    for i in 0..6i64 {
        expected.extend_from_slice(&i.to_le_bytes());
    }
    assert_eq!(bytes, expected);
}

#[test]
fn round_trips() {
    let d = tmp();
    let p = d.path().join("a.npy");
    let v: Vec<i64> = (0..24).map(|i| i * 1000 - 7).collect();
    write_npy_i64(&p, &[2, 3, 4], &v).unwrap();
    let a = read_npy(&p).unwrap();
    assert_eq!(a.shape, vec![2, 3, 4]);
    assert_eq!(a.descr, "<i8");
    assert_eq!(a.as_i64().unwrap(), &v[..]);

    write_npy_i32(&p, &[3], &[-1, 0, i32::MAX]).unwrap();
    assert_eq!(
        read_npy_i64(&p).unwrap(),
        (vec![3], vec![-1, 0, i32::MAX as i64])
    );

    write_npy_u16(&p, &[2, 2], &[0, 1, 1023, u16::MAX]).unwrap();
    assert_eq!(read_npy_i64(&p).unwrap().1, vec![0, 1, 1023, 65535]);

    let f = [0.5f32, -1.25, f32::MAX, 1e-30];
    write_npy_f32(&p, &[4, 1], &f).unwrap();
    let (s, g) = read_npy_f32(&p).unwrap();
    assert_eq!(s, vec![4, 1]);
    assert_eq!(g, f);
    assert!(read_npy_i64(&p)
        .unwrap_err()
        .to_string()
        .contains("expected an integer"));

    write_npy_i64(&p, &[], &[42]).unwrap();
    let a = read_npy(&p).unwrap();
    assert!(a.shape.is_empty());
    assert_eq!(a.as_i64().unwrap(), &[42]);

    write_npy_i64(&p, &[0, 576], &[]).unwrap();
    let a = read_npy(&p).unwrap();
    assert_eq!(a.shape, vec![0, 576]);
    assert!(a.is_empty());
}

fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&[1, 0]);
    v.extend_from_slice(&(header.len() as u16).to_le_bytes());
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn reads_other_dtypes() {
    let h =
        |d: &str, s: &str| format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {s}, }}\n");
    let a = parse_npy("x.npy", &file(&h("|u1", "(3,)"), &[0, 128, 255])).unwrap();
    assert_eq!(a.as_i64().unwrap(), &[0, 128, 255]);
    let a = parse_npy("x.npy", &file(&h("|i1", "(2,)"), &[0xff, 5])).unwrap();
    assert_eq!(a.as_i64().unwrap(), &[-1, 5]);
    let a = parse_npy("x.npy", &file(&h("<i2", "(1,)"), &(-300i16).to_le_bytes())).unwrap();
    assert_eq!(a.as_i64().unwrap(), &[-300]);
    let a = parse_npy("x.npy", &file(&h("<u4", "(1,)"), &u32::MAX.to_le_bytes())).unwrap();
    assert_eq!(a.as_i64().unwrap(), &[u32::MAX as i64]);
    let a = parse_npy("x.npy", &file(&h("<u8", "(1,)"), &7u64.to_le_bytes())).unwrap();
    assert_eq!(a.as_i64().unwrap(), &[7]);
    let e = parse_npy("x.npy", &file(&h("<u8", "(1,)"), &u64::MAX.to_le_bytes())).unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    let a = parse_npy("x.npy", &file(&h("<f8", "(1,)"), &0.25f64.to_le_bytes())).unwrap();
    assert_eq!(a.as_f32().unwrap(), &[0.25]);
    // Key order and spacing as other writers may produce them.
    let a = parse_npy(
        "x.npy",
        &file(
            "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<i4\"}\n",
            &[1, 0, 0, 0, 2, 0, 0, 0],
        ),
    )
    .unwrap();
    assert_eq!(a.as_i64().unwrap(), &[1, 2]);
}

#[test]
fn rejects_bad_files_with_one_line_errors() {
    let h = |d: &str, f: &str, s: &str| {
        format!("{{'descr': '{d}', 'fortran_order': {f}, 'shape': {s}, }}\n")
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"PK\x03\x04 not numpy".to_vec(), "bad magic"),
        (b"".to_vec(), "bad magic"),
        (file(&h("<i8", "True", "(1,)"), &[0; 8]), "Fortran"),
        (file(&h(">i8", "False", "(1,)"), &[0; 8]), "big-endian"),
        (file(&h("|O", "False", "(1,)"), &[0; 8]), "object"),
        (
            file(&h("<c8", "False", "(1,)"), &[0; 8]),
            "unsupported dtype",
        ),
        (
            file(&h("<i8", "False", "(2, 3)"), &[0; 40]),
            "truncated data",
        ),
        (
            file(&h("<i8", "False", "(1,)"), &[0; 9]),
            "unexpected bytes",
        ),
        (
            file(
                &h("<i8", "False", "(99999999999, 99999999999, 99999999999)"),
                &[],
            ),
            "too large",
        ),
        (
            file(
                "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }\n",
                &[0; 4],
            ),
            "structured",
        ),
        (
            file("{'descr': '<i4', 'shape': (1,), }\n", &[0; 4]),
            "missing 'fortran_order'",
        ),
        (
            file(
                "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)",
                &[],
            ),
            "bad .npy header",
        ),
        (
            file(
                "{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }",
                &[],
            ),
            "bad shape",
        ),
    ];
    for (bytes, want) in cases {
        let e = parse_npy("tok.npy", &bytes).unwrap_err().to_string();
        assert!(e.starts_with("tok.npy: "), "{e}");
        assert!(e.contains(want), "want {want:?} in {e:?}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // Header length pointing past the end of the file.
    let mut b = file("{}", &[]);
    b[8] = 200;
    assert!(parse_npy("t.npy", &b)
        .unwrap_err()
        .to_string()
        .contains("truncated .npy header"));
    // Truncated file on disk.
    let d = tmp();
    let p = d.path().join("t.npy");
    write_npy_i64(&p, &[10], &[1; 10]).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
    assert!(read_npy(&p).unwrap_err().to_string().contains("truncated"));
    assert!(matches!(
        read_npy(d.path().join("missing.npy")),
        Err(Error::Io { .. })
    ));
}

#[test]
fn shape_mismatch_is_an_error_and_writes_nothing() {
    let d = tmp();
    let p = d.path().join("t.npy");
    let e = write_npy_i64(&p, &[2, 2], &[1, 2, 3]).unwrap_err();
    assert!(e.to_string().contains("does not match 3 elements"), "{e}");
    assert!(!p.exists());
}

/// Checks that numpy itself loads what we write (needs python3 with numpy).
#[test]
#[ignore]
fn numpy_loads_our_files() {
    let d = tmp();
    let p = d.path().join("t.npy");
    write_npy_i64(&p, &[2, 3], &[0, 1, 2, 3, 4, -5]).unwrap();
    let q = d.path().join("f.npy");
    write_npy_f32(&q, &[2], &[0.5, -2.0]).unwrap();
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import numpy as np, io\n\
             a = np.load({p:?}); assert a.dtype == np.int64 and a.shape == (2, 3) and a[1, 2] == -5\n\
             b = np.load({q:?}); assert b.dtype == np.float32 and list(b) == [0.5, -2.0]\n\
             buf = io.BytesIO(); np.save(buf, a); assert buf.getvalue() == open({p:?}, 'rb').read()\n\
             print('ok')",
            p = p.to_str().unwrap(),
            q = q.to_str().unwrap()
        ))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
