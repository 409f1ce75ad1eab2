//! [`ClusterKey`]: how the servers of a cluster know each other. Every Raft RPC carries
//! an HMAC-SHA256 of its body under the key every server was given
//! (`--cluster-key-file`), and every answer one of its own; the key itself never
//! crosses the wire. A client token is never a server credential.
//!
//! The request header `X-Schedstate-Cluster-Auth: v1.<unix-secs>.<head-mac>.<body-mac>`
//! carries two MACs so that a receiver can refuse a stranger *before* reading a body
//! of up to 64 MiB:
//!
//! - the head MAC covers the time and the body's length: checked against
//!   `Content-Length` and the clock (± [`CLOCK_SKEW`]) before the body is read;
//! - the body MAC covers the head MAC and the body: checked once it is read.
//!
//! The answer header `X-Schedstate-Cluster-Auth: v1.<mac>` covers the request's body
//! MAC and the answer, so an answer cannot be forged or moved to another request.
//!
//! What this does not do (the next step is TLS): hide the RPCs from someone who can read
//! the traffic, or stop them replaying a recorded RPC within the skew window — Raft
//! tolerates duplicated and reordered messages by design, so a replay changes nothing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header of both requests and answers.
pub const CLUSTER_AUTH_HEADER: &str = "X-Schedstate-Cluster-Auth";

/// How far apart two servers' clocks may be before their RPCs are refused.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The shortest key accepted: 32 bytes (what `schedstate keygen` writes as 64 hex
/// digits).
pub const MIN_KEY_BYTES: usize = 32;

/// The longest key file read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

const HEAD_TAG: &[u8] = b"schedstate raft request head v1\0";
const BODY_TAG: &[u8] = b"schedstate raft request body v1\0";
const ANSWER_TAG: &[u8] = b"schedstate raft answer v1\0";

type HmacSha256 = Hmac<Sha256>;

/// Why a key could not be had, or an RPC's credentials were refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterKeyError {
    /// The key file could not be read.
    #[error("cluster key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key file is not a usable key.
    #[error("cluster key file {path}: {reason}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No credentials on the request.
    #[error("no {CLUSTER_AUTH_HEADER} header: Raft RPCs are taken from the cluster's servers only")]
    Missing,
    /// The header is not of the expected shape.
    #[error("malformed {CLUSTER_AUTH_HEADER} header")]
    Malformed,
    /// The sender's clock is too far from this server's.
    #[error(
        "the RPC's time is {0} s away from this server's clock (more than {CLOCK_SKEW:?}): check the servers' clocks"
    )]
    Skewed(i64),
    /// The body's length is not the one the sender signed.
    #[error("the body length does not match the signed length")]
    LengthMismatch,
    /// A MAC does not verify: another key, or a forged or altered RPC.
    #[error("the cluster key does not match (another cluster's server, or a forged RPC)")]
    WrongKey,
}

/// A cluster's shared secret. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct ClusterKey {
    key: Vec<u8>,
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(<secret>)")
    }
}

