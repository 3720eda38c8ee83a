//! The values of the pickle machine: plain data, inert names and torch storages/tensors.

use crate::tensor::{StorageDType, TensorRef};
use std::cell::RefCell;
use std::rc::Rc;

/// A pickle value. Lists and dicts are shared (`Rc`) because the pickle memo may hold them
/// while they are still being filled; memo references are shared, never copied.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<Vec<Value>>),
    List(Rc<RefCell<Vec<Value>>>),
    /// Entries in insertion order (keys are not hashed; duplicates are kept).
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    /// A `module.name` reference that is never imported.
    Global(Rc<(String, String)>),
    /// What calling a tolerated `module.name` would have made; never constructed.
    Opaque(Rc<(String, String)>),
    Storage {
        key: String,
        dtype: StorageDType,
        numel: usize,
    },
    Tensor(Rc<TensorRef>),
    /// Marker pushed by MARK.
    Mark,
}

impl Value {
    pub fn empty_list() -> Self {
        Value::List(Rc::new(RefCell::new(Vec::new())))
    }

    pub fn list(items: Vec<Value>) -> Self {
        Value::List(Rc::new(RefCell::new(items)))
    }

    pub fn empty_dict() -> Self {
        Value::Dict(Rc::new(RefCell::new(Vec::new())))
    }

    pub fn tuple(items: Vec<Value>) -> Self {
        Value::Tuple(Rc::new(items))
    }

    /// The Python-ish kind of the value, for error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Global(_) => "global",
            Value::Opaque(_) => "object",
            Value::Storage { .. } => "storage",
            Value::Tensor(_) => "tensor",
            Value::Mark => "mark",
        }
    }

    /// A non-negative integer.
    pub fn as_usize(&self) -> Option<usize> {
        match self {
            Value::Int(i) if *i >= 0 => Some(*i as usize),
            _ => None,
        }
    }

    /// A tuple or list of non-negative integers (a tensor size or stride).
    pub fn as_usize_seq(&self) -> Option<Vec<usize>> {
        let items: Vec<Value> = match self {
            Value::Tuple(t) => t.to_vec(),
            Value::List(l) => l.borrow().clone(),
            _ => return None,
        };
        items.iter().map(|v| v.as_usize()).collect()
    }
}
