//! What can go wrong proxying a request, and what each failure allows next.
//!
//! The place that sees a failure decides its retry class and whose fault it
//! is (as pingora's `Error { etype, esource, retry }` does): a connect that
//! failed reached no one, a response that timed out must not be asked for
//! twice. The proxy loop only asks [`Failed::may_retry`] and
//! [`Failed::blame`]. [`ProxyError::status`] is the one mapping from a
//! failure to the client's status. Never decides which upstream comes next.

use std::time::Duration;

use http::StatusCode;
use weir_http::body::BodyError;

use crate::h1_client;

/// Why a request could not be proxied.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no upstream is available (all down or excluded)")]
    NoneAvailable,
    #[error("the upstream's queue is full")]
    QueueFull,
    #[error("no free connection slot within {0:?} in the queue")]
    QueueTimeout(Duration),
    #[error("cannot resolve: {0}")]
    Resolve(std::io::Error),
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("HTTP handshake: {0}")]
    Handshake(hyper::Error),
    #[error("{0}")]
    Upstream(hyper::Error),
    #[error("{0}")]
    Client(#[from] h1_client::ClientError),
    #[error("no response head within {0:?}")]
    ResponseTimeout(Duration),
    #[error("reading the request body: {0}")]
    ClientBody(BodyError),
    #[error("request smuggling attempt: {0}")]
    Smuggling(#[from] weir_http::h1::Violation),
    #[error("answered {0} to a WebSocket upgrade instead of 101 Switching Protocols")]
    NotSwitched(StatusCode),
}

/// A response extension on the answers weir makes when no upstream could
/// be reached at all (none available, the name unresolved, the connection
/// refused or timed out): a cache is then "disconnected" and may answer
/// with a stale copy (RFC 9111 §4.2.4), which an upstream's own 5xx never
/// allows by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable;

impl ProxyError {
    /// A short name of the failure's kind (a trace span's `error.type`).
    pub fn kind(&self) -> &'static str {
        use ProxyError as E;
        match self {
            E::NoneAvailable => "none_available",
            E::QueueFull | E::QueueTimeout(_) => "queue",
            E::Resolve(_) => "resolve",
            E::Connect(_) => "connect",
            E::ConnectTimeout(_) => "connect_timeout",
            E::Tls(_) => "tls",
            E::Handshake(_) | E::Upstream(_) | E::Client(_) | E::NotSwitched(_) => "protocol",
            E::ResponseTimeout(_) => "timeout",
            E::ClientBody(_) => "client_body",
            E::Smuggling(_) => "smuggling",
        }
    }

    /// Whether nothing answered at all (see [`Unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ProxyError::NoneAvailable
                | ProxyError::Resolve(_)
                | ProxyError::Connect(_)
                | ProxyError::ConnectTimeout(_)
        )
    }

    /// hyper's client saw the connection close before a response came.
    pub fn is_closed_early(&self) -> bool {
        matches!(self, ProxyError::Upstream(e) if e.is_incomplete_message() || e.is_closed())
    }

    /// The one mapping from a proxy failure to the client's status.
    pub fn status(&self) -> StatusCode {
        use ProxyError as E;
        match self {
            E::NoneAvailable | E::QueueFull | E::QueueTimeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            E::ConnectTimeout(_) | E::ResponseTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            E::Resolve(_)
            | E::Connect(_)
            | E::Tls(_)
            | E::Handshake(_)
            | E::Upstream(_)
            | E::Client(_)
            | E::NotSwitched(_) => StatusCode::BAD_GATEWAY,
            E::ClientBody(e) if too_large(e) => StatusCode::PAYLOAD_TOO_LARGE,
            E::ClientBody(e) if timed_out(e) => StatusCode::REQUEST_TIMEOUT,
            E::ClientBody(_) | E::Smuggling(_) => StatusCode::BAD_REQUEST,
        }
    }

    pub(crate) fn client_text(&self) -> &'static str {
        use ProxyError as E;
        match self {
            E::NoneAvailable => "503 Service Unavailable: no upstream server is available\n",
            E::QueueFull | E::QueueTimeout(_) => {
                "503 Service Unavailable: the upstream servers are busy\n"
            }
            E::ConnectTimeout(_) | E::ResponseTimeout(_) => {
                "504 Gateway Timeout: the upstream server did not answer in time\n"
            }
            E::ClientBody(e) if too_large(e) => "413 Content Too Large\n",
            E::ClientBody(e) if timed_out(e) => {
                "408 Request Timeout: the request body stopped arriving\n"
            }
            E::ClientBody(_) | E::Smuggling(_) => "400 Bad Request\n",
            _ => "502 Bad Gateway: the upstream server failed\n",
        }
    }
}

/// Whether a request body failed for running past the size limit the
/// server holds it to (`http_body_util::Limited`): a 413.
pub fn too_large(e: &BodyError) -> bool {
    // Through whatever client carried the body (hyper wraps it).
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether the client stopped sending a request body (`server.timeouts.body`):
/// a 408.
pub fn timed_out(e: &BodyError) -> bool {
    weir_http::body::timed_out(e.as_ref())
}

/// Whether another attempt may help, decided where the failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing reached the upstream: any request may go again.
    Untouched,
    /// A pooled connection the upstream had already closed: the request
    /// reached no one, and goes again without using up a retry (bounded by
    /// the pooled connections: a new one never fails this way).
    Free,
    /// The request went out and no answer came: only an idempotent request
    /// whose body can be sent again may go again.
    IfIdempotent,
    /// Never: a late answer is not asked for twice, and a broken client
    /// body is final.
    Never,
}

