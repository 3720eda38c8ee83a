//! A restricted, non-executing reader for PyTorch `torch.save` files (zip format, torch ≥ 1.6),
//! such as taming's PyTorch-Lightning `last.ckpt`.
//!
//! A `.ckpt` is a zip archive holding `<prefix>/data.pkl` (a pickle describing the object
//! tree) and `<prefix>/data/<key>` (the raw bytes of every tensor storage). Python's
//! `pickle.load` would import and call whatever the pickle names — a checkpoint can run
//! arbitrary code. This module instead interprets the opcodes that `torch.save` emits on a
//! small stack machine of plain values and never calls anything:
//!
//! * `GLOBAL`/`STACK_GLOBAL` produce an inert name, nothing is imported. A name outside
//!   `torch.*`, `collections.*`, `pytorch_lightning.*`, `lightning.*`, `lightning_fabric.*`
//!   (and `_codecs.encode`) is refused as soon as it appears: "pickle references `os.system`;
//!   imgseq only reads tensors and plain containers".
//! * `REDUCE` (a call) is modelled for a few names:
//!   - `torch._utils._rebuild_tensor_v2` → a tensor view on a storage,
//!   - `torch._utils._rebuild_parameter`, `torch._tensor._rebuild_from_type_v2` → the tensor,
//!   - `collections.OrderedDict` → an empty dict,
//!   - `_codecs.encode` → bytes (protocol-2 encoding of `bytes`).
//!
//!   A call or `NEWOBJ` of any other tolerated name (Lightning's `AttributeDict`
//!   hyper-parameters, `torch.device`, ...) yields an opaque placeholder that is never
//!   constructed; it can only end up as a skipped non-tensor entry. Old Lightning also keys
//!   its `callbacks` dict by the callback *class*, which is why inert names exist at all.
//! * `BINPERSID` turns torch's persistent id `('storage', torch.FloatStorage, key, location,
//!   numel)` into a storage reference; storage bytes are read only for the tensors asked for.
//! * `BUILD` only discards the state (it would set attributes, e.g. a state dict's
//!   `_metadata`); `INST`, `OBJ`, `EXT*` and `PERSID` are refused.
//!
//! Tensors are materialised with their storage offset and strides (any view), and float
//! storages (f32, f64, f16, bf16) become f32; integer ones i64, byte/bool ones u8.

use candle_core::{DType, Device, Tensor};
use imgseq_core::{Error, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Element type of a torch storage (`torch.FloatStorage` → `F32`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDType {
    F32,
    F64,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl StorageDType {
    fn from_class(name: &str) -> Option<Self> {
        Some(match name {
            "FloatStorage" => Self::F32,
            "DoubleStorage" => Self::F64,
            "HalfStorage" => Self::F16,
            "BFloat16Storage" => Self::BF16,
            "LongStorage" => Self::I64,
            "IntStorage" => Self::I32,
            "ShortStorage" => Self::I16,
            "CharStorage" => Self::I8,
            "ByteStorage" | "UntypedStorage" => Self::U8,
            "BoolStorage" => Self::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 => 8,
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::I8 | Self::U8 | Self::Bool => 1,
        }
    }

    /// PyTorch's name for it (`float32`, ...), as printed by `imgseq weights inspect`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
            Self::I64 => "int64",
            Self::I32 => "int32",
            Self::I16 => "int16",
            Self::I8 => "int8",
            Self::U8 => "uint8",
            Self::Bool => "bool",
        }
    }
}

/// Largest tensor a checkpoint may make us allocate.
const MAX_TENSOR_BYTES: usize = 16 << 30;

/// A tensor read from a checkpoint: its original dtype and the materialised candle tensor.
#[derive(Debug, Clone)]
pub struct CkptTensor {
    pub dtype: StorageDType,
    pub tensor: Tensor,
}

/// A reference to (part of) a storage, as described by `_rebuild_tensor_v2`.
#[derive(Debug, Clone)]
struct TensorRef {
    key: String,
    dtype: StorageDType,
    storage_numel: usize,
    offset: usize,
    size: Vec<usize>,
    stride: Vec<usize>,
}

/// The values of our pickle machine. Lists and dicts are shared (`Rc`) because the pickle
/// memo may hold them while they are still being filled.
#[derive(Debug, Clone)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<Vec<Value>>),
    List(Rc<RefCell<Vec<Value>>>),
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
    fn describe(&self) -> &'static str {
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
    fn as_usize(&self) -> Option<usize> {
        match self {
            Value::Int(i) if *i >= 0 => Some(*i as usize),
            _ => None,
        }
    }
    fn as_usize_seq(&self) -> Option<Vec<usize>> {
        let items: Vec<Value> = match self {
            Value::Tuple(t) => t.to_vec(),
            Value::List(l) => l.borrow().clone(),
            _ => return None,
        };
        items.iter().map(|v| v.as_usize()).collect()
    }
}

/// Module prefixes whose names may appear (inertly) in a checkpoint's pickle.
const INERT_MODULES: [&str; 5] = [
    "torch",
    "collections",
    "pytorch_lightning",
    "lightning",
    "lightning_fabric",
];

fn in_inert_module(module: &str) -> bool {
    INERT_MODULES
        .iter()
        .any(|p| module == *p || module.starts_with(&format!("{p}.")))
}

fn name_tolerated(module: &str, name: &str) -> bool {
    (module == "_codecs" && name == "encode") || in_inert_module(module)
}

fn refused(module: &str, name: &str) -> String {
    format!("pickle references `{module}.{name}`; imgseq only reads tensors and plain containers")
}

/// The pickle interpreter. `msg`s are turned into one-line errors naming the file.
struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    memo: HashMap<u32, Value>,
}

