//! Hostile checkpoints (issue 10): deep nesting, huge views over tiny storages, bombs, bare
//! pickles and files that are not regular. Each gives a one-line error naming the file; none
//! aborts, overflows the stack or allocates more than the file explains.

use candle_core::Device;
use imgseq_torch::{Checkpoint, FormatError, PickleError, TensorProblem, TorchError};
use std::io::{Cursor, Write};
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

/// A torch-style zip: `archive/data.pkl` plus storages `archive/data/<key>`.
fn ckpt(pickle: &[u8], storages: &[(&str, &[u8])], method: CompressionMethod) -> Vec<u8> {
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default()
        .compression_method(method)
        .large_file(true);
    z.start_file("archive/data.pkl", o).unwrap();
    z.write_all(pickle).unwrap();
    for (k, b) in storages {
        z.start_file(format!("archive/data/{k}"), o).unwrap();
        z.write_all(b).unwrap();
    }
    z.finish().unwrap().into_inner()
}

fn open_err(bytes: Vec<u8>) -> TorchError {
    match Checkpoint::from_bytes("bad.ckpt", bytes) {
        Ok(_) => panic!("opened"),
        Err(e) => e,
    }
}

fn state_dict_err(bytes: Vec<u8>) -> TorchError {
    let mut c = Checkpoint::from_bytes("bad.ckpt", bytes).unwrap();
    match c.state_dict(&Device::Cpu) {
        Ok(_) => panic!("read"),
        Err(e) => e,
    }
}

fn one_line(e: &TorchError) -> String {
    let t = e.to_string();
    assert!(t.starts_with("bad.ckpt: "), "{t}");
    assert_eq!(t.lines().count(), 1, "{t}");
    t
}

/// One `_rebuild_tensor_v2` entry: name, storage key, storage numel, size, stride.
type Entry<'a> = (&'a str, &'a str, u64, &'a [u64], &'a [u64]);

/// Pickle of `{name: _rebuild_tensor_v2(FloatStorage, 0, size, stride, False, {}), ...}`.
fn tensors_pickle(entries: &[Entry]) -> Vec<u8> {
    fn int(p: &mut Vec<u8>, v: u64) {
        p.extend_from_slice(&[0x8a, 8]); // LONG1, 8 bytes
        p.extend_from_slice(&v.to_le_bytes());
    }
    fn s(p: &mut Vec<u8>, t: &str) {
        p.push(b'X');
        p.extend_from_slice(&(t.len() as u32).to_le_bytes());
        p.extend_from_slice(t.as_bytes());
    }
    let mut p = b"\x80\x02}(".to_vec(); // PROTO 2, EMPTY_DICT, MARK
    for (name, key, numel, size, stride) in entries {
        s(&mut p, name);
        p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        s(&mut p, "storage");
        p.extend_from_slice(b"ctorch\nFloatStorage\n");
        s(&mut p, key);
        s(&mut p, "cpu");
        int(&mut p, *numel);
        p.extend_from_slice(b"tQ"); // TUPLE, BINPERSID
        int(&mut p, 0);
        for seq in [size, stride] {
            p.push(b'(');
            for &v in seq.iter() {
                int(&mut p, v);
            }
            p.push(b't');
        }
        p.extend_from_slice(b"\x89ccollections\nOrderedDict\n)RtR"); // False, {}, call
    }
    p.extend_from_slice(b"u."); // SETITEMS, STOP
    p
}

fn tensor_pickle(numel: u64, size: &[u64], stride: &[u64]) -> Vec<u8> {
    tensors_pickle(&[("w", "0", numel, size, stride)])
}

