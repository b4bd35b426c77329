//! Errors of the runtime. Each carries the Python exception type it maps to,
//! so the binding and the FFI layer can re-raise the right type.

use std::fmt;

use mosaic_rt_programs::{ProgramError, ProgramErrorKind};

/// Declares [`ErrorKind`] from one table, `Kind => "PythonType"`:
/// `python_type` and its inverse both read it.
macro_rules! error_kinds {
    ($( $(#[$vmeta:meta])* $variant:ident => $python:literal, )+) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $( $(#[$vmeta])* $variant, )+
        }

        impl ErrorKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$variant),+];

            /// Name of the Python exception class this kind is raised as.
            pub const fn python_type(self) -> &'static str {
                match self {
                    $(ErrorKind::$variant => $python,)+
                }
            }
        }
    };
}

error_kinds! {
    /// Bad ids, id collisions, shape/dtype mismatches, bad configuration.
    Value => "ValueError",
    /// Out-of-bounds reads.
    Index => "IndexError",
    /// Out-of-bounds writes and swaps: raised as `ValueError`, as stock
    /// does, but a kind of their own so that callers tell them from other
    /// value errors without reading the message.
    OutOfBoundsWrite => "ValueError",
    /// This core was stopped because another core failed first; the root
    /// cause is in [`RtError::root`].
    Aborted => "KernelAborted",
    /// A blocking wait exceeded the configured timeout.
    Timeout => "WaitTimeout",
    /// Every live core is blocked and nothing pending can wake any of them.
    Deadlock => "DeadlockError",
    /// Semaphores left with a non-zero count at kernel end (when raising).
    Leak => "SemaphoreLeakError",
    /// A data race, with `on_race="raise"`.
    Race => "RaceError",
    /// A failure outside mosaic_rt's ops (a user host callback raised):
    /// [`RtError::external`] names the Python exception.
    External => "ExternalError",
    /// Valid request the runtime does not support.
    NotImplemented => "NotImplementedError",
    /// A kernel-level error stock interpret mode raises as `RuntimeError`
    /// (e.g. an output block revisited).
    Runtime => "RuntimeError",
    /// initcheck: a read of elements nothing wrote in this launch (raised
    /// as `mosaic_rt.UninitializedReadError`, a `ValueError`).
    Uninitialized => "UninitializedReadError",
    /// The host could not provide the memory a request needs (raised as
    /// `MemoryError`; the message names the size).
    Memory => "MemoryError",
    /// A broken invariant inside mosaic_rt (a bug, never user error).
    Internal => "MosaicRuntimeError",
}

impl ErrorKind {
    /// Inverse of [`ErrorKind::python_type`]: the first kind raised as
    /// `name` (`"ValueError"` is [`ErrorKind::Value`]).
    pub fn from_python_type(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.python_type() == name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtError {
    pub kind: ErrorKind,
    pub message: String,
    /// Where the error happened, when known.
    pub device: Option<u32>,
    pub core: Option<u32>,
    /// For [`ErrorKind::Aborted`]: the first error of the kernel.
    pub root: Option<Box<RtError>>,
    /// For [`ErrorKind::External`]: (key of the Python exception in the
    /// binding's registry, its type name).
    pub external: Option<Box<(u64, String)>>,
    /// The source site (an id of `crate::site`) of the op that failed; 0:
    /// unknown. Kept apart from `message`, which stays the text stock
    /// interpret mode raises.
    pub site: u32,
}

pub type Result<T> = std::result::Result<T, RtError>;

impl RtError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RtError { kind, message: message.into(), device: None, core: None, root: None, external: None, site: 0 }
    }
    pub fn value(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Value, message)
    }
    pub fn index(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Index, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn memory(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Memory, message)
    }
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotImplemented, message)
    }
    /// A failure outside mosaic_rt: Python exception `key` of type `type_name`.
    pub fn external(key: u64, type_name: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::External, message);
        e.external = Some(Box::new((key, type_name.to_string())));
        e
    }
    /// The Python type name this error is raised as (an external error's own).
    pub fn type_name(&self) -> &str {
        match &self.external {
            Some(x) => &x.1,
            None => self.kind.python_type(),
        }
    }
    /// Records where the error happened unless already known.
    pub fn at(mut self, device: u32, core: u32) -> Self {
        self.device.get_or_insert(device);
        self.core.get_or_insert(core);
        self
    }
    /// Records the failing op's source site unless already known.
    pub fn at_site(mut self, site: u32) -> Self {
        if self.site == 0 {
            self.site = site;
        }
        self
    }
    /// The error that started it all: `root` for aborts, `self` otherwise.
    pub fn root_cause(&self) -> &RtError {
        match &self.root {
            Some(r) => r.root_cause(),
            None => self,
        }
    }
    /// An abort of (device, core) caused by `root`.
    pub fn aborted(root: &RtError, device: u32, core: u32) -> Self {
        let root = root.root_cause().clone();
        let place = match (root.device, root.core) {
            (Some(d), Some(c)) => format!("device {d}, core {c}"),
            (Some(d), None) => format!("device {d}"),
            _ => "another core".to_string(),
        };
        let message = format!(
            "kernel aborted on device {device}, core {core}: {place} failed first with {}: {}",
            root.type_name(),
            root.message
        );
        RtError {
            kind: ErrorKind::Aborted,
            message,
            device: Some(device),
            core: Some(core),
            site: root.site,
            root: Some(Box::new(root)),
            external: None,
        }
    }
}

/// A program or wire-code error as the runtime's (same message; the kind
/// it is raised as in Python).
/// A bad wire code or name (a dtype, a setting's spelling) is a bad value.
impl From<mosaic_rt_wire::WireError> for RtError {
    fn from(e: mosaic_rt_wire::WireError) -> RtError {
        RtError::value(e.message)
    }
}

impl From<ProgramError> for RtError {
    fn from(e: ProgramError) -> RtError {
        let kind = match e.kind {
            ProgramErrorKind::Value => ErrorKind::Value,
            ProgramErrorKind::Memory => ErrorKind::Memory,
        };
        RtError::new(kind, e.message)
    }
}

impl fmt::Display for RtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.type_name(), self.message)
    }
}

impl std::error::Error for RtError {}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn python_types_round_trip_to_the_first_kind_of_each_name() {
        for &k in ErrorKind::ALL {
            let back = ErrorKind::from_python_type(k.python_type()).unwrap();
            assert_eq!(back.python_type(), k.python_type());
        }
        assert_eq!(ErrorKind::from_python_type("ValueError"), Some(ErrorKind::Value));
        assert_eq!(ErrorKind::from_python_type("MosaicRuntimeError"), Some(ErrorKind::Internal));
        assert_eq!(ErrorKind::from_python_type("KeyError"), None);
    }
}