type PResult<T> = std::result::Result<T, String>;

impl<'a> Machine<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            stack: Vec::new(),
            memo: HashMap::new(),
        }
    }

    fn take(&mut self, n: usize) -> PResult<&'a [u8]> {
        if self.pos + n > self.data.len() {
            return Err("pickle ends early (truncated data.pkl)".into());
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> PResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> PResult<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> PResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> PResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn line(&mut self) -> PResult<String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("pickle ends inside a text line")?;
        self.pos += end + 1;
        String::from_utf8(rest[..end].to_vec()).map_err(|_| "non-UTF-8 text in pickle".into())
    }
    fn utf8(&mut self, n: usize) -> PResult<Value> {
        let b = self.take(n)?;
        Ok(Value::Str(
            std::str::from_utf8(b)
                .map_err(|_| "non-UTF-8 string in pickle")?
                .into(),
        ))
    }
    fn pop(&mut self) -> PResult<Value> {
        match self.stack.pop() {
            Some(Value::Mark) | None => Err("pickle stack underflow".into()),
            Some(v) => Ok(v),
        }
    }
    fn top(&mut self) -> PResult<&mut Value> {
        self.stack
            .last_mut()
            .ok_or_else(|| "pickle stack underflow".to_string())
    }
    /// Pops everything above the topmost MARK (and the mark).
    fn pop_mark(&mut self) -> PResult<Vec<Value>> {
        let at = self
            .stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or("pickle MARK missing")?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items)
    }
    fn memo_put(&mut self, k: u32) -> PResult<()> {
        let v = self.stack.last().ok_or("pickle stack underflow")?.clone();
        self.memo.insert(k, v);
        Ok(())
    }
    fn memo_get(&mut self, k: u32) -> PResult<()> {
        let v = self
            .memo
            .get(&k)
            .ok_or_else(|| format!("pickle memo entry {k} missing"))?
            .clone();
        self.stack.push(v);
        Ok(())
    }
    fn global(&mut self, module: String, name: String) -> PResult<()> {
        if !name_tolerated(&module, &name) {
            return Err(refused(&module, &name));
        }
        self.stack.push(Value::Global(Rc::new((module, name))));
        Ok(())
    }
    fn set_items(&mut self, items: Vec<Value>) -> PResult<()> {
        if !items.len().is_multiple_of(2) {
            return Err("odd number of items for SETITEMS".into());
        }
        match self.top()? {
            Value::Dict(d) => {
                let mut d = d.borrow_mut();
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.push((k, v));
                }
                Ok(())
            }
            // Items of a dict subclass that is never built (e.g. Lightning's AttributeDict).
            Value::Opaque(_) => Ok(()),
            other => Err(format!("SETITEMS on a {}", other.describe())),
        }
    }
    fn append(&mut self, items: Vec<Value>) -> PResult<()> {
        match self.top()? {
            Value::List(l) => {
                l.borrow_mut().extend(items);
                Ok(())
            }
            Value::Opaque(_) => Ok(()),
            other => Err(format!("APPENDS on a {}", other.describe())),
        }
    }

    /// `callable(*args)` for the few callables we model; everything else is refused.
    fn reduce(&mut self, callable: Value, args: Value) -> PResult<Value> {
        let (module, name) = match &callable {
            Value::Global(g) => (g.0.as_str(), g.1.as_str()),
            other => {
                return Err(format!(
                    "pickle calls a {}, which imgseq does not do",
                    other.describe()
                ))
            }
        };
        let args = match args {
            Value::Tuple(t) => t,
            other => return Err(format!("REDUCE arguments are a {}", other.describe())),
        };
        match (module, name) {
            ("collections", "OrderedDict") if args.is_empty() => {
                Ok(Value::Dict(Rc::new(RefCell::new(Vec::new()))))
            }
            ("torch._utils", "_rebuild_tensor_v2") => {
                if args.len() < 4 {
                    return Err("_rebuild_tensor_v2 with too few arguments".into());
                }
                let (key, dtype, numel) = match &args[0] {
                    Value::Storage { key, dtype, numel } => (key.clone(), *dtype, *numel),
                    other => return Err(format!("tensor storage is a {}", other.describe())),
                };
                let offset = args[1].as_usize().ok_or("bad tensor storage offset")?;
                let size = args[2].as_usize_seq().ok_or("bad tensor size")?;
                let stride = args[3].as_usize_seq().ok_or("bad tensor stride")?;
                if size.len() != stride.len() {
                    return Err("tensor size and stride differ in length".into());
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
            ("torch._utils", "_rebuild_parameter") => match args.first() {
                Some(t @ Value::Tensor(_)) => Ok(t.clone()),
                _ => Err("_rebuild_parameter without a tensor".into()),
            },
            ("_codecs", "encode") => match args.first() {
                // protocol 2 pickles `bytes` as _codecs.encode(latin1 text, 'latin1').
                Some(Value::Str(s)) => Ok(Value::Bytes(
                    s.chars()
                        .map(|c| c as u32 as u8)
                        .collect::<Vec<u8>>()
                        .into(),
                )),
                _ => Err("_codecs.encode without a string".into()),
            },
            ("torch._tensor", "_rebuild_from_type_v2") => {
                // (func, new_type, args, state): a tensor subclass; keep the plain tensor.
                match (args.first(), args.get(2)) {
                    (Some(f @ Value::Global(_)), Some(a @ Value::Tuple(_))) => {
                        self.reduce(f.clone(), a.clone())
                    }
                    _ => Err("_rebuild_from_type_v2 with unexpected arguments".into()),
                }
            }
            _ if in_inert_module(module) => {
                Ok(Value::Opaque(Rc::new((module.into(), name.into()))))
            }
            _ => Err(refused(module, name)),
        }
    }

    /// `NEWOBJ`: `cls.__new__(cls, *args)`, only as an opaque placeholder.
    fn new_object(&mut self, cls: Value) -> PResult<Value> {
        match cls {
            Value::Global(g) if in_inert_module(&g.0) => Ok(Value::Opaque(g)),
            Value::Global(g) => Err(refused(&g.0, &g.1)),
            other => Err(format!(
                "pickle instantiates a {}, which imgseq does not do",
                other.describe()
            )),
        }
    }

    /// torch's persistent id: ('storage', storage_type, key, location, numel).
    fn persistent_load(&mut self, pid: Value) -> PResult<Value> {
        let t = match pid {
            Value::Tuple(t) if t.len() >= 5 => t,
            other => return Err(format!("unsupported persistent id ({})", other.describe())),
        };
        match (&t[0], &t[1], &t[2], &t[4]) {
            (Value::Str(tag), Value::Global(g), Value::Str(key), Value::Int(n))
                if &**tag == "storage"
                    && (g.0 == "torch" || g.0.starts_with("torch."))
                    && *n >= 0 =>
            {
                let (m, cls) = (&g.0, &g.1);
                let dtype = StorageDType::from_class(cls)
                    .ok_or_else(|| format!("unsupported storage type `{m}.{cls}`"))?;
                Ok(Value::Storage {
                    key: key.to_string(),
                    dtype,
                    numel: *n as usize,
                })
            }
            _ => Err("unsupported persistent id".into()),
        }
    }

    fn run(mut self) -> PResult<Value> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO
                }
                0x95 => {
                    self.u64()?; // FRAME: length hint only
                }
                b'.' => return self.pop(), // STOP
                b'(' => self.stack.push(Value::Mark),
                b'0' => {
                    self.stack.pop().ok_or("pickle stack underflow")?; // POP
                }
                b'1' => {
                    self.pop_mark()?; // POP_MARK
                }
                b'2' => {
                    let v = self.stack.last().ok_or("pickle stack underflow")?.clone(); // DUP
                    self.stack.push(v);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = self.u32()? as i32;
                    self.stack.push(Value::Int(v as i64))
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v as i64))
                }
                b'M' => {
                    let v = self.u16()?;
                    self.stack.push(Value::Int(v as i64))
                }
                0x8a | 0x8b => {
                    // LONG1 / LONG4: little-endian two's complement of n bytes.
                    let n = if op == 0x8a {
                        self.u8()? as usize
                    } else {
                        self.u32()? as usize
                    };
                    let b = self.take(n)?;
                    if n > 8 {
                        return Err("integer too large in pickle".into());
                    }
                    let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) {
                        [0xffu8; 8]
                    } else {
                        [0u8; 8]
                    };
                    buf[..n].copy_from_slice(b);
                    self.stack.push(Value::Int(i64::from_le_bytes(buf)))
                }
                b'I' => {
                    // INT (text): also encodes True/False as 01/00.
                    let l = self.line()?;
                    let v = match l.as_str() {
                        "01" => Value::Bool(true),
                        "00" => Value::Bool(false),
                        s => Value::Int(s.parse().map_err(|_| "bad INT in pickle")?),
                    };
                    self.stack.push(v)
                }
                b'G' => {
                    let b = self.take(8)?;
                    self.stack
                        .push(Value::Float(f64::from_be_bytes(b.try_into().unwrap())))
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let v = self.utf8(n)?;
                    self.stack.push(v)
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.utf8(n)?;
                    self.stack.push(v)
                }
                0x8d => {
                    let n = self.u64()? as usize;
                    let v = self.utf8(n)?;
                    self.stack.push(v)
                }
                b'B' | b'C' | 0x8e | b'T' | b'U' => {
                    let n = match op {
                        b'B' | b'T' => self.u32()? as usize,
                        b'C' | b'U' => self.u8()? as usize,
                        _ => self.u64()? as usize,
                    };
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b.into()))
                }
                b')' => self.stack.push(Value::Tuple(Rc::new(Vec::new()))),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(Rc::new(items)))
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.stack.push(Value::Tuple(Rc::new(items)))
                }
                b']' => self
                    .stack
                    .push(Value::List(Rc::new(RefCell::new(Vec::new())))),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(Rc::new(RefCell::new(items))))
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?
                }
                // Sets become lists: EMPTY_SET, ADDITEMS, FROZENSET.
                0x8f => self
                    .stack
                    .push(Value::List(Rc::new(RefCell::new(Vec::new())))),
                0x90 => {
                    let items = self.pop_mark()?;
                    self.append(items)?
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(Rc::new(RefCell::new(items))))
                }
                b'}' => self
                    .stack
                    .push(Value::Dict(Rc::new(RefCell::new(Vec::new())))),
                b'd' => {
                    let items = self.pop_mark()?;
                    self.stack
                        .push(Value::Dict(Rc::new(RefCell::new(Vec::new()))));
                    self.set_items(items)?
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?
                }
                b'q' => {
                    let k = self.u8()? as u32;
                    self.memo_put(k)?
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?
                }
                0x94 => {
                    let k = self.memo.len() as u32; // MEMOIZE
                    self.memo_put(k)?
                }
                b'h' => {
                    let k = self.u8()? as u32;
                    self.memo_get(k)?
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(module, name)?
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => {
                            self.global(m.to_string(), n.to_string())?
                        }
                        _ => return Err("STACK_GLOBAL without strings".into()),
                    }
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.reduce(callable, args)?;
                    self.stack.push(v)
                }
                b'b' => {
                    // BUILD would set attributes / call __setstate__; we drop the state.
                    self.pop()?;
                    self.top()?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent_load(pid)?;
                    self.stack.push(v)
                }
                0x81 => {
                    self.pop()?; // args
                    let cls = self.pop()?;
                    let v = self.new_object(cls)?;
                    self.stack.push(v)
                }
                0x92 => {
                    self.pop()?; // kwargs
                    self.pop()?; // args
                    let cls = self.pop()?;
                    let v = self.new_object(cls)?;
                    self.stack.push(v)
                }
                b'i' | b'o' => {
                    // INST, OBJ (protocol 0/1 instantiation; torch.save never emits them).
                    let what = match self
                        .stack
                        .iter()
                        .rev()
                        .find(|v| matches!(v, Value::Global(_)))
                    {
                        Some(Value::Global(g)) => format!("`{}.{}`", g.0, g.1),
                        _ => "a class".to_string(),
                    };
                    if op == b'i' {
                        let m = self.line()?;
                        let n = self.line()?;
                        return Err(refused(&m, &n));
                    }
                    return Err(format!(
                        "pickle instantiates {what}; imgseq only reads tensors and plain containers"
                    ));
                }
                b'P' => {
                    return Err("pickle uses a text persistent id; not a torch.save file".into())
                }
                0x82..=0x84 => {
                    return Err("pickle uses the extension registry (EXT*); refused".into())
                }
                other => {
                    return Err(format!(
                        "unsupported pickle opcode 0x{other:02x} at byte {}",
                        self.pos - 1
                    ))
                }
            }
        }
    }
}

