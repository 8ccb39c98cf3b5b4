//! How the API's errors become HTTP replies: [`ApiError`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::web::state::App;
use crate::{DelayQueue, Error};

/// An error reply: its status and `{"error": message}`, with `"param":
/// name` when a query parameter is at fault.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// The same error, naming the query parameter at fault.
    pub(crate) fn param(mut self, name: &'static str) -> Self {
        self.param = Some(name);
        self
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The same error, its message prefixed with `what`.
    pub(crate) fn context(self, what: &str) -> Self {
        ApiError {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match e {
            // Every variant by name, so a new one gets its status chosen here.
            Error::InvalidQueueName { .. }
            | Error::InvalidMessageId { .. }
            | Error::PayloadTooLarge { .. }
            | Error::InvalidHeader { .. }
            | Error::InvalidGroup { .. }
            | Error::InvalidFlow { .. }
            | Error::InvalidArgument(_)
            | Error::ResultTooLarge { .. }
            | Error::ProgressTooLarge { .. }
            | Error::Json(_) => StatusCode::BAD_REQUEST,
            // What Redis holds does not fit: another type, another format.
            Error::Duplicate { .. }
            | Error::NotPending { live: true, .. }
            | Error::LeaseLost { .. }
            | Error::WrongType { .. }
            | Error::FormatVersion { .. }
            | Error::ShardCount { .. } => StatusCode::CONFLICT,
            Error::NoSuchSchedule { .. } | Error::NoSuchMessage { .. } | Error::NotPending { live: false, .. } => {
                StatusCode::NOT_FOUND
            }
            Error::Redis(_)
            | Error::OutOfMemory { .. }
            | Error::NotDurable { .. }
            | Error::Unconfirmed { .. }
            | Error::WaitAofUnsupported { .. }
            | Error::ScriptingUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::UnexpectedReply { .. } | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.param {
            Some(param) => serde_json::json!({ "error": self.message, "param": param }),
            None => serde_json::json!({ "error": self.message }),
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// What a handler returns.
pub(crate) type ApiResult<T> = Result<axum::Json<T>, ApiError>;

/// The queue named in the path: 404 when the dashboard does not know it.
pub(crate) async fn find(app: &App, name: &str) -> Result<DelayQueue, ApiError> {
    app.registry
        .get(name)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no queue named {name:?}")))
}
