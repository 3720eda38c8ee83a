//! The allowlist: which `module.name` globals a pickle may name, and what the few modelled
//! ones rebuild. Nothing is ever imported or called.
//!
//! * A global outside `torch.*`, `collections.*`, `pytorch_lightning.*`, `lightning.*`,
//!   `lightning_fabric.*` (and `_codecs.encode` and the inert [`INERT_NAMES`], such as the
//!   `argparse.Namespace` of LlamaGen's training arguments) is refused as soon as it is
//!   named.
//! * `REDUCE` (a call) is modelled for:
//!   - `torch._utils._rebuild_tensor_v2` → a tensor view on a storage,
//!   - `torch._utils._rebuild_parameter`, `torch._tensor._rebuild_from_type_v2` → the tensor,
//!   - `collections.OrderedDict` → an empty dict,
//!   - `_codecs.encode` → bytes (protocol 2's encoding of `bytes`).
//!
//!   A call or `NEWOBJ` of any other tolerated name (Lightning's `AttributeDict`,
//!   `torch.device`, ...) yields an opaque placeholder that is never constructed. Old
//!   Lightning keys its `callbacks` dict by the callback *class*, which is why inert names
//!   exist at all.
//! * torch's persistent id `('storage', torch.FloatStorage, key, location, numel)` becomes a
//!   storage reference.
//! * In a TorchScript archive's `data.pkl` ([`Flavor::TorchScript`]) only, `__torch__.*`
//!   classes may be named: `NEWOBJ` of one without arguments is a [`ScriptObject`] whose
//!   `BUILD` state (a dict of attributes) is kept; calling one (`REDUCE`) stays refused.

use super::value::{ScriptObject, StorageInfo, Value};
use super::Flavor;
use crate::error::PickleError;
use crate::tensor::{StorageDType, TensorRef};
use std::cell::RefCell;
use std::rc::Rc;

type PResult<T> = std::result::Result<T, PickleError>;

/// Module prefixes whose names may appear (inertly) in a checkpoint's pickle.
const INERT_MODULES: [&str; 5] = [
    "torch",
    "collections",
    "pytorch_lightning",
    "lightning",
    "lightning_fabric",
];

/// Single names outside those modules that a checkpoint may hold as data we do not need:
/// `NEWOBJ` / `REDUCE` of them gives an opaque placeholder (never constructed, its `BUILD`
/// state dropped). LlamaGen's `torch.save` dicts carry `"args": argparse.Namespace(...)`.
pub(super) const INERT_NAMES: [(&str, &str); 1] = [("argparse", "Namespace")];

fn in_inert_module(module: &str) -> bool {
    INERT_MODULES
        .iter()
        .any(|p| module == *p || module.starts_with(&format!("{p}.")))
}

/// A tolerated (never called) global: in an inert module or an inert name.
fn is_inert(module: &str, name: &str) -> bool {
    in_inert_module(module) || INERT_NAMES.contains(&(module, name))
}

/// The error for a name outside the allowlist (or instantiated by `INST`).
pub(super) fn refused(module: &str, name: &str) -> PickleError {
    PickleError::ForbiddenGlobal {
        module: module.into(),
        name: name.into(),
    }
}

/// The module prefix of TorchScript's classes (`__torch__.torch.nn.modules.conv.Conv2d`).
const SCRIPT_MODULE: &str = "__torch__";

/// Whether `module` is a TorchScript class's module (`__torch__` or below it).
fn is_script_module(module: &str) -> bool {
    module == SCRIPT_MODULE || module.starts_with("__torch__.")
}

/// `GLOBAL` / `STACK_GLOBAL`: an inert name if it is allowed at all (TorchScript classes in
/// a TorchScript archive only).
pub(super) fn global(module: String, name: String, flavor: Flavor) -> PResult<Value> {
    let script = flavor == Flavor::TorchScript && is_script_module(&module);
    if !(script || (module == "_codecs" && name == "encode") || is_inert(&module, &name)) {
        return Err(refused(&module, &name));
    }
    Ok(Value::Global(Rc::new((module, name))))
}

/// `BUILD` on a TorchScript object: its state must be a dict of attributes, set once.
pub(super) fn build_object(o: &ScriptObject, state: Value) -> PResult<()> {
    let class = || format!("{}.{}", o.class.0, o.class.1);
    if !matches!(state, Value::Dict(_)) {
        return Err(PickleError::ObjectState {
            class: class(),
            found: state.describe(),
        });
    }
    let mut slot = o
        .state
        .try_borrow_mut()
        .map_err(|_| PickleError::ObjectBuiltTwice { class: class() })?;
    if slot.is_some() {
        return Err(PickleError::ObjectBuiltTwice { class: class() });
    }
    *slot = Some(state);
    Ok(())
}

