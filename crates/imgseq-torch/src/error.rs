//! What can go wrong reading a checkpoint, in three layers:
//!
//! * [`TorchError`]: the file could not be read ([`TorchError::Io`]), its content is wrong
//!   ([`TorchError::Format`], which names the file once), or a tensor conversion failed.
//! * [`FormatError`]: what is wrong with the archive or its tensors.
//! * [`PickleError`]: what is wrong with (or refused in) the pickle `data.pkl`.
//!
//! Each message is one line. [`TorchError`] converts into [`imgseq_core::Error`] with the
//! same text, so callers that return `imgseq_core::Result` can use `?`.

use std::path::{Path, PathBuf};

/// Result alias of this crate.
pub type Result<T, E = TorchError> = std::result::Result<T, E>;

/// An error reading a PyTorch checkpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TorchError {
    /// The file could not be opened. (The I/O error is part of the message, not a `source`,
    /// as in [`imgseq_core::Error::Io`].)
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    /// The file was opened but is not a checkpoint imgseq reads.
    #[error("{}: {what}", path.display())]
    Format { path: PathBuf, what: FormatError },
    /// Building a tensor from storage bytes failed.
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
}

impl TorchError {
    pub(crate) fn format(path: &Path, what: impl Into<FormatError>) -> Self {
        TorchError::Format {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }
}

/// Same variant (I/O, format or tensor error) and same message.
impl From<TorchError> for imgseq_core::Error {
    fn from(e: TorchError) -> Self {
        match e {
            TorchError::Io { path, err } => imgseq_core::Error::io(path, err),
            TorchError::Format { path, what } => imgseq_core::Error::format(path, what.to_string()),
            TorchError::Candle(e) => imgseq_core::Error::Candle(e),
        }
    }
}

/// What is wrong with a checkpoint file (the path is in [`TorchError::Format`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Not a zip archive (or a damaged one).
    #[error(
        "not a readable PyTorch zip checkpoint ({detail}); truncated, or saved by torch < 1.6"
    )]
    NotAZip { detail: String },
    /// A device, FIFO, directory, ...: reading it might never end.
    #[error("not a regular file")]
    NotARegularFile,
    /// A pickle without the zip around it: torch < 1.6's legacy format or `pickle.dump`.
    #[error(
        "a bare pickle, not a zip checkpoint (saved by torch < 1.6 or by pickle.dump); imgseq \
         reads torch >= 1.6 zip checkpoints: load and torch.save it again with a current torch"
    )]
    BarePickle,
    /// An archive entry that inflates to more than imgseq reads for it.
    #[error("`{entry}` inflates to more than {max} bytes; refused")]
    EntryTooLarge { entry: String, max: u64 },
    /// Compressed storages that would inflate to far more than the file's size.
    #[error(
        "compressed storages would inflate to more than {max} bytes from a {file_len}-byte \
         file; refused"
    )]
    InflateBudget { max: u64, file_len: u64 },
    /// The tensors of the file would take far more memory than the file's size explains
    /// (views that repeat their storage many times over).
    #[error(
        "tensor `{key}` brings the tensors read to more than {max} bytes from a \
         {file_len}-byte file (a view repeats its storage); refused"
    )]
    TensorBudget {
        key: String,
        max: u64,
        file_len: u64,
    },
    /// An allocation sized by the file failed.
    #[error("cannot allocate {bytes} bytes")]
    OutOfMemory { bytes: usize },
    /// A zip archive without `data.pkl`.
    #[error("zip archive has no data.pkl; not a torch.save file")]
    NoPickle,
    /// An archive entry exists but cannot be opened.
    #[error("cannot open `{entry}` in the archive ({detail})")]
    OpenEntry { entry: String, detail: String },
    /// An archive entry cannot be read to its end.
    #[error("cannot read `{entry}` ({err}); truncated file?")]
    ReadEntry { entry: String, err: std::io::Error },
    /// The pickle is damaged or asks for something imgseq refuses.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The pickle's root object is not a dict.
    #[error("checkpoint holds a {found}, not a dict of tensors")]
    NotADict { found: &'static str },
    /// A TorchScript archive whose `data.pkl` root is not a module object.
    #[error("TorchScript archive's data.pkl holds a {found}, not a module")]
    NotAModule { found: &'static str },
    /// A TorchScript module object that was never given its attributes.
    #[error("TorchScript module {path} (`{class}`) has no attributes (never built)")]
    UnbuiltModule { path: String, class: String },
    /// A TorchScript attribute that is neither a tensor, a module nor plain data.
    #[error(
        "TorchScript attribute `{path}` is {found}; imgseq reads module parameters and \
         buffers only"
    )]
    ScriptAttribute { path: String, found: &'static str },
    /// A module tree nested or shared beyond what any model needs.
    #[error(
        "TorchScript module tree deeper than {depth} levels or larger than {nodes} modules; \
         refused"
    )]
    ModuleTreeTooLarge { depth: usize, nodes: usize },
    /// Neither the root dict nor its `state_dict` holds a tensor.
    #[error("checkpoint holds no tensors")]
    NoTensors,
    /// A tensor's storage entry `data/<key>` is absent.
    #[error("storage `{entry}` is missing from the archive")]
    MissingStorage { entry: String },
    /// A storage entry is shorter than its element count says.
    #[error("storage `{entry}` has {len} bytes, {want} expected (truncated file)")]
    TruncatedStorage {
        entry: String,
        len: usize,
        want: usize,
    },
    /// A tensor's size, strides or offset do not fit its storage.
    #[error("tensor `{key}` {problem}")]
    BadTensor { key: String, problem: TensorProblem },
    /// A tensor would need more memory than imgseq allocates for one.
    #[error("tensor `{key}` is larger than imgseq accepts ({} GiB)", max_bytes >> 30)]
    Limit { key: String, max_bytes: usize },
}

