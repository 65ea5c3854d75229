//! Path parameters shared by many routes, for the OpenAPI document; the
//! handlers read them through their extractors ([`Tenant`](super::extract::Tenant),
//! [`PathParams`](super::extract::PathParams)).

#![allow(dead_code)] // The fields are read by the OpenAPI document only.

use utoipa::IntoParams;

/// The client of every per-client route.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ClientPath {
    /// The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit
    #[param(pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")]
    client: String,
}

/// The jobtype of a route that names one.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobtypePath {
    /// The jobtype: A-Z a-z 0-9 _ . : -, starting with a letter or digit; at most 200 bytes with the client and a dash
    #[param(rename = "type", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")]
    jobtype: String,
}
