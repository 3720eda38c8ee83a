//! The values of the pickle machine: plain data, inert names and torch storages/tensors.
//!
//! Containers may nest as deeply as a pickle says, so nothing here recurses over a value:
//! each container records its nesting depth when it is built or filled (capped at
//! [`MAX_DEPTH`]), and dropping one walks its children with an explicit work list instead
//! of the recursive drop the compiler would generate (which overflows the stack on a
//! pickle of 200,000 nested lists).

use crate::error::PickleError;
use crate::tensor::{StorageDType, TensorRef};
use std::cell::RefCell;
use std::ops::Deref;
use std::rc::Rc;

/// Deepest container nesting a pickle may build. `torch.save` checkpoints nest fewer than
/// 20 levels (checkpoint → state_dict → tensor args → size tuple).
pub(crate) const MAX_DEPTH: u32 = 1000;

type PResult<T> = std::result::Result<T, PickleError>;

/// A pickle value. Lists and dicts are shared (`Rc`) because the pickle memo may hold them
/// while they are still being filled; memo references are shared, never copied.
#[derive(Clone)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<Seq>),
    List(Rc<RefCell<Seq>>),
    /// Entries in insertion order (keys are not hashed; duplicates are kept).
    Dict(Rc<RefCell<Pairs>>),
    /// A `module.name` reference that is never imported.
    Global(Rc<(String, String)>),
    /// What calling a tolerated `module.name` would have made; never constructed.
    Opaque(Rc<(String, String)>),
    Storage(Rc<StorageInfo>),
    Tensor(Rc<TensorRef>),
    /// A TorchScript module object (`__torch__.<path>.<Class>`, made by `NEWOBJ` in a
    /// TorchScript archive only) with the attribute dict its `BUILD` gave it.
    Object(Rc<ScriptObject>),
    /// Marker pushed by MARK.
    Mark,
}

/// A torch storage named by a persistent id (its bytes are `data/<key>` in the archive).
#[derive(Debug)]
pub(crate) struct StorageInfo {
    pub key: String,
    pub dtype: StorageDType,
    pub numel: usize,
}

/// A TorchScript object: its class (never imported) and its state, set once by `BUILD`.
pub(crate) struct ScriptObject {
    pub class: (String, String),
    pub state: RefCell<Option<Value>>,
}

impl Drop for ScriptObject {
    fn drop(&mut self) {
        if let Some(v) = self.state.get_mut().take() {
            drop_iteratively(vec![v]);
        }
    }
}

/// The items of a tuple or list, with the nesting depth they reach.
pub(crate) struct Seq {
    items: Vec<Value>,
    depth: u32,
}

/// The entries of a dict, with the nesting depth they reach.
pub(crate) struct Pairs {
    items: Vec<(Value, Value)>,
    depth: u32,
}

/// Depth of a container holding values of depths `depths`, refused above [`MAX_DEPTH`].
fn depth_above(depths: impl Iterator<Item = u32>) -> PResult<u32> {
    let d = 1 + depths.max().unwrap_or(0);
    if d > MAX_DEPTH {
        return Err(PickleError::TooDeep { max: MAX_DEPTH });
    }
    Ok(d)
}

impl Seq {
    fn new(items: Vec<Value>) -> PResult<Self> {
        let depth = depth_above(items.iter().map(Value::depth))?;
        Ok(Self { items, depth })
    }

    /// Appends `items`, whose depths the caller computed before borrowing `self` (an item
    /// may be this very list).
    pub fn extend(&mut self, items: Vec<Value>, items_depth: u32) -> PResult<()> {
        self.depth = self.depth.max(depth_above(std::iter::once(items_depth))?);
        self.items.extend(items);
        Ok(())
    }
}

impl Pairs {
    /// Adds `(key, value)` entries; see [`Seq::extend`] for `items_depth`.
    pub fn extend(&mut self, items: Vec<Value>, items_depth: u32) -> PResult<()> {
        self.depth = self.depth.max(depth_above(std::iter::once(items_depth))?);
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            self.items.push((k, v));
        }
        Ok(())
    }
}

impl Deref for Seq {
    type Target = Vec<Value>;
    fn deref(&self) -> &Vec<Value> {
        &self.items
    }
}

impl Deref for Pairs {
    type Target = Vec<(Value, Value)>;
    fn deref(&self) -> &Vec<(Value, Value)> {
        &self.items
    }
}

impl Drop for Seq {
    fn drop(&mut self) {
        drop_iteratively(std::mem::take(&mut self.items));
    }
}