#[test]
fn pickle_nesting_200000_lists_is_an_error_not_a_stack_overflow() {
    let n = 200_000;
    for (open, close) in [(b'(', b'l'), (b'(', b't')] {
        let mut p = b"\x80\x02".to_vec();
        p.extend(std::iter::repeat_n(open, n));
        p.extend(std::iter::repeat_n(close, n));
        p.push(b'.');
        let e = open_err(ckpt(&p, &[], CompressionMethod::Stored));
        assert!(
            matches!(
                &e,
                TorchError::Format {
                    what: FormatError::Pickle(PickleError::TooDeep { .. }),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(one_line(&e).contains("more than 1000 levels deep"));
    }
    // TUPLE1 chains nest without any MARK.
    let mut p = b"\x80\x02N".to_vec();
    p.extend(std::iter::repeat_n(0x85u8, n));
    p.push(b'.');
    assert!(one_line(&open_err(ckpt(&p, &[], CompressionMethod::Stored))).contains("levels"));
}

#[test]
fn pickle_nesting_hidden_from_the_depth_count_drops_without_recursion() {
    // Each list is appended to its parent while still empty (parents fetched from the memo),
    // so every container records depth 2 while the structure nests 200,000 deep. Dropping
    // it must not recurse.
    let n: u32 = 200_000;
    let mut p = b"\x80\x02]r\x00\x00\x00\x00".to_vec(); // EMPTY_LIST, LONG_BINPUT 0
    for i in 1..n {
        p.push(b'j'); // LONG_BINGET parent
        p.extend_from_slice(&(i - 1).to_le_bytes());
        p.extend_from_slice(b"]r"); // child, LONG_BINPUT i
        p.extend_from_slice(&i.to_le_bytes());
        p.extend_from_slice(b"a0"); // APPEND, POP parent
    }
    p.push(b'.');
    let c = Checkpoint::from_bytes("bad.ckpt", ckpt(&p, &[], CompressionMethod::Stored));
    let e = match c {
        Ok(c) => c.tensor_infos().unwrap_err(),
        Err(e) => e,
    };
    assert!(one_line(&e).contains("list"), "{e}");
}

#[test]
fn stride_zero_view_of_3_gib_over_a_4_byte_storage_is_refused_before_allocating() {
    let p = tensor_pickle(1, &[3 << 30], &[0]);
    let bytes = ckpt(&p, &[("0", &[0u8; 4])], CompressionMethod::Stored);
    // The view itself is legal (it stays inside its storage), so listing works ...
    let c = Checkpoint::from_bytes("bad.ckpt", bytes.clone()).unwrap();
    assert_eq!(c.tensor_infos().unwrap()[0].2, vec![3usize << 30]);
    // ... but materialising it would take 12 GiB from a few hundred bytes.
    let e = state_dict_err(bytes);
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::TensorBudget { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(one_line(&e).contains("tensor `w`"));
}

#[test]
fn overflowing_tensor_sizes_are_errors_when_listing() {
    let p = tensor_pickle(1, &[1 << 32, 1 << 32, 2], &[0, 0, 0]);
    let c = Checkpoint::from_bytes(
        "bad.ckpt",
        ckpt(&p, &[("0", &[0; 4])], CompressionMethod::Stored),
    )
    .unwrap();
    let e = c.tensor_infos().unwrap_err();
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::BadTensor {
                    problem: TensorProblem::ImpossibleSize,
                    ..
                },
                ..
            }
        ),
        "{e:?}"
    );
    one_line(&e);
    // A storage whose byte count overflows, and a view outside its storage.
    let p = tensor_pickle(u64::MAX / 2, &[2], &[1]);
    one_line(&state_dict_err(ckpt(
        &p,
        &[("0", &[0; 8])],
        CompressionMethod::Stored,
    )));
    let p = tensor_pickle(2, &[4], &[1]);
    let c = Checkpoint::from_bytes(
        "bad.ckpt",
        ckpt(&p, &[("0", &[0; 8])], CompressionMethod::Stored),
    )
    .unwrap();
    one_line(&c.tensor_infos().unwrap_err());
}

#[test]
fn data_pkl_bomb_is_refused_before_inflating() {
    // 40 MiB of pickle compresses to ~40 KB; its declared size alone refuses it.
    let mut p = vec![b'N'; 40 << 20];
    p.push(b'.');
    let e = open_err(ckpt(&p, &[], CompressionMethod::Deflated));
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::EntryTooLarge { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(one_line(&e).contains("data.pkl"));
}

#[test]
fn compressed_storage_bomb_is_refused_before_inflating() {
    // Two storages of 150 MiB of zeros, deflated to ~1.5 MB each, behind one-element views:
    // the views are cheap, but the storages would inflate to 300 MiB from a 3 MB file.
    let numel: u64 = 150 << 18;
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(1))
        .large_file(true);
    z.start_file("archive/data.pkl", o).unwrap();
    z.write_all(&tensors_pickle(&[
        ("a", "0", numel, &[1], &[1]),
        ("b", "1", numel, &[1], &[1]),
    ]))
    .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for key in ["0", "1"] {
        z.start_file(format!("archive/data/{key}"), o).unwrap();
        for _ in 0..150 {
            z.write_all(&zeros).unwrap();
        }
    }
    let bytes = z.finish().unwrap().into_inner();
    assert!(bytes.len() < 8 << 20, "{}", bytes.len());
    let e = state_dict_err(bytes);
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::InflateBudget { .. },
                ..
            }
        ),
        "{e:?}"
    );
    one_line(&e);
}

