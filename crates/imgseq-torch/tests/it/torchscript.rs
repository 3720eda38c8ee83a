//! TorchScript archives (`torch.jit.save`): the weights of their module tree read as the flat
//! `state_dict` names, in f32, f16 and bf16 storages (`scripts/make_cosmos_fixtures.py`), and
//! hostile or damaged archives refused in one line naming the file.

use candle_core::{DType, Device, Tensor};
use imgseq_torch::{Checkpoint, FormatError, PickleError, StorageDType, TorchError};
use std::collections::HashMap;
use std::io::{Cursor, Write};
use std::path::PathBuf;
use zip::write::SimpleFileOptions;

fn fx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/cosmos")
        .join(name)
}

fn read(name: &str) -> HashMap<String, (StorageDType, Tensor)> {
    imgseq_torch::read_state_dict(fx(name), &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, (t.dtype, t.tensor)))
        .collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    let b = b.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    let (a, b) = (a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn torchscript_module_tree_reads_as_state_dict_names_in_f32_f16_and_bf16() {
    let expected =
        candle_core::safetensors::load(fx("reader/tiny.safetensors"), &Device::Cpu).unwrap();
    for (file, float, tol) in [
        ("reader/tiny_f32.jit", StorageDType::F32, 0.0),
        ("reader/tiny_bf16.jit", StorageDType::BF16, 0.0),
        // The (bf16-valued) weights are exact in f16; the Haar wavelets 1/√2 are not.
        ("reader/tiny_f16.jit", StorageDType::F16, 3e-4),
    ] {
        assert!(Checkpoint::open(fx(file)).unwrap().is_torchscript());
        let got = read(file);
        let mut names: Vec<&String> = got.keys().collect();
        names.sort();
        let mut want: Vec<&String> = expected.keys().collect();
        want.sort();
        assert_eq!(names, want, "{file}");
        for (name, e) in &expected {
            let (dtype, t) = &got[name];
            assert_eq!(t.dims(), e.dims(), "{file} {name}");
            match e.dtype() {
                DType::I64 => assert_eq!(*dtype, StorageDType::I64, "{file} {name}"),
                _ => assert_eq!(*dtype, float, "{file} {name}"),
            }
            let d = max_abs_diff(t, e);
            assert!(d <= tol, "{file} {name}: differs by {d}");
        }
    }
}

#[test]
fn cosmos_archives_name_tensors_as_the_modules_state_dict() {
    let enc = read("di/encoder.jit");
    for name in [
        "encoder.conv_in.weight",
        "encoder.down.0.block.0.norm1.weight",
        "encoder.down.0.downsample.conv.weight",
        "encoder.down.1.attn.0.q.weight",
        "encoder.mid.attn_1.proj_out.bias",
        "encoder.patcher.wavelets",
        "quant_conv.weight",
        "quantizer._levels",
    ] {
        assert!(enc.contains_key(name), "di/encoder.jit lacks {name}");
    }
    assert_eq!(enc["encoder.conv_in.weight"].0, StorageDType::BF16);
    assert_eq!(enc["quantizer._levels"].0, StorageDType::I32);
    let dec = read("di/decoder.jit");
    for name in [
        "inv_quant.quantizer._basis",
        "post_quant_conv.weight",
        "decoder.up.1.upsample.conv.weight",
        "decoder.unpatcher.wavelets",
    ] {
        assert!(dec.contains_key(name), "di/decoder.jit lacks {name}");
    }
}

// Hostile and damaged archives.

/// A TorchScript-style zip: `archive/data.pkl`, `archive/constants.pkl`, `archive/code/...`
/// (never read) and storages.
fn script_zip(pickle: &[u8], storages: &[(&str, &[u8])], code: bool) -> Vec<u8> {
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("archive/data.pkl", o).unwrap();
    z.write_all(pickle).unwrap();
    if code {
        z.start_file("archive/constants.pkl", o).unwrap();
        z.write_all(b"\x80\x02).").unwrap();
        z.start_file("archive/code/__torch__/m.py", o).unwrap();
        z.write_all(b"import os\nos.system('echo pwned')\n")
            .unwrap();
    }
    for (k, b) in storages {
        z.start_file(format!("archive/data/{k}"), o).unwrap();
        z.write_all(b).unwrap();
    }
    z.finish().unwrap().into_inner()
}

fn s(p: &mut Vec<u8>, t: &str) {
    p.push(b'X');
    p.extend_from_slice(&(t.len() as u32).to_le_bytes());
    p.extend_from_slice(t.as_bytes());
}

/// `_rebuild_tensor_v2` of a 2-element FloatStorage `0`.
fn tensor(p: &mut Vec<u8>) {
    p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    s(p, "storage");
    p.extend_from_slice(b"ctorch\nFloatStorage\n");
    s(p, "0");
    s(p, "cpu");
    p.extend_from_slice(b"K\x02tQK\x00(K\x02t(K\x01t\x89ccollections\nOrderedDict\n)RtR");
}

/// `NEWOBJ` of `__torch__.m.<class>` (memoised as `memo`).
fn object(p: &mut Vec<u8>, class: &str, memo: u8) {
    p.extend_from_slice(format!("c__torch__.m\n{class}\n)").as_bytes());
    p.extend_from_slice(&[0x81, b'q', memo]); // NEWOBJ, BINPUT
}

fn err(bytes: Vec<u8>) -> TorchError {
    let mut c = match Checkpoint::from_bytes("bad.jit", bytes) {
        Ok(c) => c,
        Err(e) => return e,
    };
    match c.state_dict(&Device::Cpu) {
        Ok(_) => panic!("read"),
        Err(e) => e,
    }
}

fn one_line(e: &TorchError) -> String {
    let t = e.to_string();
    assert!(t.starts_with("bad.jit: "), "{t}");
    assert_eq!(t.lines().count(), 1, "{t}");
    t
}

#[test]
fn hand_made_module_tree_reads_and_its_code_is_never_run() {
    // Root{training: False, conv: Conv{weight: tensor}}
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Root", 0);
    p.extend_from_slice(b"}(");
    s(&mut p, "training");
    p.push(0x89);
    s(&mut p, "conv");
    object(&mut p, "Conv", 1);
    p.extend_from_slice(b"}(");
    s(&mut p, "weight");
    tensor(&mut p);
    p.extend_from_slice(b"ub"); // SETITEMS, BUILD (Conv)
    p.extend_from_slice(b"ub."); // SETITEMS, BUILD (Root), STOP
    let bytes = script_zip(&p, &[("0", &[0u8; 8])], true);
    let mut c = Checkpoint::from_bytes("ok.jit", bytes).unwrap();
    let sd = c.state_dict(&Device::Cpu).unwrap();
    let names: Vec<&str> = sd.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["conv.weight"]);
    assert_eq!(c.top_level_keys(), ["training", "conv"]);
}

