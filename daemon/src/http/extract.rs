//! Extractors that validate before a handler runs, and turn every
//! rejection into an [`ApiError`] with a JSON body.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::AppState;
use super::error::ApiError;
use crate::auth::Caller;
use crate::tenant::Client;

/// The path's parameters, percent-decoded and valid UTF-8.
pub struct PathParams(pub HashMap<String, String>);

impl PathParams {
    /// A parameter the route always has.
    pub fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for PathParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<HashMap<String, String>>::from_request_parts(parts, state).await {
            Ok(Path(map)) => Ok(PathParams(map)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                Err(ApiError::invalid(format!("bad path: {}", e.body_text())))
            }
            Err(e) => Err(ApiError::invalid(format!("bad path: {}", e.body_text()))),
        }
    }
}

/// Who is calling, from the `Authorization` header.
pub struct CallerOf(pub Caller);

impl FromRequestParts<AppState> for CallerOf {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| {
                v.to_str()
                    .map_err(|_| ApiError::invalid("the Authorization header is not ASCII"))
            })
            .transpose()?;
        Ok(CallerOf(state.config.auth.identify(value)?))
    }
}

/// The `{client}` of the path, validated, and a caller allowed to act for
/// it. Names are checked before the token, so a bad name is a 400 whoever
/// asks; the token then decides between 401, 403 and going on.
pub struct Tenant {
    /// The client.
    pub client: Client,
    /// Who called.
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = PathParams::from_request_parts(parts, state).await?;
        let client = Client::new(params.get("client"))?;
        let CallerOf(caller) = CallerOf::from_request_parts(parts, state).await?;
        caller.may_access(&client)?;
        Ok(Tenant { client, caller })
    }
}

/// The request body, within the configured size limit.
pub struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config.max_body_bytes;
        let wait = state.config.body_read_timeout;
        let read = tokio::time::timeout(wait, Bytes::from_request(req, state)).await;
        let Ok(read) = read else {
            return Err(ApiError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the request body did not arrive within the body read timeout of {}",
                    humantime::format_duration(wait)
                ),
            ));
        };
        match read {
            Ok(b) => Ok(RawBody(b)),
            Err(BytesRejection::FailedToBufferBody(e)) if is_length_limit(&e) => {
                Err(ApiError::too_large(
                    format!("the request body is larger than the limit of {limit} bytes"),
                    limit as u64,
                ))
            }
            Err(e) => Err(ApiError::invalid(format!(
                "cannot read the request body: {}",
                e.body_text()
            ))),
        }
    }
}

/// A JSON request body deserialized into `T` (whatever the
/// `Content-Type`), read as [`RawBody`] is; a body that is not such JSON is
/// a 400 that says why.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let RawBody(body) = RawBody::from_request(req, state).await?;
        serde_json::from_slice(&body).map(JsonBody).map_err(|e| {
            ApiError::invalid(format!("the body is not the JSON this endpoint takes: {e}"))
        })
    }
}

fn is_length_limit(e: &axum::extract::rejection::FailedToBufferBody) -> bool {
    matches!(
        e,
        axum::extract::rejection::FailedToBufferBody::LengthLimitError(_)
    )
}

/// Query parameters deserialized into `T`, with a 400 that names the
/// parameter at fault.
pub struct QueryOf<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(q)) => Ok(QueryOf(q)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => Err(ApiError::invalid(
                format!("bad query string: {}", e.body_text()),
            )),
            Err(e) => Err(ApiError::invalid(format!(
                "bad query string: {}",
                e.body_text()
            ))),
        }
    }
}

/// Whether the request says its body is JSON.
pub fn is_json(parts_headers: &axum::http::HeaderMap) -> bool {
    parts_headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json" || mime.ends_with("+json")
        })
}
