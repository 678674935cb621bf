//! The engine's errors: why `check` (and the reads of a sweep) could not
//! judge, typed, so that the CLI picks its exit code and the HTTP layer its
//! status from the kind, never from a message.

use reaper_core::ports::{PortError, PortErrorKind};

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The registry view is not valid: nothing is judged on it.
    #[error("the registry view is not valid")]
    ViewInvalid,
    /// The DS line cannot be told yet (`dolphinscheduler.version = "auto"`).
    #[error("the DS line is not known yet")]
    LineUnknown,
    /// A store or registry call failed; `what` names it.
    #[error("{what}: {source}")]
    Port {
        what: &'static str,
        #[source]
        source: PortError,
    },
}

impl Error {
    /// Wraps a port error as the failure of `what`.
    pub fn port(what: &'static str) -> impl FnOnce(PortError) -> Error {
        move |source| Error::Port { what, source }
    }

    /// The port error's kind, when a port call failed.
    pub fn port_kind(&self) -> Option<PortErrorKind> {
        match self {
            Error::Port { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_read_and_keeps_the_cause() {
        let e = Error::port("reading candidates")(PortError::invalid("schema mismatch: x"));
        assert_eq!(e.to_string(), "reading candidates: schema mismatch: x");
        assert_eq!(e.port_kind(), Some(PortErrorKind::Invalid));
        let cause = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(cause.as_deref(), Some("schema mismatch: x"));
        assert_eq!(Error::ViewInvalid.port_kind(), None);
    }
}
