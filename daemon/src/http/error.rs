//! [`ApiError`]: every error the API answers with, as a status and a JSON
//! body that says what is wrong.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jobstore_api::ErrorKind;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Denied;
use crate::tenant::NameError;

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, and where.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable kind: `invalid_input`, `not_found`,
    /// `unauthenticated`, `forbidden`, `conflict`, `too_large`,
    /// `unsupported_media_type`, `unavailable`, `timeout`, `shutting_down`,
    /// `internal`.
    pub kind: String,
    /// A sentence for humans.
    pub message: String,
    /// The 1-based line of the body at fault (line-form bodies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The 1-based item of a JSON array at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<u64>,
    /// The field or name at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The limit that was exceeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub detail: Box<ErrorDetail>,
}

impl ApiError {
    /// An error with this status, kind and message.
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: Box::new(ErrorDetail {
                kind: kind.to_owned(),
                message: message.into(),
                line: None,
                item: None,
                field: None,
                limit: None,
            }),
        }
    }

    /// 400 `invalid_input`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 413 `too_large`.
    pub fn too_large(message: impl Into<String>, limit: u64) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message).limit(limit)
    }

    /// 503 `unavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 500 `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// Names the 1-based line at fault.
    pub fn line(mut self, line: usize) -> Self {
        self.detail.line = Some(line as u64);
        self
    }

    /// Names the 1-based JSON item at fault.
    pub fn item(mut self, item: usize) -> Self {
        self.detail.item = Some(item as u64);
        self
    }

    /// Names the field at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.detail.field = Some(field.into());
        self
    }

    /// Names the limit exceeded.
    pub fn limit(mut self, limit: u64) -> Self {
        self.detail.limit = Some(limit);
        self
    }

    /// Prefixes the message with where the error is (`line 3: `).
    pub fn at(mut self, place: &str) -> Self {
        self.detail.message = format!("{place}: {}", self.detail.message);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.detail.message)
    }
}

impl From<jobstore_api::Error> for ApiError {
    fn from(e: jobstore_api::Error) -> Self {
        let message = e.to_string();
        match e.kind() {
            ErrorKind::InvalidInput => ApiError::invalid(message),
            ErrorKind::NotFound => ApiError::not_found(message),
            ErrorKind::Conflict => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            ErrorKind::TooLarge => {
                let limit = match &e {
                    jobstore_api::Error::TooLarge { limit, .. } => Some(*limit as u64),
                    _ => None,
                };
                let mut err = ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message);
                err.detail.limit = limit;
                err
            }
            ErrorKind::Unavailable => ApiError::unavailable(message),
            ErrorKind::Unsupported => {
                ApiError::new(StatusCode::NOT_IMPLEMENTED, "unsupported", message)
            }
            _ => ApiError::internal(message),
        }
    }
}

impl From<NameError> for ApiError {
    fn from(e: NameError) -> Self {
        ApiError::invalid(e.to_string()).field(e.field)
    }
}

impl From<Denied> for ApiError {
    fn from(d: Denied) -> Self {
        match d {
            Denied::Unauthenticated(m) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", m)
            }
            Denied::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (
            status,
            Json(ErrorBody {
                error: *self.detail,
            }),
        )
            .into_response();
        let headers = response.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"jobstore\""),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The result of an API handler.
pub type ApiResult<T> = Result<T, ApiError>;
