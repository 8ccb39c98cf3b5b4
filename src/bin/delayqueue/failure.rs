//! Why a command failed, and the exit codes: shared by the commands and
//! `web`, so that neither imports the other for it.

use delayqueue::Error;

/// Why a command failed: its exit code and the one line for stderr
/// (empty: say nothing, as when stdout was closed under us).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

/// Exit code of "the command ran, but found nothing or something wrong".
pub const NOT_FOUND: u8 = 1;
/// Exit code of usage, input, connection and Redis errors.
pub const USAGE: u8 = 2;

impl Failure {
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure {
            code: NOT_FOUND,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: USAGE,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::Duplicate { .. } | Error::NotPending { .. } => NOT_FOUND,
            _ => USAGE,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}