/// What a receiver learns from a request's header before reading its body.
#[derive(Debug, Clone, Copy)]
pub struct SignedHead {
    head_mac: [u8; 32],
    body_mac: [u8; 32],
    /// The body length the sender signed.
    pub len: u64,
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Lowercase hex of `bytes` (keys, MACs, token digests, UUIDs).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

impl ClusterKey {
    /// A key from its bytes (at least [`MIN_KEY_BYTES`]).
    ///
    /// # Errors
    /// A key that is too short.
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<ClusterKey, String> {
        let key = key.into();
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the key has {} bytes; at least {MIN_KEY_BYTES} are needed (schedstate keygen writes one)",
                key.len()
            ));
        }
        Ok(ClusterKey { key })
    }

    /// A new random key (32 bytes from the operating system's generator).
    ///
    /// # Errors
    /// The generator is not available.
    pub fn generate() -> Result<ClusterKey, std::io::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(ClusterKey {
            key: hex(&key).into_bytes(),
        })
    }

    /// Reads a key file: the key is the file's text without surrounding whitespace.
    /// A file that group or others may read is refused, as ssh refuses such a private
    /// key: whoever reads it can act as a server of the cluster.
    ///
    /// # Errors
    /// [`ClusterKeyError::Io`], [`ClusterKeyError::Bad`].
    pub fn from_file(path: &Path) -> Result<ClusterKey, ClusterKeyError> {
        let io = |source| ClusterKeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |reason: String| ClusterKeyError::Bad {
            path: path.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        if meta.len() > MAX_KEY_FILE_BYTES {
            return Err(bad(format!(
                "{} bytes; a key file holds one key (at most {MAX_KEY_FILE_BYTES} bytes)",
                meta.len()
            )));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "mode {mode:o} lets other users read it; chmod 600 it"
                )));
            }
        }
        let text = std::fs::read(path).map_err(io)?;
        let key = text.trim_ascii();
        if key.iter().any(|b| b.is_ascii_control()) {
            return Err(bad("the key holds control characters".into()));
        }
        ClusterKey::from_bytes(key).map_err(bad)
    }

    /// Writes a new random key to `path` (created, never overwritten, mode 0600).
    ///
    /// # Errors
    /// The file exists or cannot be written.
    pub fn write_new(path: &Path) -> Result<ClusterKey, ClusterKeyError> {
        use std::io::Write;
        let io = |source| ClusterKeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let key = ClusterKey::generate().map_err(io)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(io)?;
        file.write_all(&key.key).map_err(io)?;
        file.write_all(b"\n").map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(key)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length.
        HmacSha256::new_from_slice(&self.key).expect("HMAC accepts every key length")
    }

    fn head_mac(&self, secs: i64, len: u64) -> HmacSha256 {
        let mut m = self.mac();
        m.update(HEAD_TAG);
        m.update(&secs.to_be_bytes());
        m.update(&len.to_be_bytes());
        m
    }

    fn body_mac(&self, head_mac: &[u8; 32], body: &[u8]) -> HmacSha256 {
        let mut m = self.mac();
        m.update(BODY_TAG);
        m.update(head_mac);
        m.update(body);
        m
    }

    /// The header value for a request with `body`, and the body MAC its answer must
    /// be checked against ([`verify_answer`](Self::verify_answer)).
    pub fn sign_request(&self, body: &[u8]) -> (String, [u8; 32]) {
        let secs = now_secs();
        let head: [u8; 32] = self
            .head_mac(secs, body.len() as u64)
            .finalize()
            .into_bytes()
            .into();
        let body_mac: [u8; 32] = self.body_mac(&head, body).finalize().into_bytes().into();
        (
            format!("v1.{secs}.{}.{}", hex(&head), hex(&body_mac)),
            body_mac,
        )
    }

    /// Checks a request's header before its body is read: shape, clock, the signed
    /// length against `content_length`, the head MAC.
    ///
    /// # Errors
    /// [`ClusterKeyError`]: missing, malformed, skewed, another length, another key.
    pub fn verify_head(
        &self,
        header: Option<&str>,
        content_length: Option<u64>,
    ) -> Result<SignedHead, ClusterKeyError> {
        let header = header.ok_or(ClusterKeyError::Missing)?;
        let mut parts = header.split('.');
        let (Some("v1"), Some(secs), Some(head), Some(body), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(ClusterKeyError::Malformed);
        };
        let secs: i64 = secs.parse().map_err(|_| ClusterKeyError::Malformed)?;
        let head_mac = unhex32(head).ok_or(ClusterKeyError::Malformed)?;
        let body_mac = unhex32(body).ok_or(ClusterKeyError::Malformed)?;
        let len = content_length.ok_or(ClusterKeyError::LengthMismatch)?;
        self.head_mac(secs, len)
            .verify_slice(&head_mac)
            .map_err(|_| ClusterKeyError::WrongKey)?;
        // Only a holder of the key gets here: a skew report tells an operator about a
        // clock, not an attacker about anything.
        let off = secs.saturating_sub(now_secs());
        if off.unsigned_abs() > CLOCK_SKEW.as_secs() {
            return Err(ClusterKeyError::Skewed(off));
        }
        Ok(SignedHead {
            head_mac,
            body_mac,
            len,
        })
    }

    /// Checks the body against a head [`verify_head`](Self::verify_head) accepted.
    ///
    /// # Errors
    /// [`ClusterKeyError::LengthMismatch`], [`ClusterKeyError::WrongKey`].
    pub fn verify_body(&self, head: &SignedHead, body: &[u8]) -> Result<(), ClusterKeyError> {
        if body.len() as u64 != head.len {
            return Err(ClusterKeyError::LengthMismatch);
        }
        self.body_mac(&head.head_mac, body)
            .verify_slice(&head.body_mac)
            .map_err(|_| ClusterKeyError::WrongKey)
    }

    fn answer_mac(&self, request_body_mac: &[u8; 32], answer: &[u8]) -> HmacSha256 {
        let mut m = self.mac();
        m.update(ANSWER_TAG);
        m.update(request_body_mac);
        m.update(answer);
        m
    }

    /// The header value for the answer to the request `head`.
    pub fn sign_answer(&self, head: &SignedHead, answer: &[u8]) -> String {
        let mac = self.answer_mac(&head.body_mac, answer).finalize();
        format!("v1.{}", hex(&mac.into_bytes()))
    }

    /// Checks an answer's header against the request's body MAC.
    ///
    /// # Errors
    /// [`ClusterKeyError`]: missing, malformed, another key.
    pub fn verify_answer(
        &self,
        request_body_mac: &[u8; 32],
        header: Option<&str>,
        answer: &[u8],
    ) -> Result<(), ClusterKeyError> {
        let header = header.ok_or(ClusterKeyError::Missing)?;
        let mac = header
            .strip_prefix("v1.")
            .and_then(unhex32)
            .ok_or(ClusterKeyError::Malformed)?;
        self.answer_mac(request_body_mac, answer)
            .verify_slice(&mac)
            .map_err(|_| ClusterKeyError::WrongKey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ClusterKey {
        ClusterKey::from_bytes(vec![b; 32]).unwrap()
    }

    #[test]
    fn a_signed_request_and_its_answer_verify_under_the_same_key_only() {
        let (k, other) = (key(1), key(2));
        let body = b"an rpc";
        let (header, body_mac) = k.sign_request(body);
        let head = k.verify_head(Some(&header), Some(6)).unwrap();
        k.verify_body(&head, body).unwrap();
        assert!(matches!(
            other.verify_head(Some(&header), Some(6)),
            Err(ClusterKeyError::WrongKey)
        ));
        assert!(matches!(
            k.verify_body(&head, b"an rpX"),
            Err(ClusterKeyError::WrongKey)
        ));
        assert!(matches!(
            k.verify_head(Some(&header), Some(7)),
            Err(ClusterKeyError::WrongKey)
        ));
        let answer = k.sign_answer(&head, b"ok");
        k.verify_answer(&body_mac, Some(&answer), b"ok").unwrap();
        assert!(k.verify_answer(&body_mac, Some(&answer), b"no").is_err());
        assert!(
            other
                .verify_answer(&body_mac, Some(&answer), b"ok")
                .is_err()
        );
    }

    #[test]
    fn malformed_missing_and_skewed_headers_are_refused() {
        let k = key(1);
        assert!(matches!(
            k.verify_head(None, Some(1)),
            Err(ClusterKeyError::Missing)
        ));
        for bad in ["", "v1", "v2.1.aa.bb", "v1.x.aa.bb", "v1.1.zz.zz.zz"] {
            assert!(matches!(
                k.verify_head(Some(bad), Some(1)),
                Err(ClusterKeyError::Malformed)
            ));
        }
        let old = now_secs() - 3600;
        let head: [u8; 32] = k.head_mac(old, 1).finalize().into_bytes().into();
        let header = format!("v1.{old}.{}.{}", hex(&head), hex(&[0; 32]));
        assert!(matches!(
            k.verify_head(Some(&header), Some(1)),
            Err(ClusterKeyError::Skewed(_))
        ));
    }

    #[test]
    fn key_files_must_be_private_and_long_enough() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let written = ClusterKey::write_new(&path).unwrap();
        let read = ClusterKey::from_file(&path).unwrap();
        assert_eq!(written.key, read.key);
        assert!(ClusterKey::write_new(&path).is_err(), "never overwritten");
        assert!(!format!("{read:?}").contains(std::str::from_utf8(&read.key).unwrap()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(ClusterKey::from_file(&path).is_err());
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        std::fs::write(&path, "short\n").unwrap();
        assert!(ClusterKey::from_file(&path).is_err());
    }
}