#[test]
fn torchscript_class_outside_a_torchscript_archive_is_refused() {
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Root", 0);
    p.extend_from_slice(b"}b.");
    let e = err(script_zip(&p, &[], false));
    let t = one_line(&e);
    assert!(
        matches!(&e, TorchError::Format { what: FormatError::Pickle(PickleError::ForbiddenGlobal { module, .. }), .. } if module == "__torch__.m"),
        "{t}"
    );
}

#[test]
fn calling_a_torchscript_class_is_refused() {
    let p = b"\x80\x02c__torch__.m\nRoot\n)R.".to_vec();
    let e = err(script_zip(&p, &[], true));
    let t = one_line(&e);
    assert!(t.contains("__torch__.m.Root"), "{t}");
}

#[test]
fn module_built_from_a_tuple_or_twice_is_refused() {
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Custom", 0);
    p.extend_from_slice(b"K\x01\x85b."); // BUILD with (1,)
    let t = one_line(&err(script_zip(&p, &[], true)));
    assert!(t.contains("built from a tuple"), "{t}");

    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Twice", 0);
    p.extend_from_slice(b"}b}b.");
    let t = one_line(&err(script_zip(&p, &[], true)));
    assert!(t.contains("built twice"), "{t}");
}

#[test]
fn unbuilt_module_and_non_module_root_are_refused() {
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Root", 0);
    p.push(b'.');
    let t = one_line(&err(script_zip(&p, &[], true)));
    assert!(t.contains("never built"), "{t}");

    let t = one_line(&err(script_zip(b"\x80\x02}.", &[], true)));
    assert!(t.contains("not a module"), "{t}");
}

#[test]
fn module_that_contains_itself_is_refused_not_followed() {
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Loop", 0);
    p.extend_from_slice(b"}(");
    s(&mut p, "me");
    p.extend_from_slice(b"h\x00ub."); // BINGET 0: the object itself
    let e = err(script_zip(&p, &[], true));
    let t = one_line(&e);
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::ModuleTreeTooLarge { .. },
                ..
            }
        ),
        "{t}"
    );
}

#[test]
fn list_of_tensors_attribute_is_refused_by_name() {
    let mut p = b"\x80\x02".to_vec();
    object(&mut p, "Root", 0);
    p.extend_from_slice(b"}(");
    s(&mut p, "params");
    p.extend_from_slice(b"](");
    tensor(&mut p);
    p.extend_from_slice(b"eub."); // APPENDS, SETITEMS, BUILD
    let t = one_line(&err(script_zip(&p, &[("0", &[0u8; 8])], true)));
    assert!(t.contains("`params`") && t.contains("container"), "{t}");
}

#[test]
fn truncated_and_storage_less_cosmos_archives_are_refused_in_one_line() {
    let full = std::fs::read(fx("reader/tiny_bf16.jit")).unwrap();
    for cut in [full.len() / 2, full.len() - 30, 100] {
        let t = one_line(&err(full[..cut].to_vec()));
        assert!(t.contains("zip") || t.contains("truncated"), "{t}");
    }
    // The same archive without its first storage.
    let mut src = zip::ZipArchive::new(Cursor::new(full)).unwrap();
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..src.len() {
        let f = src.by_index(i).unwrap();
        if f.name().is_ok_and(|n| n.ends_with("/data/0")) {
            continue;
        }
        z.raw_copy_file(f).unwrap();
    }
    let t = one_line(&err(z.finish().unwrap().into_inner()));
    assert!(t.contains("missing"), "{t}");
}
