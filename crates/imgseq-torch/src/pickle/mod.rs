//! The pickle machine: interprets the opcodes that `torch.save` emits on a stack of plain
//! [`Value`]s and never imports or calls anything (see [`globals`] for the allowlist).
//!
//! `BUILD` only discards the state it would set (e.g. a state dict's `_metadata`), except on a
//! TorchScript module object ([`Flavor::TorchScript`]), whose attribute dict it keeps;
//! `INST`, `OBJ`, `EXT*` and `PERSID` are refused, and so is every opcode not handled here.

mod globals;
mod value;

#[cfg(test)]
mod tests;

pub(crate) use value::{Pairs, ScriptObject, Value};

use crate::error::PickleError;
use crate::opcodes as op;
use std::collections::HashMap;

type PResult<T> = std::result::Result<T, PickleError>;

/// What wrote the pickle, which decides what it may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `torch.save`: plain containers and tensors.
    TorchSave,
    /// `torch.jit.save`'s `data.pkl`: also module objects of `__torch__.*` classes, made by
    /// `NEWOBJ` without arguments and given their attribute dict by `BUILD` (never imported,
    /// never run; the archive's `code/` is not read).
    TorchScript,
}

/// Interprets the pickle `data` and returns the object it describes.
pub(crate) fn load(data: &[u8], flavor: Flavor) -> PResult<Value> {
    Machine::new(data, flavor).run()
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    memo: HashMap<u32, Value>,
    flavor: Flavor,
}

impl<'a> Machine<'a> {
    fn new(data: &'a [u8], flavor: Flavor) -> Self {
        Self {
            data,
            pos: 0,
            stack: Vec::new(),
            memo: HashMap::new(),
            flavor,
        }
    }

    // Reading the opcode stream.

