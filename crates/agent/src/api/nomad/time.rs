//! Go's `time.Time` on the wire: RFC 3339 with nanoseconds in UTC; the store's 0
//! ("never reported") is Go's zero time, `0001-01-01T00:00:00Z`, which is what a Go
//! client sends for an unset time.

use std::time::{Duration, UNIX_EPOCH};

use super::ShapeError;

/// Go's zero `time.Time`.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Unix nanoseconds as RFC 3339 (0 as Go's zero time).
pub fn to_rfc3339(nanos: u64) -> String {
    if nanos == 0 {
        return ZERO_TIME.to_string();
    }
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(nanos)).to_string()
}

/// RFC 3339 in UTC (`…Z`) as Unix nanoseconds; Go's zero time (and anything before
/// 1970) as 0.
pub fn from_rfc3339(field: &'static str, s: &str) -> Result<u64, ShapeError> {
    if s.is_empty() || s == ZERO_TIME || s.starts_with("0001-01-01T00:00:00") {
        return Ok(0);
    }
    let t = humantime::parse_rfc3339_weak(s)
        .map_err(|e| ShapeError::new(field, format!("not an RFC 3339 UTC time: {e}")))?;
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).map_err(|_| ShapeError::new(field, "after the year 2554"))
}