/// Why a tensor view is impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TensorProblem {
    /// The product of the sizes overflows.
    #[error("has an impossible size")]
    ImpossibleSize,
    /// The last element's index overflows.
    #[error("has an impossible stride")]
    ImpossibleStride,
    /// The view reaches past the end of its storage.
    #[error("points outside its storage")]
    OutsideStorage,
}

/// What is wrong with, or refused in, a checkpoint's pickle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleError {
    // Damaged data.
    #[error("pickle ends early (truncated data.pkl)")]
    Truncated,
    #[error("pickle ends inside a text line")]
    UnterminatedLine,
    #[error("non-UTF-8 text in pickle")]
    NonUtf8Line,
    #[error("non-UTF-8 string in pickle")]
    NonUtf8String,
    #[error("bad INT in pickle")]
    BadInt,
    #[error("integer too large in pickle")]
    IntTooLarge,
    /// Containers nested deeper than a checkpoint ever nests them.
    #[error("pickle nests containers more than {max} levels deep")]
    TooDeep { max: u32 },
    #[error("pickle stack underflow")]
    StackUnderflow,
    #[error("pickle MARK missing")]
    MarkMissing,
    #[error("pickle memo entry {0} missing")]
    MemoMissing(u32),
    #[error("odd number of items for SETITEMS")]
    OddSetItems,
    /// `op` (SETITEMS, APPENDS) applied to something that is not a container.
    #[error("{op} on a {found}")]
    NotAContainer {
        op: &'static str,
        found: &'static str,
    },
    #[error("STACK_GLOBAL without strings")]
    StackGlobalWithoutStrings,
    /// An opcode the interpreter does not implement; `name` when it is a pickle opcode.
    #[error("unsupported pickle opcode 0x{op:02x}{} at byte {at}", opcode_name(*.name))]
    UnsupportedOpcode {
        op: u8,
        name: Option<&'static str>,
        at: usize,
    },

    // Refused: what would run code or is outside what torch.save writes.
    /// A global outside the allowlist, refused as soon as it is named.
    #[error("pickle references `{module}.{name}`; imgseq only reads tensors and plain containers")]
    ForbiddenGlobal { module: String, name: String },
    /// INST / OBJ: instantiation of the named class (if one is on the stack).
    #[error(
        "pickle instantiates {}; imgseq only reads tensors and plain containers",
        class_name(.class)
    )]
    ForbiddenInstance { class: Option<(String, String)> },
    #[error("pickle calls a {found}, which imgseq does not do")]
    CallsNonGlobal { found: &'static str },
    #[error("pickle instantiates a {found}, which imgseq does not do")]
    InstantiatesNonGlobal { found: &'static str },
    #[error("pickle uses a text persistent id; not a torch.save file")]
    TextPersistentId,
    #[error("pickle uses the extension registry (EXT*); refused")]
    ExtensionRegistry,

    // Calls to allowlisted globals with arguments torch.save would not write.
    #[error("REDUCE arguments are a {found}")]
    ReduceArgsNotATuple { found: &'static str },
    #[error("{call} with too few arguments")]
    TooFewArguments { call: &'static str },
    #[error("{call} with unexpected arguments")]
    UnexpectedArguments { call: &'static str },
    /// `call` without the argument it needs (`expected`: "tensor", "string").
    #[error("{call} without a {expected}")]
    MissingArgument {
        call: &'static str,
        expected: &'static str,
    },
    #[error("tensor storage is a {found}")]
    NotAStorage { found: &'static str },
    /// `what`: "storage offset", "size" or "stride".
    #[error("bad tensor {what}")]
    BadTensorArgument { what: &'static str },
    #[error("tensor size and stride differ in length")]
    SizeStrideMismatch,
    /// A persistent id that is not a tuple of at least five items.
    #[error("unsupported persistent id ({found})")]
    MalformedPersistentId { found: &'static str },
    /// A persistent id tuple that is not `('storage', torch.<T>Storage, key, location, numel)`.
    #[error("unsupported persistent id")]
    UnsupportedPersistentId,
    #[error("unsupported storage type `{module}.{name}`")]
    UnsupportedStorage { module: String, name: String },

    // TorchScript archives.
    /// `BUILD` of a TorchScript object with something other than an attribute dict (a
    /// custom class's `__setstate__` state).
    #[error("TorchScript object `{class}` is built from a {found}, not an attribute dict")]
    ObjectState { class: String, found: &'static str },
    #[error("TorchScript object `{class}` is built twice")]
    ObjectBuiltTwice { class: String },
}

fn opcode_name(name: Option<&'static str>) -> String {
    name.map(|n| format!(" ({n})")).unwrap_or_default()
}

fn class_name(class: &Option<(String, String)>) -> String {
    match class {
        Some((m, n)) => format!("`{m}.{n}`"),
        None => "a class".to_string(),
    }
}