/// A torch zip checkpoint, opened: the parsed object tree and access to its storages.
pub struct Checkpoint {
    path: PathBuf,
    archive: zip::ZipArchive<std::fs::File>,
    prefix: String,
    root: Value,
    cache: HashMap<String, Rc<Vec<u8>>>,
}

impl Checkpoint {
    /// Opens `path` and interprets its pickle (no tensor data is read yet).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let mut archive = zip::ZipArchive::new(file).map_err(|e| {
            Error::format(
                &path,
                format!("not a readable PyTorch zip checkpoint ({e}); truncated, or saved by torch < 1.6"),
            )
        })?;
        let pkl = archive
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .find(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
            .ok_or_else(|| {
                Error::format(&path, "zip archive has no data.pkl; not a torch.save file")
            })?;
        let prefix = pkl.strip_suffix("data.pkl").unwrap_or("").to_string();
        let bytes = read_entry(&mut archive, &pkl, &path)?;
        let root = Machine::new(&bytes)
            .run()
            .map_err(|m| Error::format(&path, m))?;
        Ok(Self {
            path,
            archive,
            prefix,
            root,
            cache: HashMap::new(),
        })
    }

    /// Names of the top-level keys (e.g. `state_dict`, `epoch`, `global_step`).
    pub fn top_level_keys(&self) -> Vec<String> {
        match &self.root {
            Value::Dict(d) => d
                .borrow()
                .iter()
                .filter_map(|(k, _)| match k {
                    Value::Str(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Name, dtype and shape of every tensor of [`Self::state_dict`], without reading data.
    pub fn tensor_infos(&self) -> Result<Vec<(String, StorageDType, Vec<usize>)>> {
        Ok(self
            .state_dict_refs()?
            .into_iter()
            .map(|(k, t)| (k, t.dtype, t.size.clone()))
            .collect())
    }

    /// Top-level entries that are plain scalars (`epoch: 3`, `global_step: 10`, ...).
    pub fn scalars(&self) -> Vec<(String, String)> {
        let Value::Dict(d) = &self.root else {
            return Vec::new();
        };
        d.borrow()
            .iter()
            .filter_map(|(k, v)| {
                let Value::Str(k) = k else { return None };
                let v = match v {
                    Value::Int(i) => i.to_string(),
                    Value::Float(f) => f.to_string(),
                    Value::Bool(b) => b.to_string(),
                    Value::Str(s) => format!("{s:?}"),
                    Value::Bytes(b) => format!("<{} bytes>", b.len()),
                    Value::Opaque(g) => format!("<{}.{} object, not built>", g.0, g.1),
                    _ => return None,
                };
                Some((k.to_string(), v))
            })
            .collect()
    }

    fn state_dict_refs(&self) -> Result<Vec<(String, Rc<TensorRef>)>> {
        let dict = match &self.root {
            Value::Dict(d) => {
                let sd = d.borrow().iter().find_map(|(k, v)| match (k, v) {
                    (Value::Str(k), Value::Dict(sd)) if &**k == "state_dict" => Some(sd.clone()),
                    _ => None,
                });
                sd.unwrap_or_else(|| d.clone())
            }
            other => {
                return Err(Error::format(
                    &self.path,
                    format!(
                        "checkpoint holds a {}, not a dict of tensors",
                        other.describe()
                    ),
                ))
            }
        };
        let entries: Vec<(String, Rc<TensorRef>)> = dict
            .borrow()
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Value::Str(k), Value::Tensor(t)) => Some((k.to_string(), t.clone())),
                _ => None,
            })
            .collect();
        if entries.is_empty() {
            return Err(Error::format(&self.path, "checkpoint holds no tensors"));
        }
        Ok(entries)
    }

    /// The tensors of the model: the `state_dict` entry of a Lightning checkpoint, or the
    /// top-level dict itself for a plain `torch.save(model.state_dict())`. Entries in file
    /// order; non-tensor values are skipped.
    pub fn state_dict(&mut self, device: &Device) -> Result<Vec<(String, CkptTensor)>> {
        let entries = self.state_dict_refs()?;
        // Storage bytes are kept only while a later tensor still needs them, so the peak is
        // about one copy of the model (plus one storage), not two.
        let mut pending: HashMap<String, usize> = HashMap::new();
        for (_, t) in &entries {
            *pending.entry(t.key.clone()).or_default() += 1;
        }
        let mut out = Vec::with_capacity(entries.len());
        for (name, t) in entries {
            let tensor = self.materialise(&name, &t, device)?;
            let left = pending.get_mut(&t.key).expect("counted");
            *left -= 1;
            if *left == 0 {
                self.cache.remove(&t.key);
            }
            out.push((
                name,
                CkptTensor {
                    dtype: t.dtype,
                    tensor,
                },
            ));
        }
        Ok(out)
    }

    fn storage(&mut self, key: &str, t: &TensorRef) -> Result<Rc<Vec<u8>>> {
        if let Some(b) = self.cache.get(key) {
            return Ok(b.clone());
        }
        let name = format!("{}data/{key}", self.prefix);
        if self.archive.by_name(&name).is_err() {
            return Err(Error::format(
                &self.path,
                format!("storage `{name}` is missing from the archive"),
            ));
        }
        let bytes = read_entry(&mut self.archive, &name, &self.path)?;
        let want = t.storage_numel.saturating_mul(t.dtype.size());
        if bytes.len() < want {
            return Err(Error::format(
                &self.path,
                format!(
                    "storage `{name}` has {} bytes, {want} expected (truncated file)",
                    bytes.len()
                ),
            ));
        }
        let b = Rc::new(bytes);
        self.cache.insert(key.to_string(), b.clone());
        Ok(b)
    }

    fn materialise(&mut self, name: &str, t: &TensorRef, device: &Device) -> Result<Tensor> {
        let storage = self.storage(&t.key, t)?;
        let es = t.dtype.size();
        let bad = |m: &str| Error::format(&self.path, format!("tensor `{name}` {m}"));
        // Element count and largest element index touched, with overflow checks: the sizes
        // come from the file and may be anything.
        let numel = t
            .size
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s))
            .ok_or_else(|| bad("has an impossible size"))?;
        let last = t
            .size
            .iter()
            .zip(&t.stride)
            .try_fold(t.offset, |a, (s, st)| {
                a.checked_add(s.saturating_sub(1).checked_mul(*st)?)
            })
            .ok_or_else(|| bad("has an impossible stride"))?;
        let avail = storage.len() / es;
        if numel > 0 && (last >= avail || last >= t.storage_numel) {
            return Err(bad("points outside its storage"));
        }
        // Views may repeat elements (stride 0); refuse absurd expansions instead of aborting
        // on allocation.
        if numel.saturating_mul(es) > MAX_TENSOR_BYTES {
            return Err(bad("is larger than imgseq accepts (16 GiB)"));
        }
        // Gather the view into contiguous bytes (row-major over `size`).
        let mut bytes = Vec::with_capacity(numel * es);
        let contiguous = {
            let mut expect = 1;
            let mut ok = true;
            for (s, st) in t.size.iter().zip(&t.stride).rev() {
                if *s != 1 && *st != expect {
                    ok = false;
                }
                expect *= s;
            }
            ok
        };
        if contiguous {
            bytes.extend_from_slice(&storage[t.offset * es..(t.offset + numel) * es]);
        } else if numel > 0 {
            let mut idx = vec![0usize; t.size.len()];
            for _ in 0..numel {
                let off = t.offset + idx.iter().zip(&t.stride).map(|(i, s)| i * s).sum::<usize>();
                bytes.extend_from_slice(&storage[off * es..(off + 1) * es]);
                for d in (0..idx.len()).rev() {
                    idx[d] += 1;
                    if idx[d] < t.size[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        let shape = t.size.clone();
        let raw = |dt: DType| Tensor::from_raw_buffer(&bytes, dt, &shape, &Device::Cpu);
        let tensor = match t.dtype {
            StorageDType::F32 => raw(DType::F32)?,
            StorageDType::F64 => raw(DType::F64)?.to_dtype(DType::F32)?,
            StorageDType::F16 => raw(DType::F16)?.to_dtype(DType::F32)?,
            StorageDType::BF16 => raw(DType::BF16)?.to_dtype(DType::F32)?,
            StorageDType::I64 => raw(DType::I64)?,
            StorageDType::I32 => raw(DType::I32)?.to_dtype(DType::I64)?,
            StorageDType::I16 => raw(DType::I16)?.to_dtype(DType::I64)?,
            StorageDType::I8 => {
                let v: Vec<i64> = bytes.iter().map(|&b| b as i8 as i64).collect();
                Tensor::from_vec(v, shape.as_slice(), &Device::Cpu)?
            }
            StorageDType::U8 | StorageDType::Bool => raw(DType::U8)?,
        };
        Ok(tensor.to_device(device)?)
    }
}

fn read_entry(
    archive: &mut zip::ZipArchive<std::fs::File>,
    name: &str,
    path: &Path,
) -> Result<Vec<u8>> {
    let mut f = archive
        .by_name(name)
        .map_err(|e| Error::format(path, format!("cannot open `{name}` in the archive ({e})")))?;
    // The declared size is only a hint (a damaged archive may claim anything).
    let mut buf = Vec::with_capacity((f.size() as usize).min(1 << 28));
    f.read_to_end(&mut buf)
        .map_err(|e| Error::format(path, format!("cannot read `{name}` ({e}); truncated file?")))?;
    Ok(buf)
}

/// Reads the model tensors of a checkpoint (see [`Checkpoint::state_dict`]).
pub fn read_state_dict(
    path: impl AsRef<Path>,
    device: &Device,
) -> Result<Vec<(String, CkptTensor)>> {
    Checkpoint::open(path)?.state_dict(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bytes: &[u8]) -> PResult<Value> {
        Machine::new(bytes).run()
    }

    #[test]
    fn os_system_is_refused_before_anything_runs() {
        // cos\nsystem\n(S'echo pwned'\ntR.  (protocol 0)
        let p = b"cos\nsystem\n(X\x0a\x00\x00\x00echo pwnedtR.";
        let e = run(p).unwrap_err();
        assert_eq!(
            e,
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
        let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
        let pkl = read_entry(&mut z, "tiny/data.pkl", Path::new(path)).unwrap();
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

    /// Re-using memoised values is cheap (shared, not copied): a pickle that doubles a tuple
    /// 60 times would need 2^60 copies otherwise.
    #[test]
    fn memo_references_are_shared_not_copied() {
        let mut p = b"\x80\x02X\x04\x00\x00\x00abcdq\x00".to_vec();
        for i in 0..60u8 {
            p.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
        }
        p.push(b'.');
        assert!(matches!(run(&p).unwrap(), Value::Tuple(_)));
    }

    #[test]
    fn long1_negative() {
        let v = run(b"\x8a\x02\x00\xff.").unwrap();
        assert!(matches!(v, Value::Int(-256)), "{v:?}");
    }
}
