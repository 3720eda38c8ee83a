//! HTTP plumbing the handlers share: the one-line JSON error (and its status for each library
//! error kind), reading a request body within a size and time limit, `.npy` and base64 PNG
//! bodies, and catching a panic in a handler as a 500.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use image::RgbImage;
use imgseq_core::error::ErrorKind;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The `.npy` media type (`Accept` for `.npy` answers, `Content-Type` for `.npy` tokens).
pub const NPY: &str = "application/x-npy";

/// Query parameters as `T` (unknown or malformed ones: a 400 JSON error).
pub struct Q<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(t)| Q(t))
            .map_err(|e| ApiError::bad(format!("query: {}", e.body_text())))
    }
}

/// An answer other than success: a status and a one-line message, sent as
/// `{"error": "..."}` (plus `Retry-After` where trying again later helps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub msg: String,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, msg: impl Into<String>) -> Self {
        Self {
            status,
            msg: msg.into(),
            retry_after: None,
        }
    }
    pub fn bad(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, msg)
    }
    pub fn retry(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl From<imgseq_core::Error> for ApiError {
    /// Bad input, bad settings and unsupported content are the client's (400), a limit is
    /// 413, anything else (a file the server cannot read, a tensor failure) is 500.
    fn from(e: imgseq_core::Error) -> Self {
        let status = match e.kind() {
            ErrorKind::BadInput | ErrorKind::BadSetting | ErrorKind::Unsupported => {
                StatusCode::BAD_REQUEST
            }
            ErrorKind::ResourceLimit => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, e.to_string())
    }
}

/// `{"error": msg}` on one line (newlines in the message become spaces).
pub fn error_body(msg: &str) -> String {
    let one = msg.replace(['\n', '\r'], " ");
    format!("{}\n", serde_json::json!({ "error": one }))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            error_body(&self.msg),
        )
            .into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// The whole request body: 413 beyond `limit` bytes (told by `Content-Length` before reading
/// when it is given), 408 when not received within `timeout`, 400 when the connection breaks.
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(timeout, collect).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body was not received within {} s",
                timeout.as_secs_f64()
            ),
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::bad(format!(
            "the request body could not be read: {e}"
        ))),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

/// The media type of a `Content-Type` value or of one `Accept` element, as HTTP defines it
/// (RFC 9110 §8.3.1): `type/subtype` before any `;` parameter, case-insensitive — lowercased
/// here — and its `q` weight (1 when absent; `None` when it does not parse).
fn media_type(v: &str) -> (String, Option<f32>) {
    let mut parts = v.split(';');
    let ty = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let mut q = Some(1.0);
    for p in parts {
        if let Some((k, val)) = p.split_once('=') {
            if k.trim().eq_ignore_ascii_case("q") {
                q = val
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|q| (0.0..=1.0).contains(q));
            }
        }
    }
    (ty, q)
}

/// Whether `headers`' `Content-Type` is the media type `want` (given in lowercase):
/// `APPLICATION/X-NPY` is, `application/x-npyfoo` is not.
pub fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| media_type(v).0 == want)
}

/// Whether the client asks for `.npy`: an `Accept` element `application/x-npy` (any case,
/// with parameters) whose `q` is not 0.
pub fn wants_npy(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(media_type)
        .any(|(ty, q)| ty == NPY && q.is_some_and(|q| q > 0.0))
}

/// The token of an `Authorization` value in the Bearer scheme (RFC 6750 §2.1, the scheme
/// name case-insensitive as RFC 9110 §11.1 has it, one or more spaces before the token).
pub fn bearer_token(v: &str) -> Option<&str> {
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim_start_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A `.npy` answer: `descr` (`<i8`, `<f4`), `shape`, little-endian data.
pub fn npy_response(descr: &str, shape: &[usize], data: Vec<u8>) -> Response {
    let mut bytes = imgseq_core::npy::npy_header(descr, shape);
    bytes.extend(data);
    ([(header::CONTENT_TYPE, NPY)], bytes).into_response()
}

/// `.npy` data of i64 values.
pub fn i64_le(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `.npy` data of f32 values.
pub fn f32_le(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A picture as PNG bytes.
pub fn png_bytes(img: &RgbImage) -> Result<Vec<u8>, ApiError> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| ApiError::internal(format!("cannot write a PNG: {e}")))?;
    Ok(out.into_inner())
}

/// A picture as base64 PNG (for JSON answers).
pub fn png_base64(img: &RgbImage) -> Result<String, ApiError> {
    Ok(base64::encode(png_bytes(img)?))
}

/// A handler's future whose panic is caught and answered 500 (instead of dropping the
/// connection).
pub struct CatchPanic(pub Pin<Box<dyn Future<Output = Response> + Send>>);

impl Future for CatchPanic {
    type Output = Response;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let fut = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(p) => p,
            Err(_) => Poll::Ready(
                ApiError::internal("the server panicked while answering this request")
                    .into_response(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Media types compare as HTTP defines them: case-insensitive, parameters aside, whole
    /// (`application/x-npyfoo` is not `.npy`); an `Accept` element with q=0 refuses.
    #[test]
    fn media_types_are_parsed_not_prefix_matched() {
        let h = |name, v: &str| {
            let mut m = HeaderMap::new();
            m.insert(name, v.parse().unwrap());
            m
        };
        for v in [
            "application/x-npy",
            "APPLICATION/X-NPY",
            "Application/X-Npy; charset=x",
        ] {
            assert!(content_type_is(&h(header::CONTENT_TYPE, v), NPY), "{v}");
        }
        for v in ["application/x-npyfoo", "application/json", "x-npy", ""] {
            assert!(!content_type_is(&h(header::CONTENT_TYPE, v), NPY), "{v}");
        }
        for v in [
            "text/html, APPLICATION/X-NPY",
            "application/x-npy;q=0.5",
            "*/*;q=0.1, application/x-npy",
        ] {
            assert!(wants_npy(&h(header::ACCEPT, v)), "{v}");
        }
        for v in [
            "application/x-npyfoo",
            "application/x-npy;q=0",
            "application/x-npy;q=2",
            "*/*",
        ] {
            assert!(!wants_npy(&h(header::ACCEPT, v)), "{v}");
        }
    }

    /// The auth scheme's name is case-insensitive; the token is not, and must be there.
    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for (v, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER   abc", Some("abc")),
            ("Bearer", None),
            ("Bearer ", None),
            ("Basic abc", None),
            ("Bearerabc", None),
        ] {
            assert_eq!(bearer_token(v), want, "{v}");
        }
    }

    #[test]
    fn error_body_is_one_json_line() {
        let b = error_body("a\nb \"c\"");
        assert_eq!(b.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["error"], "a b \"c\"");
    }

    #[test]
    fn library_error_kinds_map_to_statuses() {
        use imgseq_core::Error;
        let s = |e: Error| ApiError::from(e).status;
        assert_eq!(s(Error::invalid("x")), StatusCode::BAD_REQUEST);
        assert_eq!(s(Error::format("f", "x")), StatusCode::BAD_REQUEST);
        assert_eq!(s(Error::resource_limit("x")), StatusCode::PAYLOAD_TOO_LARGE);
        let io = Error::io("f", std::io::Error::other("x"));
        assert_eq!(s(io), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn npy_is_asked_for_by_accept() {
        let mut h = HeaderMap::new();
        assert!(!wants_npy(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html, application/x-npy"),
        );
        assert!(wants_npy(&h));
    }
}
