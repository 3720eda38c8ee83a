//! Reading the checkpoint fixtures of `tests/fixtures/vqgan` through the public API.

use candle_core::Device;
use imgseq_torch::{Checkpoint, FormatError, PickleError, StorageDType, TorchError};
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
}

#[test]
fn lightning_checkpoint_state_dict_and_scalars() {
    let c = Checkpoint::open(fx("tiny.ckpt")).unwrap();
    assert!(c.top_level_keys().iter().any(|k| k == "state_dict"));
    assert!(c
        .scalars()
        .contains(&("epoch".to_string(), "3".to_string())));
    let infos = c.tensor_infos().unwrap();
    let sd = imgseq_torch::read_state_dict(fx("tiny.ckpt"), &Device::Cpu).unwrap();
    assert_eq!(infos.len(), sd.len());
    for ((name, dtype, shape), (k, t)) in infos.iter().zip(&sd) {
        assert_eq!(name, k);
        assert_eq!(*dtype, t.dtype);
        assert_eq!(shape.as_slice(), t.tensor.dims(), "{k}");
    }
    let (_, logvar) = sd.iter().find(|(k, _)| k == "loss.logvar").unwrap();
    assert_eq!(logvar.dtype, StorageDType::BF16);
    assert_eq!(logvar.tensor.dtype(), candle_core::DType::F32);
}

#[test]
fn refused_global_names_the_file_and_converts_with_the_same_text() {
    let e = match imgseq_torch::read_state_dict(fx("evil.ckpt"), &Device::Cpu) {
        Ok(_) => panic!("evil.ckpt was accepted"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::Pickle(PickleError::ForbiddenGlobal { module, name }),
                ..
            } if module == "os" && name == "system"
        ),
        "{e:?}"
    );
    assert!(
        text.contains("evil.ckpt: pickle references `os.system`"),
        "{text}"
    );
    let core: imgseq_core::Error = e.into();
    assert!(matches!(core, imgseq_core::Error::Format { .. }));
    assert_eq!(core.to_string(), text);
}

#[test]
fn missing_storage_and_missing_file() {
    let e = imgseq_torch::read_state_dict(fx("missing_storage.ckpt"), &Device::Cpu).unwrap_err();
    assert!(
        matches!(&e, TorchError::Format { what: FormatError::MissingStorage { entry }, .. } if entry.ends_with("data/1")),
        "{e:?}"
    );
    let e = match Checkpoint::open(fx("no_such.ckpt")) {
        Ok(_) => panic!("opened a missing file"),
        Err(e) => e,
    };
    assert!(matches!(e, TorchError::Io { .. }), "{e:?}");
    let text = e.to_string();
    let core: imgseq_core::Error = e.into();
    assert!(matches!(core, imgseq_core::Error::Io { .. }));
    assert_eq!(core.to_string(), text);
}

#[test]
fn not_a_zip() {
    let e = match Checkpoint::open(fx("tiny_config.json")) {
        Ok(_) => panic!("a JSON file was accepted"),
        Err(e) => e,
    };
    assert!(
        matches!(
            &e,
            TorchError::Format {
                what: FormatError::NotAZip { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e
        .to_string()
        .contains("not a readable PyTorch zip checkpoint"));
}
