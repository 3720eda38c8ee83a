use super::*;
use crate::archive::Archive;
use std::path::Path;

fn run(bytes: &[u8]) -> PResult<Value> {
    load(bytes, super::Flavor::TorchSave)
}

fn refused(module: &str, name: &str) -> PickleError {
    PickleError::ForbiddenGlobal {
        module: module.into(),
        name: name.into(),
    }
}

#[test]
fn os_system_is_refused_before_anything_runs() {
    // cos\nsystem\n(S'echo pwned'\ntR.  (protocol 0)
    let p = b"cos\nsystem\n(X\x0a\x00\x00\x00echo pwnedtR.";
    let e = run(p).unwrap_err();
    assert_eq!(e, refused("os", "system"));
    assert_eq!(
        e.to_string(),
        "pickle references `os.system`; imgseq only reads tensors and plain containers"
    );
}

#[test]
fn calling_a_tolerated_class_gives_an_opaque_placeholder() {
    // GLOBAL torch.nn.Linear, () REDUCE → nothing is built.
    let v = run(b"\x80\x02ctorch.nn\nLinear\n)R.").unwrap();
    assert!(matches!(v, Value::Opaque(_)), "{v:?}");
    // NEWOBJ of a Lightning dict subclass, then SETITEMS and BUILD.
    let p = b"\x80\x02cpytorch_lightning.utilities.parsing\nAttributeDict\n)\x81(X\x01\x00\x00\x00aK\x01u}b.";
    assert!(matches!(run(p).unwrap(), Value::Opaque(_)));
    // Anything outside the tolerated modules is refused, however it is reached.
    let p = b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93X\x01\x00\x00\x001\x85R.";
    assert_eq!(run(p).unwrap_err(), refused("builtins", "eval"));
    let p = b"\x80\x02cos\nPathLike\n)\x81.";
    assert_eq!(run(p).unwrap_err(), refused("os", "PathLike"));
    let p = b"\x80\x02c_codecs\ndecode\n.";
    assert_eq!(run(p).unwrap_err(), refused("_codecs", "decode"));
}

#[test]
fn instantiation_opcodes_are_refused() {
    // INST names its class in text lines; refused even for a tolerated module.
    let p = b"(itorch.nn\nLinear\n.";
    assert_eq!(run(p).unwrap_err(), refused("torch.nn", "Linear"));
    // OBJ names the class on the stack.
    let e = run(b"(ctorch.nn\nLinear\no.").unwrap_err();
    assert_eq!(
        e.to_string(),
        "pickle instantiates `torch.nn.Linear`; imgseq only reads tensors and plain containers"
    );
    assert_eq!(
        run(b"\x82\x01.").unwrap_err(),
        PickleError::ExtensionRegistry
    );
    assert_eq!(run(b"P0\n.").unwrap_err(), PickleError::TextPersistentId);
}

#[test]
fn unsupported_opcodes_are_named_when_known() {
    // FLOAT (text) is a pickle opcode that torch.save never writes.
    let e = run(b"\x80\x02F1.5\n.").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unsupported pickle opcode 0x46 (FLOAT) at byte 2"
    );
    let e = run(b"N\xff.").unwrap_err();
    assert_eq!(e.to_string(), "unsupported pickle opcode 0xff at byte 1");
}

#[test]
fn plain_containers() {
    // {'a': [1, -2, 3.5, True, None], 'b': (300, 70000)} protocol 2
    let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00\x88NeX\x01\x00\x00\x00bM,\x01J\x70\x11\x01\x00\x86u.";
    let v = run(p).unwrap();
    let Value::Dict(d) = v else { panic!() };
    let d = d.borrow();
    assert_eq!(d.len(), 2);
    let Value::List(l) = &d[0].1 else { panic!() };
    assert!(matches!(l.borrow()[1], Value::Int(-2)));
    assert!(matches!(l.borrow()[2], Value::Float(f) if f == 3.5));
    let Value::Tuple(t) = &d[1].1 else { panic!() };
    assert!(matches!(t[1], Value::Int(70000)));
}

/// Damaged pickles give errors (or values), never panics or hangs.
#[test]
fn mutated_pickles_never_panic() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/vqgan/tiny.ckpt"
    );
    let pkl = Archive::open(Path::new(path))
        .unwrap()
        .read_pickle()
        .unwrap();
    assert!(run(&pkl).is_ok());
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut p = pkl.clone();
        for _ in 0..1 + rnd() % 4 {
            let i = (rnd() as usize) % p.len();
            p[i] = rnd() as u8;
        }
        if rnd() % 4 == 0 {
            p.truncate((rnd() as usize) % p.len());
        }
        let _ = run(&p);
    }
}

/// A length near `usize::MAX` is "truncated", not an overflow.
#[test]
fn huge_lengths_are_truncation() {
    let p = b"\x8e\xff\xff\xff\xff\xff\xff\xff\xff.";
    assert_eq!(run(p).unwrap_err(), PickleError::Truncated);
}

/// Re-using memoised values is cheap (shared, not copied): a pickle that doubles a tuple
/// 60 times would need 2^60 copies otherwise.
#[test]
fn memo_references_are_shared_not_copied() {
    let mut p = b"\x80\x02X\x04\x00\x00\x00abcdq\x00".to_vec();
    for i in 0..60u8 {
        p.extend_from_slice(&[op::BINGET, i, op::BINGET, i, op::TUPLE2, op::BINPUT, i + 1]);
    }
    p.push(op::STOP);
    assert!(matches!(run(&p).unwrap(), Value::Tuple(_)));
}

#[test]
fn long1_negative() {
    let v = run(b"\x8a\x02\x00\xff.").unwrap();
    assert!(matches!(v, Value::Int(-256)), "{v:?}");
}

#[test]
fn argparse_namespace_is_skipped_never_built() {
    // pickle.dumps({'args': argparse.Namespace(lr=0.5, name='x'), 'steps': 3}, protocol=2):
    // LlamaGen's training checkpoints carry their arguments like this.
    let p = b"\x80\x02}q\x00(X\x04\x00\x00\x00argsq\x01cargparse\nNamespace\nq\x02)\x81q\x03}q\x04(X\x02\x00\x00\x00lrq\x05G?\xe0\x00\x00\x00\x00\x00\x00X\x04\x00\x00\x00nameq\x06X\x01\x00\x00\x00xq\x07ubX\x05\x00\x00\x00stepsq\x08K\x03u.";
    let Value::Dict(d) = run(p).unwrap() else {
        panic!("not a dict")
    };
    let d = d.borrow();
    let v: Vec<&Value> = d.iter().map(|(_, v)| v).collect();
    assert!(matches!(v[0], Value::Opaque(g) if g.0 == "argparse" && g.1 == "Namespace"));
    assert!(matches!(v[1], Value::Int(3)));
    // Only that one name of `argparse` is tolerated; and it cannot be instantiated by INST.
    let p = b"\x80\x02cargparse\nArgumentParser\nq\x00.";
    assert_eq!(run(p).unwrap_err(), refused("argparse", "ArgumentParser"));
    let p = b"(iargparse\nNamespace\n.";
    assert_eq!(run(p).unwrap_err(), refused("argparse", "Namespace"));
}