/// `REDUCE`: `callable(*args)` for the few callables modelled; a placeholder for other
/// tolerated names; everything else refused.
pub(super) fn reduce(callable: Value, args: Value) -> PResult<Value> {
    let (mut callable, mut args) = (callable, args);
    // `_rebuild_from_type_v2` wraps another call; unwrapped in a loop, not by recursion (its
    // arguments may nest as deep as the pickle likes).
    loop {
        let (module, name) = match &callable {
            Value::Global(g) => (g.0.as_str(), g.1.as_str()),
            other => {
                return Err(PickleError::CallsNonGlobal {
                    found: other.describe(),
                })
            }
        };
        let targs = match &args {
            Value::Tuple(t) => t.clone(),
            other => {
                return Err(PickleError::ReduceArgsNotATuple {
                    found: other.describe(),
                })
            }
        };
        let next = match (module, name) {
            ("collections", "OrderedDict") if targs.is_empty() => return Ok(Value::empty_dict()),
            ("torch._utils", "_rebuild_tensor_v2") => return rebuild_tensor_v2(&targs),
            ("torch._utils", "_rebuild_parameter") => {
                return match targs.first() {
                    Some(t @ Value::Tensor(_)) => Ok(t.clone()),
                    _ => Err(PickleError::MissingArgument {
                        call: "_rebuild_parameter",
                        expected: "tensor",
                    }),
                }
            }
            ("_codecs", "encode") => {
                return match targs.first() {
                    // protocol 2 pickles `bytes` as _codecs.encode(latin1 text, 'latin1').
                    Some(Value::Str(s)) => Ok(Value::Bytes(
                        s.chars()
                            .map(|c| c as u32 as u8)
                            .collect::<Vec<u8>>()
                            .into(),
                    )),
                    _ => Err(PickleError::MissingArgument {
                        call: "_codecs.encode",
                        expected: "string",
                    }),
                };
            }
            ("torch._tensor", "_rebuild_from_type_v2") => {
                // (func, new_type, args, state): a tensor subclass; keep the plain tensor.
                match (targs.first(), targs.get(2)) {
                    (Some(f @ Value::Global(_)), Some(a @ Value::Tuple(_))) => {
                        (f.clone(), a.clone())
                    }
                    _ => {
                        return Err(PickleError::UnexpectedArguments {
                            call: "_rebuild_from_type_v2",
                        })
                    }
                }
            }
            _ if is_inert(module, name) => {
                return Ok(Value::Opaque(Rc::new((module.into(), name.into()))))
            }
            _ => return Err(refused(module, name)),
        };
        (callable, args) = next;
    }
}

/// `_rebuild_tensor_v2(storage, offset, size, stride, ...)` → a view on the storage.
fn rebuild_tensor_v2(args: &[Value]) -> PResult<Value> {
    if args.len() < 4 {
        return Err(PickleError::TooFewArguments {
            call: "_rebuild_tensor_v2",
        });
    }
    let (key, dtype, numel) = match &args[0] {
        Value::Storage(s) => (s.key.clone(), s.dtype, s.numel),
        other => {
            return Err(PickleError::NotAStorage {
                found: other.describe(),
            })
        }
    };
    let bad = |what| PickleError::BadTensorArgument { what };
    let offset = args[1].as_usize().ok_or(bad("storage offset"))?;
    let size = args[2].as_usize_seq().ok_or(bad("size"))?;
    let stride = args[3].as_usize_seq().ok_or(bad("stride"))?;
    if size.len() != stride.len() {
        return Err(PickleError::SizeStrideMismatch);
    }
    Ok(Value::Tensor(Rc::new(TensorRef {
        key,
        dtype,
        storage_numel: numel,
        offset,
        size,
        stride,
    })))
}

/// `NEWOBJ` / `NEWOBJ_EX`: `cls.__new__(cls, *args, **kwargs)`: a TorchScript object (no
/// arguments; its class was only nameable in a TorchScript archive), else an opaque
/// placeholder.
pub(super) fn new_object(cls: Value, args: &Value, kwargs: Option<&Value>) -> PResult<Value> {
    match cls {
        Value::Global(g) if is_script_module(&g.0) => {
            let no_args = matches!(args, Value::Tuple(t) if t.is_empty())
                && kwargs.is_none_or(|k| matches!(k, Value::Dict(d) if d.borrow().is_empty()));
            if !no_args {
                return Err(PickleError::UnexpectedArguments {
                    call: "a TorchScript class",
                });
            }
            Ok(Value::Object(Rc::new(ScriptObject {
                class: (g.0.clone(), g.1.clone()),
                state: RefCell::new(None),
            })))
        }
        Value::Global(g) if is_inert(&g.0, &g.1) => Ok(Value::Opaque(g)),
        Value::Global(g) => Err(refused(&g.0, &g.1)),
        other => Err(PickleError::InstantiatesNonGlobal {
            found: other.describe(),
        }),
    }
}

/// `BINPERSID`: torch's persistent id `('storage', storage_type, key, location, numel)`.
pub(super) fn persistent_load(pid: Value) -> PResult<Value> {
    let t = match pid {
        Value::Tuple(t) if t.len() >= 5 => t,
        other => {
            return Err(PickleError::MalformedPersistentId {
                found: other.describe(),
            })
        }
    };
    match (&t[0], &t[1], &t[2], &t[4]) {
        (Value::Str(tag), Value::Global(g), Value::Str(key), Value::Int(n))
            if &**tag == "storage" && (g.0 == "torch" || g.0.starts_with("torch.")) && *n >= 0 =>
        {
            let (m, cls) = (&g.0, &g.1);
            let dtype =
                StorageDType::from_class(cls).ok_or_else(|| PickleError::UnsupportedStorage {
                    module: m.clone(),
                    name: cls.clone(),
                })?;
            Ok(Value::Storage(Rc::new(StorageInfo {
                key: key.to_string(),
                dtype,
                numel: usize::try_from(*n).map_err(|_| PickleError::UnsupportedPersistentId)?,
            })))
        }
        _ => Err(PickleError::UnsupportedPersistentId),
    }
}
