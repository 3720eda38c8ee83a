//! TorchScript archives (`torch.jit.save`, e.g. NVIDIA's Cosmos tokenizers' `encoder.jit`):
//! their `data.pkl` pickles the module tree as objects of `__torch__.<path>.<Class>` classes,
//! each with its attributes (parameters and buffers as tensors, submodules as objects, plain
//! settings such as `training`). [`flatten`] turns that tree into the flat `name → tensor` map
//! `module.state_dict()` would give: dotted attribute paths (`encoder.conv_in.weight`,
//! `encoder.down.0.block.1.norm1.bias`). Whether a buffer was registered non-persistent is
//! written in the archive's code (never read), so such buffers (Cosmos' Haar `wavelets`, FSQ's
//! `_levels`) are listed too.
//!
//! The walk is iterative and bounded (module depth and count), so a hostile pickle that nests
//! or shares modules without end is refused rather than followed.

use crate::error::FormatError;
use crate::pickle::{ScriptObject, Value};
use crate::tensor::TensorRef;
use std::rc::Rc;

/// Deepest module nesting followed (Cosmos: 6 levels).
pub const MAX_MODULE_DEPTH: usize = 64;
/// Most module objects (and container items) visited; a shared submodule counts each time
/// it is reached (as `state_dict` lists it under each name).
pub const MAX_MODULE_NODES: usize = 1 << 20;

/// The tensors of the module tree rooted at `root`, by dotted attribute path, in pre-order.
pub(crate) fn flatten(root: &Value) -> Result<Vec<(String, Rc<TensorRef>)>, FormatError> {
    let Value::Object(root) = root else {
        return Err(FormatError::NotAModule {
            found: root.describe(),
        });
    };
    let mut out = Vec::new();
    let mut visited = 0usize;
    let mut work: Vec<(String, Rc<ScriptObject>, usize)> = vec![(String::new(), root.clone(), 0)];
    while let Some((prefix, obj, depth)) = work.pop() {
        visited += 1;
        if visited > MAX_MODULE_NODES || depth > MAX_MODULE_DEPTH {
            return Err(FormatError::ModuleTreeTooLarge {
                depth: MAX_MODULE_DEPTH,
                nodes: MAX_MODULE_NODES,
            });
        }
        let state = obj.state.borrow();
        let Some(Value::Dict(d)) = &*state else {
            return Err(FormatError::UnbuiltModule {
                path: shown(&prefix),
                class: format!("{}.{}", obj.class.0, obj.class.1),
            });
        };
        let mut children = Vec::new();
        for (k, v) in d.borrow().iter() {
            let Value::Str(k) = k else {
                return Err(FormatError::ScriptAttribute {
                    path: shown(&prefix),
                    found: "keyed by a non-string (in its module)",
                });
            };
            let path = format!("{prefix}{k}");
            match v {
                Value::Tensor(t) => out.push((path, t.clone())),
                Value::Object(o) => children.push((format!("{path}."), o.clone(), depth + 1)),
                Value::Storage(_) => {
                    return Err(FormatError::ScriptAttribute {
                        path,
                        found: "a bare storage",
                    })
                }
                other => {
                    if holds_weights(other, &mut visited) {
                        return Err(FormatError::ScriptAttribute {
                            path,
                            found: "a container of tensors or modules",
                        });
                    }
                }
            }
        }
        work.extend(children.into_iter().rev());
    }
    Ok(out)
}

/// Whether a plain attribute value (a list, tuple or dict, or a scalar) holds a tensor, storage
/// or module anywhere inside: weights a state dict cannot name. Iterative; every item counts
/// against the node budget.
fn holds_weights(v: &Value, visited: &mut usize) -> bool {
    let mut work = vec![v.clone()];
    while let Some(v) = work.pop() {
        *visited += 1;
        if *visited > MAX_MODULE_NODES {
            return true;
        }
        match v {
            Value::Tensor(_) | Value::Storage(_) | Value::Object(_) => return true,
            Value::Tuple(t) => work.extend(t.iter().cloned()),
            Value::List(l) => match l.try_borrow() {
                Ok(l) => work.extend(l.iter().cloned()),
                Err(_) => return true,
            },
            Value::Dict(d) => match d.try_borrow() {
                Ok(d) => work.extend(d.iter().flat_map(|(k, v)| [k.clone(), v.clone()])),
                Err(_) => return true,
            },
            _ => {}
        }
    }
    false
}

/// A module path for messages (`encoder.down.0`), `the root module` for the root.
fn shown(prefix: &str) -> String {
    match prefix.strip_suffix('.') {
        Some(p) => format!("`{p}`"),
        None => "the root module".to_string(),
    }
}