impl Drop for Pairs {
    fn drop(&mut self) {
        let mut work = Vec::with_capacity(self.items.len() * 2);
        for (k, v) in self.items.drain(..) {
            work.push(k);
            work.push(v);
        }
        drop_iteratively(work);
    }
}

/// Drops `work` and everything only it owns without recursion: a container whose last
/// reference is being dropped hands its children to the work list first, so the `Seq` /
/// `Pairs` that then drops is empty.
fn drop_iteratively(mut work: Vec<Value>) {
    while let Some(v) = work.pop() {
        match v {
            Value::Tuple(rc) => {
                if let Ok(mut s) = Rc::try_unwrap(rc) {
                    work.append(&mut s.items);
                }
            }
            Value::List(rc) => {
                if let Ok(cell) = Rc::try_unwrap(rc) {
                    work.append(&mut cell.into_inner().items);
                }
            }
            Value::Dict(rc) => {
                if let Ok(cell) = Rc::try_unwrap(rc) {
                    for (k, v) in cell.into_inner().items.drain(..) {
                        work.push(k);
                        work.push(v);
                    }
                }
            }
            Value::Object(rc) => {
                if let Ok(mut o) = Rc::try_unwrap(rc) {
                    work.extend(o.state.get_mut().take());
                }
            }
            _ => {}
        }
    }
}

/// Shallow: never walks into containers (their items may nest arbitrarily deep).
impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "Bool({b})"),
            Value::Int(i) => write!(f, "Int({i})"),
            Value::Float(x) => write!(f, "Float({x})"),
            Value::Str(s) => write!(f, "Str({s:?})"),
            Value::Bytes(b) => write!(f, "Bytes(<{} bytes>)", b.len()),
            Value::Tuple(t) => write!(f, "Tuple(<{} items>)", t.len()),
            Value::List(l) => write!(f, "List(<{} items>)", l.borrow().len()),
            Value::Dict(d) => write!(f, "Dict(<{} entries>)", d.borrow().len()),
            Value::Global(g) | Value::Opaque(g) => {
                write!(f, "{}({}.{})", self.describe(), g.0, g.1)
            }
            Value::Storage(s) => write!(f, "{s:?}"),
            Value::Tensor(t) => write!(f, "{t:?}"),
            Value::Object(o) => write!(f, "Object({}.{})", o.class.0, o.class.1),
            Value::None | Value::Mark => f.write_str(self.describe()),
        }
    }
}

impl Value {
    pub fn empty_list() -> Self {
        Value::List(Rc::new(RefCell::new(Seq {
            items: Vec::new(),
            depth: 1,
        })))
    }

    pub fn list(items: Vec<Value>) -> PResult<Self> {
        Ok(Value::List(Rc::new(RefCell::new(Seq::new(items)?))))
    }

    pub fn empty_dict() -> Self {
        Value::Dict(Rc::new(RefCell::new(Pairs {
            items: Vec::new(),
            depth: 1,
        })))
    }

    pub fn tuple(items: Vec<Value>) -> PResult<Self> {
        Ok(Value::Tuple(Rc::new(Seq::new(items)?)))
    }

    /// Nesting depth: 0 for scalars, 1 for an empty or flat container. For a list or dict
    /// filled after it was placed inside another container, the outer one keeps the depth
    /// it had then; the cap is a limit on what a file may declare, not what keeps the
    /// reader safe (nothing recurses over values).
    pub fn depth(&self) -> u32 {
        match self {
            Value::Tuple(t) => t.depth,
            // A list being filled with itself is borrowed mutably; its depth is then counted
            // by the caller.
            Value::List(l) => l.try_borrow().map(|l| l.depth).unwrap_or(MAX_DEPTH),
            Value::Dict(d) => d.try_borrow().map(|d| d.depth).unwrap_or(MAX_DEPTH),
            _ => 0,
        }
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
            Value::Storage(_) => "storage",
            Value::Tensor(_) => "tensor",
            Value::Object(_) => "module object",
            Value::Mark => "mark",
        }
    }

    /// A non-negative integer.
    pub fn as_usize(&self) -> Option<usize> {
        match self {
            Value::Int(i) if *i >= 0 => usize::try_from(*i).ok(),
            _ => None,
        }
    }

    /// A tuple or list of non-negative integers (a tensor size or stride).
    pub fn as_usize_seq(&self) -> Option<Vec<usize>> {
        match self {
            Value::Tuple(t) => t.iter().map(Value::as_usize).collect(),
            Value::List(l) => l.try_borrow().ok()?.iter().map(Value::as_usize).collect(),
            _ => None,
        }
    }
}