#[test]
fn bare_pickle_is_named_as_such() {
    let e = open_err(b"\x80\x02}q\x00.".to_vec());
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::BarePickle,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(one_line(&e).contains("torch < 1.6"));
}

#[test]
fn devices_fifos_and_directories_are_not_read() {
    for p in ["/dev/zero", "/dev/null", "/tmp"] {
        let e = match Checkpoint::open(p) {
            Ok(_) => panic!("opened {p}"),
            Err(e) => e,
        };
        assert_eq!(e.to_string(), format!("{p}: not a regular file"));
    }
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("f.ckpt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("note: mkfifo unavailable; FIFO case skipped");
        return;
    }
    // Opening a FIFO for reading would block forever without a writer.
    let e = match Checkpoint::open(&fifo) {
        Ok(_) => panic!("opened a FIFO"),
        Err(e) => e,
    };
    assert!(e.to_string().ends_with("not a regular file"), "{e}");
}

fn fixture_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The hostile checkpoints of this file as committed fixtures (used by the CLI tests and as
/// fuzz seeds): `cargo test -p imgseq-torch --test hostile_checkpoints -- --ignored`.
#[test]
#[ignore]
fn write_hostile_fixtures() {
    let d = fixture_dir();
    std::fs::create_dir_all(&d).unwrap();
    let mut nested = b"\x80\x02".to_vec();
    nested.extend(std::iter::repeat_n(b'(', 200_000));
    nested.extend(std::iter::repeat_n(b'l', 200_000));
    nested.push(b'.');
    let files: [(&str, Vec<u8>); 4] = [
        (
            "nested_lists.ckpt",
            ckpt(&nested, &[], CompressionMethod::Deflated),
        ),
        (
            "stride0_3gib.ckpt",
            ckpt(
                &tensor_pickle(1, &[3 << 30], &[0]),
                &[("0", &[0; 4])],
                CompressionMethod::Stored,
            ),
        ),
        (
            "huge_shape.ckpt",
            ckpt(
                &tensor_pickle(1, &[1 << 32, 1 << 32, 2], &[0, 0, 0]),
                &[("0", &[0; 4])],
                CompressionMethod::Stored,
            ),
        ),
        ("bare_pickle.ckpt", b"\x80\x02}q\x00.".to_vec()),
    ];
    for (name, bytes) in files {
        std::fs::write(d.join(name), bytes).unwrap();
    }
}

#[test]
fn committed_hostile_fixtures_give_clean_errors() {
    let d = fixture_dir();
    for name in [
        "nested_lists.ckpt",
        "stride0_3gib.ckpt",
        "huge_shape.ckpt",
        "bare_pickle.ckpt",
    ] {
        let p = d.join(name);
        let e = match imgseq_torch::read_state_dict(&p, &Device::Cpu) {
            Ok(_) => panic!("{name} was read"),
            Err(e) => e.to_string(),
        };
        assert!(e.starts_with(&p.display().to_string()), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
