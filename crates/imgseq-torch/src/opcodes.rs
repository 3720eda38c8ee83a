//! The pickle opcodes, named as in CPython's `Lib/pickle.py`, each with the protocol that
//! introduced it. Protocol 0 is the text protocol, 1 the first binary one; `torch.save`
//! writes protocol 2 by default.
//!
//! Every opcode is listed (not only those the interpreter accepts) so that an error can
//! name the opcode it refuses.

// Protocol 0: stack and memo.
/// Push a mark object (protocol 0).
pub const MARK: u8 = b'(';
/// Every pickle ends with STOP (protocol 0).
pub const STOP: u8 = b'.';
/// Discard the top of the stack (protocol 0).
pub const POP: u8 = b'0';
/// Discard the stack through the topmost mark (protocol 1).
pub const POP_MARK: u8 = b'1';
/// Duplicate the top of the stack (protocol 0).
pub const DUP: u8 = b'2';
/// Push the memo entry named by a decimal text line (protocol 0).
pub const GET: u8 = b'g';
/// Push the memo entry with a 1-byte index (protocol 1).
pub const BINGET: u8 = b'h';
/// Push the memo entry with a 4-byte index (protocol 1).
pub const LONG_BINGET: u8 = b'j';
/// Store the top of the stack in the memo, index as a decimal text line (protocol 0).
pub const PUT: u8 = b'p';
/// Store the top of the stack in the memo, 1-byte index (protocol 1).
pub const BINPUT: u8 = b'q';
/// Store the top of the stack in the memo, 4-byte index (protocol 1).
pub const LONG_BINPUT: u8 = b'r';

// Scalars.
/// Push `None` (protocol 0).
pub const NONE: u8 = b'N';
/// Push an integer (or a `01`/`00` boolean) written as a decimal text line (protocol 0).
pub const INT: u8 = b'I';
/// Push a 4-byte signed integer (protocol 1).
pub const BININT: u8 = b'J';
/// Push a 1-byte unsigned integer (protocol 1).
pub const BININT1: u8 = b'K';
/// Push a 2-byte unsigned integer (protocol 1).
pub const BININT2: u8 = b'M';
/// Push a long integer written as a decimal text line (protocol 0).
pub const LONG: u8 = b'L';
/// Push a float written as a decimal text line (protocol 0).
pub const FLOAT: u8 = b'F';
/// Push an 8-byte big-endian float (protocol 1).
pub const BINFLOAT: u8 = b'G';
/// Push `True` (protocol 2).
pub const NEWTRUE: u8 = 0x88;
/// Push `False` (protocol 2).
pub const NEWFALSE: u8 = 0x89;
/// Push a long integer of a 1-byte length, little-endian two's complement (protocol 2).
pub const LONG1: u8 = 0x8a;
/// Push a long integer of a 4-byte length, little-endian two's complement (protocol 2).
pub const LONG4: u8 = 0x8b;

// Strings and bytes.
/// Push a quoted, escaped string from a text line (protocol 0).
pub const STRING: u8 = b'S';
/// Push a raw-unicode-escaped string from a text line (protocol 0).
pub const UNICODE: u8 = b'V';
/// Push a byte string with a 4-byte length (protocol 1).
pub const BINSTRING: u8 = b'T';
/// Push a byte string with a 1-byte length (protocol 1).
pub const SHORT_BINSTRING: u8 = b'U';
/// Push a UTF-8 string with a 4-byte length (protocol 1).
pub const BINUNICODE: u8 = b'X';
/// Push a UTF-8 string with a 1-byte length (protocol 4).
pub const SHORT_BINUNICODE: u8 = 0x8c;
/// Push a UTF-8 string with an 8-byte length (protocol 4).
pub const BINUNICODE8: u8 = 0x8d;
/// Push `bytes` with a 4-byte length (protocol 3).
pub const BINBYTES: u8 = b'B';
/// Push `bytes` with a 1-byte length (protocol 3).
pub const SHORT_BINBYTES: u8 = b'C';
/// Push `bytes` with an 8-byte length (protocol 4).
pub const BINBYTES8: u8 = 0x8e;
/// Push a `bytearray` with an 8-byte length (protocol 5).
pub const BYTEARRAY8: u8 = 0x96;
/// Push an out-of-band buffer (protocol 5).
pub const NEXT_BUFFER: u8 = 0x97;
/// Make the buffer on top of the stack read-only (protocol 5).
pub const READONLY_BUFFER: u8 = 0x98;

// Containers.
/// Push an empty tuple (protocol 1).
pub const EMPTY_TUPLE: u8 = b')';
/// Build a tuple of everything above the topmost mark (protocol 0).
pub const TUPLE: u8 = b't';
/// Build a 1-tuple from the top of the stack (protocol 2).
pub const TUPLE1: u8 = 0x85;
/// Build a 2-tuple from the top two stack items (protocol 2).
pub const TUPLE2: u8 = 0x86;
/// Build a 3-tuple from the top three stack items (protocol 2).
pub const TUPLE3: u8 = 0x87;
/// Push an empty list (protocol 1).
pub const EMPTY_LIST: u8 = b']';
/// Build a list of everything above the topmost mark (protocol 0).
pub const LIST: u8 = b'l';
/// Append the top of the stack to the list below it (protocol 0).
pub const APPEND: u8 = b'a';
/// Extend the list below the topmost mark with the items above it (protocol 1).
pub const APPENDS: u8 = b'e';
/// Push an empty dict (protocol 1).
pub const EMPTY_DICT: u8 = b'}';
/// Build a dict of the key/value pairs above the topmost mark (protocol 0).
pub const DICT: u8 = b'd';
/// Set one key/value pair on the dict below them (protocol 0).
pub const SETITEM: u8 = b's';
/// Set the key/value pairs above the topmost mark on the dict below it (protocol 1).
pub const SETITEMS: u8 = b'u';
/// Push an empty set (protocol 4).
pub const EMPTY_SET: u8 = 0x8f;
/// Add the items above the topmost mark to the set below it (protocol 4).
pub const ADDITEMS: u8 = 0x90;
/// Build a frozenset of the items above the topmost mark (protocol 4).
pub const FROZENSET: u8 = 0x91;