/// Whose fault a failure is. An upstream's counts against its passive
/// health, and that upstream is not tried again for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    Upstream,
    Client,
    /// A connection lost on our side before anything was written.
    Nobody,
}

/// A failed attempt: the error, its retry class and whose fault it was.
#[derive(Debug)]
pub struct Failed {
    pub error: ProxyError,
    pub retry: Retry,
    pub blame: Blame,
}

impl Failed {
    /// No connection could be made: nothing was sent.
    pub fn connect(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::Untouched,
            blame: Blame::Upstream,
        }
    }

    /// The connection was gone before the request was written.
    pub fn not_sent(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::Untouched,
            blame: Blame::Nobody,
        }
    }

    /// A pooled connection the upstream had closed, met by an idempotent
    /// request with its body in memory.
    pub fn stale(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::Free,
            blame: Blame::Nobody,
        }
    }

    /// The request (or part of it) went out; no response came back.
    pub fn after_send(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::IfIdempotent,
            blame: Blame::Upstream,
        }
    }

    /// An exchange on weir's own connection that failed: on a pooled
    /// connection found closed (`stale`), before anything was written, or
    /// after.
    pub fn exchange(error: ProxyError, stale: bool, nothing_sent: bool) -> Self {
        if stale {
            Failed::stale(error)
        } else if nothing_sent {
            Failed::not_sent(error)
        } else {
            Failed::after_send(error)
        }
    }

    /// The response did not come within the timeout.
    pub fn timeout(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::Never,
            blame: Blame::Upstream,
        }
    }

    /// The client's own request body failed (aborted, bad chunking).
    pub fn client(error: ProxyError) -> Self {
        Failed {
            error,
            retry: Retry::Never,
            blame: Blame::Client,
        }
    }

    /// Whether nothing of the request reached anyone (its body is intact).
    pub fn untouched(&self) -> bool {
        matches!(self.retry, Retry::Untouched | Retry::Free)
    }

    /// Whether another upstream may be tried. `attempt` counts retries so
    /// far; `replayable`: the request's body can be sent again.
    pub fn may_retry(
        &self,
        idempotent: bool,
        replayable: bool,
        attempt: u32,
        retries: u32,
    ) -> bool {
        match self.retry {
            Retry::Free => true,
            _ if attempt >= retries => false,
            Retry::Untouched => true,
            Retry::IfIdempotent => idempotent && replayable,
            Retry::Never => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e() -> ProxyError {
        ProxyError::NoneAvailable
    }

    #[test]
    fn retry_rules() {
        // Nothing sent: any method, any body.
        assert!(Failed::connect(e()).may_retry(false, false, 0, 2));
        assert!(Failed::not_sent(e()).may_retry(false, false, 1, 2));
        // Out of retries.
        assert!(!Failed::connect(e()).may_retry(true, true, 2, 2));
        assert!(!Failed::not_sent(e()).may_retry(true, true, 2, 2));
        // A pooled connection found closed uses up no retry.
        assert!(Failed::stale(e()).may_retry(true, true, 2, 2));
        assert!(Failed::stale(e()).may_retry(true, true, 0, 0));
        // Sent: only idempotent with a body we still hold.
        assert!(Failed::after_send(e()).may_retry(true, true, 0, 2));
        assert!(!Failed::after_send(e()).may_retry(false, true, 0, 2));
        assert!(!Failed::after_send(e()).may_retry(true, false, 0, 2));
        // A slow upstream is not hammered again; a broken client body is final.
        assert!(!Failed::timeout(e()).may_retry(true, true, 0, 2));
        assert!(!Failed::client(e()).may_retry(true, true, 0, 2));
    }

    #[test]
    fn blame_decides_passive_health() {
        assert_eq!(Failed::connect(e()).blame, Blame::Upstream);
        assert_eq!(Failed::after_send(e()).blame, Blame::Upstream);
        assert_eq!(Failed::timeout(e()).blame, Blame::Upstream);
        assert_eq!(Failed::not_sent(e()).blame, Blame::Nobody);
        assert_eq!(Failed::stale(e()).blame, Blame::Nobody);
        assert_eq!(Failed::client(e()).blame, Blame::Client);
    }

    #[test]
    fn statuses() {
        assert_eq!(
            ProxyError::NoneAvailable.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ProxyError::QueueFull.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ProxyError::ConnectTimeout(Duration::from_secs(1)).status(),
            StatusCode::GATEWAY_TIMEOUT
        );
        assert_eq!(
            ProxyError::Connect(std::io::Error::other("refused")).status(),
            StatusCode::BAD_GATEWAY
        );
    }

    #[test]
    fn only_a_failure_that_reached_no_upstream_is_unreachable() {
        for e in [
            ProxyError::NoneAvailable,
            ProxyError::Connect(std::io::Error::other("refused")),
            ProxyError::ConnectTimeout(Duration::from_secs(1)),
        ] {
            assert!(e.is_unreachable(), "{e}");
        }
        for e in [
            ProxyError::QueueFull,
            ProxyError::ResponseTimeout(Duration::from_secs(1)),
            ProxyError::NotSwitched(StatusCode::OK),
        ] {
            assert!(!e.is_unreachable(), "{e}");
        }
    }
}
