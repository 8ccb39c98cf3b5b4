//! Message payloads: bytes, with JSON helpers.

use crate::Error;

/// The body of a message: any bytes.
///
/// Built from `&str`, `String`, `&[u8]`, `Vec<u8>`, or from any
/// `Serialize` value with [`Json`].
///
/// ```
/// use delayqueue::{Json, Payload};
/// let p: Payload = "hello".into();
/// assert_eq!(p.as_bytes(), b"hello");
/// let p = Payload::try_from(Json(serde_json::json!({"order": 42}))).unwrap();
/// assert_eq!(p.as_bytes(), br#"{"order":42}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload(Vec<u8>);

impl Payload {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The payload's bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Payload {
    fn from(s: &str) -> Self {
        Payload(s.as_bytes().to_vec())
    }
}

impl From<String> for Payload {
    fn from(s: String) -> Self {
        Payload(s.into_bytes())
    }
}

impl From<&[u8]> for Payload {
    fn from(b: &[u8]) -> Self {
        Payload(b.to_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for Payload {
    fn from(b: &[u8; N]) -> Self {
        Payload(b.to_vec())
    }
}

impl From<Vec<u8>> for Payload {
    fn from(b: Vec<u8>) -> Self {
        Payload(b)
    }
}

/// A payload serialized as JSON.
///
/// Pass it to a send, read it back with [`Message::json`](crate::Message::json).
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use std::time::Duration;
/// use delayqueue::Json;
///
/// #[derive(serde::Serialize)]
/// struct CloseOrder { order_id: u64 }
///
/// queue.send(Json(CloseOrder { order_id: 42 })).delay(Duration::from_secs(1800)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> TryFrom<Json<T>> for Payload {
    type Error = Error;

    fn try_from(json: Json<T>) -> Result<Self, Error> {
        Ok(Payload(serde_json::to_vec(&json.0)?))
    }
}

/// Anything a send accepts as a payload: bytes, strings, or [`Json`].
///
/// Implemented for [`Payload`], `&str`, `String`, `&[u8]`, `&[u8; N]`,
/// `Vec<u8>`, and [`Json`] (whose serialization can fail). A struct is
/// sent as JSON by wrapping it in [`Json`]; passed bare, it does not
/// compile, and the compiler says to wrap it:
///
/// ```compile_fail,E0277
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// #[derive(serde::Serialize)]
/// struct CloseOrder { order_id: u64 }
///
/// // error[E0277]: `CloseOrder` is not a message payload
/// //   = note: wrap a `Serialize` value in `delayqueue::Json(..)` to send it as JSON
/// queue.send(CloseOrder { order_id: 42 }).await?;
/// # Ok(()) }
/// ```
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// # #[derive(serde::Serialize)]
/// # struct CloseOrder { order_id: u64 }
/// queue.send(delayqueue::Json(CloseOrder { order_id: 42 })).await?;
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a message payload",
    label = "not bytes, a string or `Json(..)`",
    note = "a payload is `&str`, `String`, `&[u8]`, `Vec<u8>` or `Payload`",
    note = "wrap a `Serialize` value in `delayqueue::Json(..)` to send it as JSON"
)]
pub trait IntoPayload {
    /// Converts into bytes, or fails with [`Error::Json`].
    fn into_payload(self) -> Result<Payload, Error>;
}

/// Types that convert into [`Payload`] without fail. Listed one by one
/// rather than for every `T: Into<Payload>`, so that a type that is none
/// of them fails on `IntoPayload` itself, whose message says what to do.
macro_rules! into_payload_via_from {
    ($($t:ty),*) => {$(
        impl IntoPayload for $t {
            fn into_payload(self) -> Result<Payload, Error> {
                Ok(self.into())
            }
        }
    )*};
}

into_payload_via_from!(Payload, &str, String, &[u8], Vec<u8>);

impl<const N: usize> IntoPayload for &[u8; N] {
    fn into_payload(self) -> Result<Payload, Error> {
        Ok(self.into())
    }
}

impl<T: serde::Serialize> IntoPayload for Json<T> {
    fn into_payload(self) -> Result<Payload, Error> {
        Payload::try_from(self)
    }
}