// Names, calls and objects.
/// Push `module.name`, both as text lines (protocol 0).
pub const GLOBAL: u8 = b'c';
/// Push `module.name` from the two strings on top of the stack (protocol 4).
pub const STACK_GLOBAL: u8 = 0x93;
/// Call the callable below the top of the stack with the argument tuple on top (protocol 0).
pub const REDUCE: u8 = b'R';
/// Set an object's state: `__setstate__` or `__dict__.update` (protocol 0).
pub const BUILD: u8 = b'b';
/// Build an instance of a class named by text lines (protocol 0).
pub const INST: u8 = b'i';
/// Build an instance of the class above the topmost mark (protocol 1).
pub const OBJ: u8 = b'o';
/// `cls.__new__(cls, *args)` (protocol 2).
pub const NEWOBJ: u8 = 0x81;
/// `cls.__new__(cls, *args, **kwargs)` (protocol 4).
pub const NEWOBJ_EX: u8 = 0x92;
/// Push an object from the extension registry, 1-byte code (protocol 2).
pub const EXT1: u8 = 0x82;
/// Push an object from the extension registry, 2-byte code (protocol 2).
pub const EXT2: u8 = 0x83;
/// Push an object from the extension registry, 4-byte code (protocol 2).
pub const EXT4: u8 = 0x84;
/// Persistent id as a text line (protocol 0).
pub const PERSID: u8 = b'P';
/// Persistent id taken from the top of the stack (protocol 1).
pub const BINPERSID: u8 = b'Q';

// Framing.
/// Protocol version, 1 byte (protocol 2).
pub const PROTO: u8 = 0x80;
/// Start of a frame, with its 8-byte length (protocol 4).
pub const FRAME: u8 = 0x95;
/// Store the top of the stack at the next free memo index (protocol 4).
pub const MEMOIZE: u8 = 0x94;

/// The name of pickle opcode `op`, or `None` for a byte that is no opcode.
pub fn name(op: u8) -> Option<&'static str> {
    Some(match op {
        MARK => "MARK",
        STOP => "STOP",
        POP => "POP",
        POP_MARK => "POP_MARK",
        DUP => "DUP",
        GET => "GET",
        BINGET => "BINGET",
        LONG_BINGET => "LONG_BINGET",
        PUT => "PUT",
        BINPUT => "BINPUT",
        LONG_BINPUT => "LONG_BINPUT",
        NONE => "NONE",
        INT => "INT",
        BININT => "BININT",
        BININT1 => "BININT1",
        BININT2 => "BININT2",
        LONG => "LONG",
        FLOAT => "FLOAT",
        BINFLOAT => "BINFLOAT",
        NEWTRUE => "NEWTRUE",
        NEWFALSE => "NEWFALSE",
        LONG1 => "LONG1",
        LONG4 => "LONG4",
        STRING => "STRING",
        UNICODE => "UNICODE",
        BINSTRING => "BINSTRING",
        SHORT_BINSTRING => "SHORT_BINSTRING",
        BINUNICODE => "BINUNICODE",
        SHORT_BINUNICODE => "SHORT_BINUNICODE",
        BINUNICODE8 => "BINUNICODE8",
        BINBYTES => "BINBYTES",
        SHORT_BINBYTES => "SHORT_BINBYTES",
        BINBYTES8 => "BINBYTES8",
        BYTEARRAY8 => "BYTEARRAY8",
        NEXT_BUFFER => "NEXT_BUFFER",
        READONLY_BUFFER => "READONLY_BUFFER",
        EMPTY_TUPLE => "EMPTY_TUPLE",
        TUPLE => "TUPLE",
        TUPLE1 => "TUPLE1",
        TUPLE2 => "TUPLE2",
        TUPLE3 => "TUPLE3",
        EMPTY_LIST => "EMPTY_LIST",
        LIST => "LIST",
        APPEND => "APPEND",
        APPENDS => "APPENDS",
        EMPTY_DICT => "EMPTY_DICT",
        DICT => "DICT",
        SETITEM => "SETITEM",
        SETITEMS => "SETITEMS",
        EMPTY_SET => "EMPTY_SET",
        ADDITEMS => "ADDITEMS",
        FROZENSET => "FROZENSET",
        GLOBAL => "GLOBAL",
        STACK_GLOBAL => "STACK_GLOBAL",
        REDUCE => "REDUCE",
        BUILD => "BUILD",
        INST => "INST",
        OBJ => "OBJ",
        NEWOBJ => "NEWOBJ",
        NEWOBJ_EX => "NEWOBJ_EX",
        EXT1 => "EXT1",
        EXT2 => "EXT2",
        EXT4 => "EXT4",
        PERSID => "PERSID",
        BINPERSID => "BINPERSID",
        PROTO => "PROTO",
        FRAME => "FRAME",
        MEMOIZE => "MEMOIZE",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPython defines 68 opcodes (protocols 0–5); every one has a distinct byte and name.
    #[test]
    fn all_opcodes_are_named_and_distinct() {
        let named: Vec<u8> = (0..=255u8).filter(|&b| name(b).is_some()).collect();
        assert_eq!(named.len(), 68);
        assert_eq!(name(0x00), None);
        assert_eq!(name(b'x'), None);
        assert_eq!(name(BINPERSID), Some("BINPERSID"));
    }
}