    fn take(&mut self, n: usize) -> PResult<&'a [u8]> {
        if n > self.data.len() - self.pos {
            return Err(PickleError::Truncated);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn take_array<const N: usize>(&mut self) -> PResult<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
    fn u8(&mut self) -> PResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> PResult<u16> {
        Ok(u16::from_le_bytes(self.take_array()?))
    }
    fn u32(&mut self) -> PResult<u32> {
        Ok(u32::from_le_bytes(self.take_array()?))
    }
    fn u64(&mut self) -> PResult<u64> {
        Ok(u64::from_le_bytes(self.take_array()?))
    }
    /// A `\n`-terminated text argument (protocol 0 opcodes).
    fn line(&mut self) -> PResult<String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::UnterminatedLine)?;
        self.pos += end + 1;
        String::from_utf8(rest[..end].to_vec()).map_err(|_| PickleError::NonUtf8Line)
    }
    fn utf8(&mut self, n: usize) -> PResult<Value> {
        let b = self.take(n)?;
        let s = std::str::from_utf8(b).map_err(|_| PickleError::NonUtf8String)?;
        Ok(Value::Str(s.into()))
    }
    /// LONG1 / LONG4 payload: little-endian two's complement of `n` bytes, at most 8.
    fn long(&mut self, n: usize) -> PResult<Value> {
        let b = self.take(n)?;
        if n > 8 {
            return Err(PickleError::IntTooLarge);
        }
        let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) {
            [0xffu8; 8]
        } else {
            [0u8; 8]
        };
        buf[..n].copy_from_slice(b);
        Ok(Value::Int(i64::from_le_bytes(buf)))
    }

    // The stack and the memo.

    /// Pops a value (not a mark).
    fn pop(&mut self) -> PResult<Value> {
        match self.stack.pop() {
            Some(Value::Mark) | None => Err(PickleError::StackUnderflow),
            Some(v) => Ok(v),
        }
    }
    fn top(&mut self) -> PResult<&mut Value> {
        self.stack.last_mut().ok_or(PickleError::StackUnderflow)
    }
    /// Pops everything above the topmost MARK (and the mark).
    fn pop_mark(&mut self) -> PResult<Vec<Value>> {
        let at = self
            .stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or(PickleError::MarkMissing)?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items)
    }
    fn memo_put(&mut self, k: u32) -> PResult<()> {
        let v = self
            .stack
            .last()
            .ok_or(PickleError::StackUnderflow)?
            .clone();
        self.memo.insert(k, v);
        Ok(())
    }
    fn memo_get(&mut self, k: u32) -> PResult<()> {
        let v = self
            .memo
            .get(&k)
            .ok_or(PickleError::MemoMissing(k))?
            .clone();
        self.stack.push(v);
        Ok(())
    }

    // Filling containers.

    /// Depth of the deepest of `items`, read before the container they go into is borrowed
    /// mutably (an item may be that container).
    fn items_depth(items: &[Value]) -> u32 {
        items.iter().map(Value::depth).max().unwrap_or(0)
    }

    fn set_items(&mut self, items: Vec<Value>) -> PResult<()> {
        if !items.len().is_multiple_of(2) {
            return Err(PickleError::OddSetItems);
        }
        let depth = Self::items_depth(&items);
        match self.top()? {
            Value::Dict(d) => d.borrow_mut().extend(items, depth),
            // Items of a dict subclass that is never built (e.g. Lightning's AttributeDict).
            Value::Opaque(_) => Ok(()),
            other => Err(PickleError::NotAContainer {
                op: "SETITEMS",
                found: other.describe(),
            }),
        }
    }
    fn append(&mut self, items: Vec<Value>) -> PResult<()> {
        let depth = Self::items_depth(&items);
        match self.top()? {
            Value::List(l) => l.borrow_mut().extend(items, depth),
            Value::Opaque(_) => Ok(()),
            other => Err(PickleError::NotAContainer {
                op: "APPENDS",
                found: other.describe(),
            }),
        }
    }
    /// TUPLE1..TUPLE3: the top `n` values as a tuple.
    fn tuple_of_top(&mut self, n: usize) -> PResult<Value> {
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.pop()?);
        }
        items.reverse();
        Value::tuple(items)
    }

    /// Runs to STOP and returns the value on top of the stack.
    fn run(mut self) -> PResult<Value> {
        loop {
            let code = self.u8()?;
            if code == op::STOP {
                return self.pop();
            }
            if let Some(v) = self.step(code)? {
                self.stack.push(v);
            }
        }
    }

    /// One opcode (not STOP): the value it pushes, if any. Opcodes go to their group's
    /// method; anything else is refused.
    fn step(&mut self, code: u8) -> PResult<Option<Value>> {
        match code {
            op::PROTO | op::FRAME | op::MARK | op::POP | op::POP_MARK | op::DUP => {
                self.stack_op(code)
            }
            op::NONE
            | op::NEWTRUE
            | op::NEWFALSE
            | op::BININT
            | op::BININT1
            | op::BININT2
            | op::LONG1
            | op::LONG4
            | op::INT
            | op::BINFLOAT => self.scalar(code).map(Some),
            op::BINUNICODE
            | op::SHORT_BINUNICODE
            | op::BINUNICODE8
            | op::BINBYTES
            | op::BINSTRING
            | op::SHORT_BINBYTES
            | op::SHORT_BINSTRING
            | op::BINBYTES8 => self.string(code).map(Some),
            op::EMPTY_TUPLE
            | op::TUPLE
            | op::TUPLE1
            | op::TUPLE2
            | op::TUPLE3
            | op::EMPTY_LIST
            | op::EMPTY_SET
            | op::LIST
            | op::FROZENSET
            | op::APPEND
            | op::APPENDS
            | op::ADDITEMS
            | op::EMPTY_DICT
            | op::DICT
            | op::SETITEM
            | op::SETITEMS => self.collection(code),
            op::BINPUT | op::LONG_BINPUT | op::MEMOIZE | op::BINGET | op::LONG_BINGET => {
                self.memo_op(code).map(|()| None)
            }
            _ => self.object(code),
        }
    }

    /// Framing and stack manipulation.
    fn stack_op(&mut self, code: u8) -> PResult<Option<Value>> {
        match code {
            op::PROTO => {
                self.u8()?;
            }
            op::FRAME => {
                self.u64()?; // length hint only
            }
            op::MARK => return Ok(Some(Value::Mark)),
            op::POP => {
                self.stack.pop().ok_or(PickleError::StackUnderflow)?;
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            _ => {
                let top = self.stack.last().ok_or(PickleError::StackUnderflow)?;
                return Ok(Some(top.clone())); // DUP
            }
        }
        Ok(None)
    }

    /// None, booleans, integers, floats.
    fn scalar(&mut self, code: u8) -> PResult<Value> {
        Ok(match code {
            op::NONE => Value::None,
            op::NEWTRUE => Value::Bool(true),
            op::NEWFALSE => Value::Bool(false),
            op::BININT => Value::Int(self.u32()? as i32 as i64),
            op::BININT1 => Value::Int(self.u8()? as i64),
            op::BININT2 => Value::Int(self.u16()? as i64),
            op::LONG1 => {
                let n = self.u8()? as usize;
                self.long(n)?
            }
            op::LONG4 => {
                let n = self.u32()? as usize;
                self.long(n)?
            }
            op::INT => {
                // Also encodes True/False as 01/00.
                match self.line()?.as_str() {
                    "01" => Value::Bool(true),
                    "00" => Value::Bool(false),
                    s => Value::Int(s.parse().map_err(|_| PickleError::BadInt)?),
                }
            }
            _ => Value::Float(f64::from_be_bytes(self.take_array()?)), // BINFLOAT
        })
    }

    /// Text and byte strings.
    fn string(&mut self, code: u8) -> PResult<Value> {
        let n = match code {
            op::SHORT_BINUNICODE | op::SHORT_BINBYTES | op::SHORT_BINSTRING => self.u8()? as usize,
            op::BINUNICODE | op::BINBYTES | op::BINSTRING => self.u32()? as usize,
            _ => self.u64()? as usize, // BINUNICODE8, BINBYTES8
        };
        match code {
            op::BINUNICODE | op::SHORT_BINUNICODE | op::BINUNICODE8 => self.utf8(n),
            _ => Ok(Value::Bytes(self.take(n)?.into())),
        }
    }

    /// Tuples, lists, sets (as lists) and dicts.
    fn collection(&mut self, code: u8) -> PResult<Option<Value>> {
        let v = match code {
            op::EMPTY_TUPLE => Value::tuple(Vec::new())?,
            op::TUPLE => {
                let items = self.pop_mark()?;
                Value::tuple(items)?
            }
            op::TUPLE1 => self.tuple_of_top(1)?,
            op::TUPLE2 => self.tuple_of_top(2)?,
            op::TUPLE3 => self.tuple_of_top(3)?,
            op::EMPTY_LIST | op::EMPTY_SET => Value::empty_list(),
            op::LIST | op::FROZENSET => {
                let items = self.pop_mark()?;
                Value::list(items)?
            }
            op::EMPTY_DICT => Value::empty_dict(),
            op::APPEND => {
                let v = self.pop()?;
                self.append(vec![v])?;
                return Ok(None);
            }
            op::APPENDS | op::ADDITEMS => {
                let items = self.pop_mark()?;
                self.append(items)?;
                return Ok(None);
            }
            op::DICT => {
                let items = self.pop_mark()?;
                self.stack.push(Value::empty_dict());
                self.set_items(items)?;
                return Ok(None);
            }
            op::SETITEM => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.set_items(vec![k, v])?;
                return Ok(None);
            }
            _ => {
                let items = self.pop_mark()?; // SETITEMS
                self.set_items(items)?;
                return Ok(None);
            }
        };
        Ok(Some(v))
    }

    /// The memo: BINPUT, LONG_BINPUT, MEMOIZE store the top; BINGET, LONG_BINGET push a copy.
    fn memo_op(&mut self, code: u8) -> PResult<()> {
        match code {
            op::BINPUT => {
                let k = self.u8()? as u32;
                self.memo_put(k)
            }
            op::LONG_BINPUT => {
                let k = self.u32()?;
                self.memo_put(k)
            }
            op::MEMOIZE => self.memo_put(self.memo.len() as u32),
            op::BINGET => {
                let k = self.u8()? as u32;
                self.memo_get(k)
            }
            _ => {
                let k = self.u32()?; // LONG_BINGET
                self.memo_get(k)
            }
        }
    }

    /// Names, calls, objects: inert or refused (see `globals`); every opcode not handled by
    /// the other groups ends here and is refused.
    fn object(&mut self, code: u8) -> PResult<Option<Value>> {
        Ok(Some(match code {
            op::GLOBAL => {
                let module = self.line()?;
                let name = self.line()?;
                globals::global(module, name, self.flavor)?
            }
            op::STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (module, name) {
                    (Value::Str(m), Value::Str(n)) => {
                        globals::global(m.to_string(), n.to_string(), self.flavor)?
                    }
                    _ => return Err(PickleError::StackGlobalWithoutStrings),
                }
            }
            op::REDUCE => {
                let args = self.pop()?;
                let callable = self.pop()?;
                globals::reduce(callable, args)?
            }
            op::BUILD => {
                let state = self.pop()?;
                match self.top()? {
                    // A TorchScript module's attributes.
                    Value::Object(o) => globals::build_object(o, state)?,
                    // Would set attributes / call __setstate__; the state is dropped.
                    _ => drop(state),
                }
                return Ok(None);
            }
            op::BINPERSID => {
                let pid = self.pop()?;
                globals::persistent_load(pid)?
            }
            op::NEWOBJ => {
                let args = self.pop()?;
                let cls = self.pop()?;
                globals::new_object(cls, &args, None)?
            }
            op::NEWOBJ_EX => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let cls = self.pop()?;
                globals::new_object(cls, &args, Some(&kwargs))?
            }
            _ => return Err(self.refused(code)),
        }))
    }

    /// The error of an opcode never run: protocol 0/1 instantiation (torch.save never emits
    /// it), text persistent ids, the extension registry, and any opcode not handled here.
    fn refused(&mut self, code: u8) -> PickleError {
        match code {
            op::INST => match (self.line(), self.line()) {
                (Ok(module), Ok(name)) => globals::refused(&module, &name),
                (Err(e), _) | (_, Err(e)) => e,
            },
            op::OBJ => {
                let class = self.stack.iter().rev().find_map(|v| match v {
                    Value::Global(g) => Some((g.0.clone(), g.1.clone())),
                    _ => None,
                });
                PickleError::ForbiddenInstance { class }
            }
            op::PERSID => PickleError::TextPersistentId,
            op::EXT1 | op::EXT2 | op::EXT4 => PickleError::ExtensionRegistry,
            other => PickleError::UnsupportedOpcode {
                op: other,
                name: op::name(other),
                at: self.pos - 1,
            },
        }
    }
}
