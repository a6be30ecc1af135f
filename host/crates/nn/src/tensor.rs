//! The values both backends speak: the wasi-nn tensor and element type, the host's caps on
//! them, and the error a guest gets with its wasi-nn code. Kept apart from either backend so
//! that tract (`native`) and onnxruntime each depend on it and never on each other.

/// The most elements one tensor may have (inputs are checked before anything is allocated).
pub const MAX_ELEMENTS: u64 = 1 << 24;
/// The most dimensions one tensor may have (its dimension list is the guest's to size).
pub const MAX_RANK: usize = 8;

/// Why a model could not be loaded or run, with the wasi-nn error code the guest gets.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct NnError {
    /// The code.
    pub code: Code,
    /// What went wrong and what to do.
    pub message: String,
}

/// The wasi-nn error codes the host uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The guest passed something the graph cannot take.
    InvalidArgument,
    /// The model, or this use of it, is not supported.
    Unsupported,
    /// No such model is granted, or its file is missing.
    NotFound,
    /// A size past the host's caps.
    TooLarge,
    /// Refused by policy (for example loading guest-supplied bytes).
    Security,
    /// The deadline passed before the work could start.
    Timeout,
    /// The model failed to load or to run.
    Runtime,
}

impl NnError {
    /// An error with `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        NnError { code, message: message.into() }
    }
}

/// The element types a tensor may have, as wasi-nn names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementType {
    /// 16-bit float.
    F16,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// bfloat16 (not supported by the backend).
    Bf16,
    /// Byte.
    U8,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
}

impl ElementType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            ElementType::U8 => 1,
            ElementType::F16 | ElementType::Bf16 => 2,
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F64 | ElementType::I64 => 8,
        }
    }
}

/// A tensor as wasi-nn carries it: dimensions, element type, little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTensor {
    /// Dimensions, outermost first.
    pub dims: Vec<u32>,
    /// Element type.
    pub ty: ElementType,
    /// Row-major, little-endian.
    pub data: Vec<u8>,
}

impl RawTensor {
    /// Checks that there are at most [`MAX_RANK`] dimensions, that they hold at most
    /// [`MAX_ELEMENTS`] elements, and that `data` holds exactly
    /// them; says what is wrong otherwise. Nothing is allocated.
    pub fn check(dims: &[u32], ty: ElementType, data_len: usize) -> Result<(), NnError> {
        if dims.len() > MAX_RANK {
            return Err(NnError::new(
                Code::TooLarge,
                format!("a tensor of {} dimensions: at most {MAX_RANK} are accepted", dims.len()),
            ));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)).filter(|&n| n <= MAX_ELEMENTS))
            .ok_or_else(|| {
            NnError::new(Code::TooLarge, format!("a tensor of dimensions {dims:?} has over {MAX_ELEMENTS} elements"))
        })?;
        if elements * ty.size() != data_len as u64 {
            return Err(NnError::new(
                Code::InvalidArgument,
                format!(
                    "a {ty:?} tensor of dimensions {dims:?} holds {} bytes, but its data has {data_len}",
                    elements * ty.size()
                ),
            ));
        }
        Ok(())
    }
}

/// One input the graph takes.
#[derive(Debug, Clone)]
pub(crate) struct InputSpec {
    pub(crate) name: String,
    pub(crate) ty: ElementType,
    /// Fixed dimensions, `None` where any size is accepted.
    pub(crate) dims: Vec<Option<usize>>,
}
