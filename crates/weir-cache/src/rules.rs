//! The rules of RFC 9111 for a shared cache, as plain functions of
//! (request, response, time): whether a response may be stored (§3), how
//! long it is fresh (§4.2.1, §4.2.2), its age (§4.2.3), when a stored
//! response may be reused, served stale or must be validated (§4, §4.2.4,
//! §5.2, RFC 5861), and which requests invalidate (§4.4).
//!
//! Time is whole seconds since the epoch, always passed in: nothing here
//! reads a clock, touches storage or builds a response.

use http::header::{self, HeaderMap, HeaderName};
use http::{Method, StatusCode};
use weir_config::cache::{CachePolicy, SetCookie};
use weir_http::fields::http_date;

use crate::control::CacheControl;

/// Heuristic freshness is at most this (a day), whatever `Last-Modified` says.
const MAX_HEURISTIC: u64 = 86_400;

/// Why a response was not stored: the `detail` of its `Cache-Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncacheable {
    Method,
    RequestBody,
    RequestNoStore,
    Status,
    NoStore,
    Private,
    Authorization,
    SetCookie,
    VaryStar,
    NoFreshness,
    TooLarge,
}

impl Uncacheable {
    pub fn as_str(self) -> &'static str {
        match self {
            Uncacheable::Method => "method",
            Uncacheable::RequestBody => "request-body",
            Uncacheable::RequestNoStore => "request-no-store",
            Uncacheable::Status => "status",
            Uncacheable::NoStore => "no-store",
            Uncacheable::Private => "private",
            Uncacheable::Authorization => "authorization",
            Uncacheable::SetCookie => "set-cookie",
            Uncacheable::VaryStar => "vary-star",
            Uncacheable::NoFreshness => "no-freshness",
            Uncacheable::TooLarge => "too-large",
        }
    }
}

/// One request and the response to it, as the rules read them.
pub struct Exchange<'a> {
    pub method: &'a Method,
    pub req: &'a HeaderMap,
    /// The request's directives, when the policy honours them.
    pub req_cc: Option<&'a CacheControl>,
    pub status: StatusCode,
    pub resp: &'a HeaderMap,
    pub cc: &'a CacheControl,
}

/// RFC 9110 §15.1: statuses a cache may give heuristic freshness.
pub fn heuristically_cacheable(s: StatusCode) -> bool {
    matches!(
        s.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// §3 and §5.2.2.3: the final statuses whose caching rules weir follows:
/// those RFC 9110 §15 defines, but for 206 (weir stores no partial
/// responses) and 304 (it updates a stored response instead).
pub fn understands(s: StatusCode) -> bool {
    matches!(
        s.as_u16(),
        200..=205 | 300..=303 | 305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// §3: whether a shared cache may store the response.
pub fn storable(x: &Exchange<'_>, policy: &CachePolicy) -> Result<(), Uncacheable> {
    // §3 ¶1: a method whose responses are cacheable and that weir stores
    // (HEAD is fetched as GET).
    if x.method != Method::GET {
        return Err(Uncacheable::Method);
    }
    // A final status the cache understands: not 1xx, and not the partial
    // and not-modified answers, which update stored responses instead.
    if x.status.is_informational()
        || x.status == StatusCode::PARTIAL_CONTENT
        || x.status == StatusCode::NOT_MODIFIED
    {
        return Err(Uncacheable::Status);
    }
    // §5.2.2.3: `must-understand` stores only a status the cache
    // understands, and then overrides `no-store`.
    let understood = x.cc.must_understand && understands(x.status);
    if x.cc.must_understand && !understood {
        return Err(Uncacheable::Status);
    }
    if x.req_cc.is_some_and(|c| c.no_store) {
        return Err(Uncacheable::RequestNoStore);
    }
    if x.cc.no_store && !understood {
        return Err(Uncacheable::NoStore);
    }
    // §5.2.2.7: unqualified `private` is for private caches only.
    if x.cc.private {
        return Err(Uncacheable::Private);
    }
    // §3.5: an authenticated request's answer only when the response says
    // it may be shared.
    if x.req.contains_key(header::AUTHORIZATION)
        && !(x.cc.public || x.cc.must_revalidate || x.cc.s_maxage.is_some())
    {
        return Err(Uncacheable::Authorization);
    }
    if policy.set_cookie == SetCookie::Pass && x.resp.contains_key(header::SET_COOKIE) {
        return Err(Uncacheable::SetCookie);
    }
    // RFC 9110 §12.5.5: `Vary: *` never matches a later request.
    if x.resp.get_all(header::VARY).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|f| f.trim() == "*"))
    }) {
        return Err(Uncacheable::VaryStar);
    }
    // §3 ¶1 last item: explicit freshness, `public`, a heuristically
    // cacheable status, or a validator to revalidate with.
    let explicit =
        x.cc.max_age.is_some() || x.cc.s_maxage.is_some() || x.resp.contains_key(header::EXPIRES);
    if !(explicit || x.cc.public || heuristically_cacheable(x.status)) {
        return Err(Uncacheable::NoFreshness);
    }
    Ok(())
}

fn date(h: &HeaderMap, name: HeaderName) -> Option<u64> {
    http_date(h.get(name)?.as_bytes())
}

/// `Last-Modified` in seconds since the epoch.
pub fn last_modified(h: &HeaderMap) -> Option<u64> {
    date(h, header::LAST_MODIFIED)
}

/// §4.2.1 (explicit) and §4.2.2 (heuristic): how long the response is
/// fresh, counted from its generation. `response_time`: when it arrived,
/// standing in for a missing `Date`.
pub fn freshness_lifetime(
    status: StatusCode,
    resp: &HeaderMap,
    cc: &CacheControl,
    response_time: u64,
    policy: &CachePolicy,
) -> u64 {
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    // RFC 9110 §6.6.1: a missing or invalid Date is the arrival time.
    let date_value = date(resp, header::DATE).unwrap_or(response_time);
    let mut expires = resp.get_all(header::EXPIRES).iter();
    if let Some(first) = expires.next() {
        // §5.3: an invalid date (such as "0") means already expired; so do
        // two Expires lines (§4.2.1: the first, or stale).
        if expires.next().is_some() {
            return 0;
        }
        return http_date(first.as_bytes()).map_or(0, |e| e.saturating_sub(date_value));
    }
    if !(heuristically_cacheable(status) || cc.public) {
        return 0;
    }
    if let Some(ttl) = policy.default_ttl {
        return ttl.as_secs();
    }
    // §4.2.2: a fraction of the time since the last modification.
    match date(resp, header::LAST_MODIFIED) {
        Some(lm) if lm < date_value => ((date_value - lm) / 10).min(MAX_HEURISTIC),
        _ => 0,
    }
}

/// §4.2.3: the age the response had on arrival
/// (`corrected_initial_age`), from its `Age` and `Date` and the request's
/// round trip.
pub fn initial_age(resp: &HeaderMap, request_time: u64, response_time: u64) -> u64 {
    let age_value = age_value(resp);
    let date_value = date(resp, header::DATE).unwrap_or(response_time);
    let apparent_age = response_time.saturating_sub(date_value);
    let response_delay = response_time.saturating_sub(request_time);
    let corrected_age_value = age_value.saturating_add(response_delay);
    apparent_age.max(corrected_age_value)
}

/// §5.1: the `Age` a response arrived with. Of a list (one line or
/// several), the first member counts; values past 2^31 read as 2^31. A
/// member with a parameter (`7200;a=b`) still says the response is at least
/// that old, so its number counts. Anything else that is not a
/// non-negative integer (`-5`, `7200.0`, `abc`) is ignored, as §5.1 says:
/// the age then comes from `Date` and the round trip alone (§4.2.3).
pub fn age_value(resp: &HeaderMap) -> u64 {
    let Some(s) = resp.get(header::AGE).and_then(|v| v.to_str().ok()) else {
        return 0;
    };
    let first = s.split(',').next().unwrap_or("");
    let number = first.split(';').next().unwrap_or("").trim();
    crate::control::delta_seconds(number).unwrap_or(0)
}

/// What a stored response may be used for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Fresh (or stale within what the request accepts): served as is.
    Fresh,
    /// Stale within its grace: served at once while one background
    /// request refreshes it (RFC 5861 `stale-while-revalidate`).
    StaleWhileRevalidate,
    /// Must be validated with the origin before it is served.
    Validate,
}

/// A stored response's freshness facts, fixed when it is stored or
/// freshened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub lifetime: u64,
    pub initial_age: u64,
    pub response_time: u64,
    /// From `stale-while-revalidate`, else the policy's `grace` (0 unless
    /// configured).
    pub swr: u64,
    /// From `stale-if-error`, else the policy's (0 unless configured).
    pub sie: u64,
    /// `no-cache`, `must-revalidate`, `proxy-revalidate` or `s-maxage`:
    /// never served stale, whatever happens upstream (§4.2.4).
    pub forbids_stale: bool,
    /// Unqualified `no-cache` (§5.2.2.4): validated before every reuse.
    pub no_cache: bool,
}

impl Freshness {
    pub fn new(
        status: StatusCode,
        resp: &HeaderMap,
        cc: &CacheControl,
        request_time: u64,
        response_time: u64,
        policy: &CachePolicy,
    ) -> Freshness {
        Freshness {
            lifetime: freshness_lifetime(status, resp, cc, response_time, policy),
            initial_age: initial_age(resp, request_time, response_time),
            response_time,
            swr: cc.stale_while_revalidate.unwrap_or(policy.grace.as_secs()),
            sie: cc.stale_if_error.unwrap_or(policy.stale_if_error.as_secs()),
            forbids_stale: cc.forbids_stale(),
            no_cache: cc.no_cache,
        }
    }

    /// §4.2.3 `current_age`.
    pub fn age(&self, now: u64) -> u64 {
        self.initial_age + now.saturating_sub(self.response_time)
    }

    /// Seconds of freshness left; negative once stale (`Cache-Status` ttl).
    pub fn ttl(&self, now: u64) -> i64 {
        self.lifetime as i64 - self.age(now) as i64
    }

    fn staleness(&self, now: u64) -> u64 {
        self.age(now).saturating_sub(self.lifetime)
    }

    /// §4: whether the response may be reused for a request now, with the
    /// request's directives when the policy honours them (§5.2.1).
    pub fn reuse(&self, now: u64, req: Option<&CacheControl>) -> Reuse {
        if self.no_cache {
            return Reuse::Validate;
        }
        let age = self.age(now);
        if let Some(r) = req {
            if r.no_cache || r.max_age.is_some_and(|m| age > m) {
                return Reuse::Validate;
            }
            if let Some(min) = r.min_fresh
                && self.lifetime.saturating_sub(age) < min
            {
                return Reuse::Validate;
            }
        }
        if age < self.lifetime {
            return Reuse::Fresh;
        }
        if self.forbids_stale {
            return Reuse::Validate;
        }
        let stale = self.staleness(now);
        // §5.2.1.2: the client accepts this much staleness.
        if let Some(r) = req
            && let Some(max) = r.max_stale
            && max.is_none_or(|m| stale <= m)
        {
            return Reuse::Fresh;
        }
        if stale < self.swr {
            Reuse::StaleWhileRevalidate
        } else {
            Reuse::Validate
        }
    }

    /// RFC 5861 §4 and RFC 9111 §4.2.4: whether the stale response may stand
    /// in for an origin that failed (a 500, 502, 503, 504, or no answer).
    pub fn serves_on_error(&self, now: u64, req: Option<&CacheControl>) -> bool {
        if self.forbids_stale {
            return false;
        }
        let window = req.and_then(|r| r.stale_if_error).unwrap_or(self.sie);
        window > 0 && self.staleness(now) <= window
    }

    /// §4.2.4: whether the stale response may answer while the cache is
    /// disconnected (no upstream could be reached at all): unless a
    /// directive forbids serving it stale.
    pub fn serves_disconnected(&self) -> bool {
        !self.forbids_stale
    }

    /// When the stored response has no further use (stale past its grace
    /// and its error window), in seconds since the epoch.
    pub fn useless_after(&self) -> u64 {
        let fresh_until = (self.response_time + self.lifetime).saturating_sub(self.initial_age);
        let extra = if self.forbids_stale {
            0
        } else {
            self.swr.max(self.sie)
        };
        fresh_until.saturating_add(extra)
    }
}

/// Whether `resp` was stale and the answer from a failing origin: a
/// response RFC 5861 lets the cache replace with its stale copy.
pub fn is_origin_error(s: StatusCode) -> bool {
    matches!(s.as_u16(), 500 | 502 | 503 | 504)
}

/// §4.4: an unsafe method answered with a non-error status invalidates the
/// target URI (and the `Location` and `Content-Location` URIs on the same
/// host).
pub fn invalidates(method: &Method, status: StatusCode) -> bool {
    !method.is_safe() && (status.is_success() || status.is_redirection())
}

/// Fields a 304 never writes into a stored response (§3.2): the framing
/// and coding the stored body keeps, `Age` (computed when served),
/// hop-by-hop fields (§3.1), and `Set-Cookie` (a cookie is never shared).
static NOT_FRESHENED: [HeaderName; 12] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONTENT_ENCODING,
    header::CONTENT_RANGE,
    header::AGE,
    header::SET_COOKIE,
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("keep-alive"),
];

/// §3.2 and §4.3.4: a 304's fields replace the stored ones (Cache-Control,
/// Expires, ETag, Content-Type, Content-Location, X-*, any other), except
/// [`NOT_FRESHENED`], the fields its `Connection` names, the policy's tags
/// field (kept apart), and the fields its `no-cache="…"`/`private="…"`
/// name, which leave the stored response.
pub fn freshen(stored: &mut HeaderMap, not_modified: &HeaderMap, policy: &CachePolicy) {
    let cc = CacheControl::parse(not_modified);
    let listed_in_connection = |name: &HeaderName| {
        not_modified.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|f| f.trim().eq_ignore_ascii_case(name.as_str()))
            })
        })
    };
    for name in not_modified.keys() {
        if NOT_FRESHENED.contains(name) || *name == policy.tags_header || listed_in_connection(name)
        {
            continue;
        }
        stored.remove(name);
        for v in not_modified.get_all(name) {
            stored.append(name.clone(), v.clone());
        }
    }
    for f in &cc.strip_fields {
        if let Ok(n) = HeaderName::from_bytes(f.as_bytes()) {
            stored.remove(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const T0: u64 = 1_800_000_000;

    fn http_date(secs: u64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn check(req: &[(&str, &str)], status: u16, resp: &[(&str, &str)]) -> Result<(), Uncacheable> {
        check_with(req, status, resp, &CachePolicy::default())
    }

    fn check_with(
        req: &[(&str, &str)],
        status: u16,
        resp: &[(&str, &str)],
        p: &CachePolicy,
    ) -> Result<(), Uncacheable> {
        let (req, resp) = (hm(req), hm(resp));
        let cc = CacheControl::parse(&resp);
        storable(
            &Exchange {
                method: &Method::GET,
                req: &req,
                req_cc: None,
                status: StatusCode::from_u16(status).unwrap(),
                resp: &resp,
                cc: &cc,
            },
            p,
        )
    }

    fn fresh(resp: &[(&str, &str)], req_at: u64, resp_at: u64) -> Freshness {
        fresh_with(resp, req_at, resp_at, &CachePolicy::default())
    }

    fn fresh_with(resp: &[(&str, &str)], req_at: u64, resp_at: u64, p: &CachePolicy) -> Freshness {
        let h = hm(resp);
        Freshness::new(
            StatusCode::OK,
            &h,
            &CacheControl::parse(&h),
            req_at,
            resp_at,
            p,
        )
    }

    /// Varnish's defaults, set explicitly: 10 s of grace, an hour of
    /// stale-if-error.
    fn varnish_like() -> CachePolicy {
        CachePolicy {
            grace: Duration::from_secs(10),
            stale_if_error: Duration::from_secs(3600),
            ..Default::default()
        }
    }

    #[test]
    fn s3_storing_needs_a_cacheable_method_and_final_status() {
        assert_eq!(check(&[], 200, &[("cache-control", "max-age=60")]), Ok(()));
        let (req, resp) = (hm(&[]), hm(&[("cache-control", "max-age=60")]));
        let cc = CacheControl::parse(&resp);
        let x = |m: &'static Method, s: u16| {
            storable(
                &Exchange {
                    method: m,
                    req: &req,
                    req_cc: None,
                    status: StatusCode::from_u16(s).unwrap(),
                    resp: &resp,
                    cc: &cc,
                },
                &CachePolicy::default(),
            )
        };
        static POST: Method = Method::POST;
        static GET: Method = Method::GET;
        assert_eq!(x(&POST, 200), Err(Uncacheable::Method));
        assert_eq!(x(&GET, 206), Err(Uncacheable::Status));
        assert_eq!(x(&GET, 304), Err(Uncacheable::Status));
        assert_eq!(x(&GET, 302), Ok(()));
    }

    #[test]
    fn s3_no_store_is_never_stored() {
        assert_eq!(
            check(&[], 200, &[("cache-control", "no-store, max-age=60")]),
            Err(Uncacheable::NoStore)
        );
    }

    #[test]
    fn s3_private_is_not_for_a_shared_cache() {
        assert_eq!(
            check(&[], 200, &[("cache-control", "private, max-age=60")]),
            Err(Uncacheable::Private)
        );
        // Qualified private: stored, without the named fields.
        assert_eq!(
            check(
                &[],
                200,
                &[("cache-control", "private=\"x-user\", max-age=60")]
            ),
            Ok(())
        );
    }

    #[test]
    fn s3_needs_freshness_or_a_heuristically_cacheable_status() {
        assert_eq!(check(&[], 200, &[]), Ok(()));
        assert_eq!(check(&[], 302, &[]), Err(Uncacheable::NoFreshness));
        assert_eq!(check(&[], 302, &[("cache-control", "public")]), Ok(()));
        assert_eq!(check(&[], 503, &[("expires", &http_date(T0))]), Ok(()));
    }

    #[test]
    fn s3_1_vary_star_is_not_stored() {
        assert_eq!(
            check(
                &[],
                200,
                &[("vary", "accept, *"), ("cache-control", "max-age=9")]
            ),
            Err(Uncacheable::VaryStar)
        );
    }

    #[test]
    fn s3_5_authorized_requests_need_explicit_permission() {
        let auth = [("authorization", "Bearer x")];
        assert_eq!(
            check(&auth, 200, &[("cache-control", "max-age=60")]),
            Err(Uncacheable::Authorization)
        );
        for ok in ["public", "must-revalidate", "s-maxage=60"] {
            assert_eq!(check(&auth, 200, &[("cache-control", ok)]), Ok(()), "{ok}");
        }
    }

    #[test]
    fn set_cookie_is_passed_unless_the_policy_strips_it() {
        let resp = [("set-cookie", "sid=1"), ("cache-control", "max-age=60")];
        assert_eq!(check(&[], 200, &resp), Err(Uncacheable::SetCookie));
        let strip = CachePolicy {
            set_cookie: SetCookie::Strip,
            ..Default::default()
        };
        assert_eq!(check_with(&[], 200, &resp, &strip), Ok(()));
    }

    #[test]
    fn s4_2_1_s_maxage_then_max_age_then_expires() {
        let p = CachePolicy::default();
        let life = |h: &[(&str, &str)]| {
            let h = hm(h);
            freshness_lifetime(StatusCode::OK, &h, &CacheControl::parse(&h), T0, &p)
        };
        assert_eq!(life(&[("cache-control", "max-age=60, s-maxage=5")]), 5);
        assert_eq!(
            life(&[
                ("cache-control", "max-age=60"),
                ("expires", &http_date(T0 + 9))
            ]),
            60
        );
        assert_eq!(
            life(&[("date", &http_date(T0)), ("expires", &http_date(T0 + 90))]),
            90
        );
        // Without Date, the arrival time stands in for it.
        assert_eq!(life(&[("expires", &http_date(T0 + 30))]), 30);
        // An invalid Expires means already expired.
        assert_eq!(life(&[("expires", "0")]), 0);
    }

    #[test]
    fn s4_2_2_heuristic_is_a_tenth_of_the_last_modified_age() {
        let p = CachePolicy::default();
        let h = hm(&[
            ("date", &http_date(T0)),
            ("last-modified", &http_date(T0 - 1000)),
        ]);
        let cc = CacheControl::parse(&h);
        assert_eq!(freshness_lifetime(StatusCode::OK, &h, &cc, T0, &p), 100);
        // Not for a status that is not heuristically cacheable.
        assert_eq!(freshness_lifetime(StatusCode::FOUND, &h, &cc, T0, &p), 0);
        // Capped at a day.
        let old = hm(&[
            ("date", &http_date(T0)),
            ("last-modified", &http_date(T0 - 100 * 86_400)),
        ]);
        let cc = CacheControl::parse(&old);
        assert_eq!(
            freshness_lifetime(StatusCode::OK, &old, &cc, T0, &p),
            86_400
        );
        // The policy's default replaces the heuristic, not explicit freshness.
        let d = CachePolicy {
            default_ttl: Some(Duration::from_secs(120)),
            ..Default::default()
        };
        assert_eq!(freshness_lifetime(StatusCode::OK, &h, &cc, T0, &d), 120);
        let e = hm(&[("cache-control", "max-age=7")]);
        let cc = CacheControl::parse(&e);
        assert_eq!(freshness_lifetime(StatusCode::OK, &e, &cc, T0, &d), 7);
    }

    #[test]
    fn s4_2_3_age_counts_the_round_trip_and_residence() {
        // Sent at T0, answered at T0+2 with Age 10 and a Date of T0.
        let f = fresh(
            &[
                ("age", "10"),
                ("date", &http_date(T0)),
                ("cache-control", "max-age=60"),
            ],
            T0,
            T0 + 2,
        );
        assert_eq!(f.initial_age, 12);
        assert_eq!(f.age(T0 + 2), 12);
        assert_eq!(f.age(T0 + 32), 42);
        assert_eq!(f.ttl(T0 + 32), 18);
        // A Date far in the past (clock skew) counts too: apparent age.
        let f = fresh(&[("date", &http_date(T0 - 100))], T0, T0);
        assert_eq!(f.initial_age, 100);
    }

    #[test]
    fn s4_2_fresh_until_the_lifetime_then_grace_when_configured_then_validation() {
        let f = fresh_with(&[("cache-control", "max-age=60")], T0, T0, &varnish_like());
        assert_eq!(f.reuse(T0 + 59, None), Reuse::Fresh);
        assert_eq!(f.reuse(T0 + 60, None), Reuse::StaleWhileRevalidate);
        assert_eq!(f.reuse(T0 + 69, None), Reuse::StaleWhileRevalidate);
        assert_eq!(f.reuse(T0 + 70, None), Reuse::Validate);
        assert!(f.serves_on_error(T0 + 3660, None));
    }

    #[test]
    fn s4_2_4_by_default_stale_is_served_only_when_the_origin_allows_it() {
        let p = CachePolicy::default();
        assert_eq!(
            (p.grace, p.stale_if_error),
            (Duration::ZERO, Duration::ZERO)
        );
        let f = fresh(&[("cache-control", "max-age=60")], T0, T0);
        assert_eq!(f.reuse(T0 + 59, None), Reuse::Fresh);
        assert_eq!(f.reuse(T0 + 60, None), Reuse::Validate);
        assert!(!f.serves_on_error(T0 + 60, None));
        assert!(!f.serves_on_error(T0 + 61, None));
        // The origin allows it: stale-while-revalidate, stale-if-error.
        let f = fresh(
            &[(
                "cache-control",
                "max-age=60, stale-while-revalidate=5, stale-if-error=30",
            )],
            T0,
            T0,
        );
        assert_eq!(f.reuse(T0 + 64, None), Reuse::StaleWhileRevalidate);
        assert_eq!(f.reuse(T0 + 65, None), Reuse::Validate);
        assert!(f.serves_on_error(T0 + 90, None));
        assert!(!f.serves_on_error(T0 + 91, None));
        // The client allows it (max-stale, when its directives are honoured).
        let f = fresh(&[("cache-control", "max-age=60")], T0, T0);
        let req = CacheControl::parse(&hm(&[("cache-control", "max-stale=10")]));
        assert_eq!(f.reuse(T0 + 70, Some(&req)), Reuse::Fresh);
        assert_eq!(f.reuse(T0 + 71, Some(&req)), Reuse::Validate);
        // No upstream can be reached at all.
        assert!(f.serves_disconnected());
    }

    #[test]
    fn s4_2_4_no_cache_must_revalidate_proxy_revalidate_s_maxage_forbid_stale() {
        for cc in [
            "max-age=60, must-revalidate, stale-while-revalidate=60, stale-if-error=60",
            "max-age=60, proxy-revalidate, stale-if-error=60",
            "s-maxage=60, stale-while-revalidate=60",
            "max-age=60, no-cache, stale-if-error=60",
        ] {
            // Not even with grace and stale-if-error configured.
            let f = fresh_with(&[("cache-control", cc)], T0, T0, &varnish_like());
            assert_eq!(f.reuse(T0 + 61, None), Reuse::Validate, "{cc}");
            assert!(!f.serves_on_error(T0 + 61, None), "{cc}");
            assert!(!f.serves_disconnected(), "{cc}");
            let any = CacheControl::parse(&hm(&[("cache-control", "max-stale")]));
            assert_eq!(f.reuse(T0 + 61, Some(&any)), Reuse::Validate, "{cc}");
        }
    }

    #[test]
    fn s5_2_2_4_no_cache_validates_every_time() {
        let f = fresh(&[("cache-control", "no-cache, max-age=60")], T0, T0);
        assert_eq!(f.reuse(T0, None), Reuse::Validate);
    }

    #[test]
    fn s5_2_1_request_directives_when_honoured() {
        let f = fresh(&[("cache-control", "max-age=60")], T0, T0);
        let req = |v: &str| CacheControl::parse(&hm(&[("cache-control", v)]));
        assert_eq!(f.reuse(T0 + 10, Some(&req("no-cache"))), Reuse::Validate);
        assert_eq!(f.reuse(T0 + 10, Some(&req("max-age=5"))), Reuse::Validate);
        assert_eq!(f.reuse(T0 + 10, Some(&req("max-age=15"))), Reuse::Fresh);
        assert_eq!(
            f.reuse(T0 + 10, Some(&req("min-fresh=55"))),
            Reuse::Validate
        );
        assert_eq!(f.reuse(T0 + 90, Some(&req("max-stale=40"))), Reuse::Fresh);
        assert_eq!(f.reuse(T0 + 90, Some(&req("max-stale"))), Reuse::Fresh);
        assert_eq!(
            f.reuse(T0 + 90, Some(&req("max-stale=20"))),
            Reuse::Validate
        );
    }

    #[test]
    fn s5_1_age_takes_the_first_member_and_ignores_what_is_no_integer() {
        let age = |vals: &[&str]| {
            let mut h = HeaderMap::new();
            for v in vals {
                h.append(header::AGE, v.parse().unwrap());
            }
            age_value(&h)
        };
        assert_eq!(age(&["7200"]), 7200);
        // A list, on one line or several: the first member.
        assert_eq!(age(&["7200, 0"]), 7200);
        assert_eq!(age(&["0, 7200"]), 0);
        assert_eq!(age(&["7200", "0"]), 7200);
        assert_eq!(age(&["0", "7200"]), 0);
        // A parameter: the response is at least that old.
        assert_eq!(age(&["7200;foo=bar"]), 7200);
        // Past 2^31: 2^31, never an overflow read as 0.
        assert_eq!(age(&["2147483649"]), 2_147_483_648);
        assert_eq!(age(&["99999999999999999999"]), 2_147_483_648);
        // Not a non-negative integer: ignored (§5.1), so only Date and the
        // round trip count.
        for bad in ["-7200", "7200.0", "abc", ""] {
            assert_eq!(age(&[bad]), 0, "{bad:?}");
        }
        let f = fresh(
            &[
                ("age", "-7200"),
                ("date", &http_date(T0 - 30)),
                ("cache-control", "max-age=3600"),
            ],
            T0,
            T0,
        );
        assert_eq!(f.initial_age, 30);
        // An old age makes a response stale on arrival.
        let f = fresh(
            &[("age", "7200, 0"), ("cache-control", "max-age=3600")],
            T0,
            T0,
        );
        assert_eq!(f.reuse(T0, None), Reuse::Validate);
        let f = fresh(
            &[("age", "2147483648"), ("cache-control", "max-age=3600")],
            T0,
            T0,
        );
        assert!(f.ttl(T0) < 0);
    }

    #[test]
    fn s5_3_expires_invalid_or_doubled_is_already_expired() {
        let p = CachePolicy::default();
        let life = |h: &[(&str, &str)]| {
            let h = hm(h);
            freshness_lifetime(StatusCode::OK, &h, &CacheControl::parse(&h), T0, &p)
        };
        let date = http_date(T0);
        for bad in [
            "0",
            "-1",
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
        ] {
            assert_eq!(life(&[("date", &date), ("expires", bad)]), 0, "{bad}");
        }
        let two = hm(&[
            ("date", &date),
            ("expires", "Thu, 18 Aug 2050 02:01:18 GMT"),
            ("expires", "Thu, 18 Aug 2050 02:01:19 GMT"),
        ]);
        assert_eq!(
            freshness_lifetime(StatusCode::OK, &two, &CacheControl::default(), T0, &p),
            0
        );
        // The three formats, and any case (RFC 9111 §4.2).
        let in_2050 = 2_544_400_878;
        for good in [
            "Thu, 18 Aug 2050 02:01:18 GMT",
            "THU, 18 AUG 2050 02:01:18 gMT",
            "Thursday, 18-Aug-50 02:01:18 GMT",
            "Thu Aug 18 02:01:18 2050",
        ] {
            assert_eq!(
                life(&[("date", &date), ("expires", good)]),
                in_2050 - T0,
                "{good}"
            );
        }
        // Far in the future, past 32 bits.
        assert!(
            life(&[
                ("date", &date),
                ("expires", "Sun, 21 Nov 2286 04:46:39 GMT")
            ]) > 1 << 32
        );
    }

    #[test]
    fn s4_2_1_expires_counts_from_date_whatever_the_clocks_say() {
        let p = CachePolicy::default();
        let life = |h: &[(&str, &str)], arrived: u64| {
            let h = hm(h);
            freshness_lifetime(StatusCode::OK, &h, &CacheControl::parse(&h), arrived, &p)
        };
        // The origin's clock a day fast or a day slow: the lifetime is
        // Expires − Date either way, not Expires − the cache's clock.
        for skew in [T0 + 86_400, T0 - 86_400] {
            let h = [
                ("date", http_date(skew)),
                ("expires", http_date(skew + 600)),
            ];
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(life(&h, T0), 600);
        }
        // Expires before Date: expired; an invalid Date is the arrival time.
        assert_eq!(
            life(
                &[
                    ("date", &http_date(T0 + 400)),
                    ("expires", &http_date(T0 + 300))
                ],
                T0
            ),
            0
        );
        assert_eq!(
            life(&[("date", "foo"), ("expires", &http_date(T0 + 10))], T0),
            10
        );
        // The age then decides (§4.2.3): a Date in the past ages the response,
        // one in the future does not make it younger.
        let f = fresh(
            &[
                ("date", &http_date(T0 - 100)),
                ("expires", &http_date(T0 - 40)),
            ],
            T0,
            T0,
        );
        assert_eq!((f.lifetime, f.initial_age), (60, 100));
        assert_eq!(f.reuse(T0, None), Reuse::Validate);
        let f = fresh(
            &[
                ("date", &http_date(T0 + 10)),
                ("expires", &http_date(T0 + 20)),
                ("age", "15"),
            ],
            T0,
            T0,
        );
        assert_eq!(f.reuse(T0, None), Reuse::Validate);
    }

    #[test]
    fn s3_statuses_stored_with_explicit_freshness_or_heuristically_cacheable() {
        for s in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            assert!(
                heuristically_cacheable(StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
            assert_eq!(check(&[], s, &[]), Ok(()), "{s}");
        }
        // RFC 9110 §15.1 lists 206 too; weir stores no partial response.
        assert!(heuristically_cacheable(StatusCode::PARTIAL_CONTENT));
        assert_eq!(check(&[], 206, &[]), Err(Uncacheable::Status));
        // Not heuristically cacheable: only with explicit freshness.
        for s in [302, 303, 307, 400, 500, 502, 503, 504, 299, 499, 599] {
            assert!(
                !heuristically_cacheable(StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
            assert_eq!(check(&[], s, &[]), Err(Uncacheable::NoFreshness), "{s}");
            assert_eq!(
                check(&[], s, &[("cache-control", "max-age=60")]),
                Ok(()),
                "{s}"
            );
        }
        // §4.2.2: heuristic freshness only for the heuristically cacheable.
        let h = hm(&[
            ("date", &http_date(T0)),
            ("last-modified", &http_date(T0 - 1000)),
        ]);
        let cc = CacheControl::parse(&h);
        let p = CachePolicy::default();
        assert_eq!(
            freshness_lifetime(StatusCode::NOT_FOUND, &h, &cc, T0, &p),
            100
        );
        assert_eq!(
            freshness_lifetime(StatusCode::from_u16(599).unwrap(), &h, &cc, T0, &p),
            0
        );
    }

    #[test]
    fn s5_2_2_3_must_understand_stores_only_understood_statuses() {
        let cc = [("cache-control", "max-age=3600, no-store, must-understand")];
        // Understood: must-understand overrides no-store.
        assert_eq!(check(&[], 200, &cc), Ok(()));
        assert_eq!(check(&[], 404, &cc), Ok(()));
        // Unknown (599, 299) or not stored by weir (206): never stored.
        for s in [599, 299, 206] {
            assert_eq!(check(&[], s, &cc), Err(Uncacheable::Status), "{s}");
        }
        assert_eq!(
            check(
                &[],
                599,
                &[("cache-control", "max-age=3600, must-understand")]
            ),
            Err(Uncacheable::Status)
        );
        // Without must-understand, an unknown status with freshness is stored.
        assert_eq!(
            check(&[], 599, &[("cache-control", "max-age=3600")]),
            Ok(())
        );
        assert!(!understands(StatusCode::from_u16(599).unwrap()));
        assert!(understands(StatusCode::GONE));
    }

    #[test]
    fn rfc5861_stale_while_revalidate_and_stale_if_error() {
        let f = fresh(
            &[(
                "cache-control",
                "max-age=10, stale-while-revalidate=30, stale-if-error=300",
            )],
            T0,
            T0,
        );
        assert_eq!(f.reuse(T0 + 39, None), Reuse::StaleWhileRevalidate);
        assert_eq!(f.reuse(T0 + 40, None), Reuse::Validate);
        assert!(f.serves_on_error(T0 + 310, None));
        assert!(!f.serves_on_error(T0 + 311, None));
        assert_eq!(f.useless_after(), T0 + 310);
        assert!(is_origin_error(StatusCode::BAD_GATEWAY));
        assert!(!is_origin_error(StatusCode::NOT_FOUND));
    }

    #[test]
    fn s4_3_4_a_304_replaces_fields_but_not_framing() {
        let mut stored = hm(&[
            ("content-length", "5"),
            ("content-encoding", "gzip"),
            ("etag", "\"a\""),
            ("cache-control", "max-age=1"),
            ("content-type", "text/plain"),
            ("expires", "0"),
            ("x-keep", "1"),
            ("x-gen", "1"),
            ("x-private", "secret"),
        ]);
        freshen(
            &mut stored,
            &hm(&[
                ("content-length", "0"),
                ("content-encoding", "br"),
                ("cache-control", "max-age=60, private=\"x-private\""),
                ("etag", "\"b\""),
                ("content-type", "text/html"),
                ("content-location", "/other"),
                ("expires", "Thu, 18 Aug 2050 02:01:18 GMT"),
                ("x-gen", "2"),
                ("x-new", "a"),
                ("x-new", "b"),
                ("age", "5"),
                ("set-cookie", "sid=1"),
                ("surrogate-key", "t1"),
                ("connection", "x-hop"),
                ("x-hop", "1"),
            ]),
            &CachePolicy::default(),
        );
        // Replaced or added: every field but the excepted ones (§3.2).
        assert_eq!(stored["cache-control"], "max-age=60, private=\"x-private\"");
        assert_eq!(stored["etag"], "\"b\"");
        assert_eq!(stored["content-type"], "text/html");
        assert_eq!(stored["content-location"], "/other");
        assert_eq!(stored["expires"], "Thu, 18 Aug 2050 02:01:18 GMT");
        assert_eq!(stored["x-gen"], "2");
        assert_eq!(stored.get_all("x-new").iter().count(), 2);
        assert_eq!(stored["x-keep"], "1");
        // Kept: the stored body's framing and coding.
        assert_eq!(stored["content-length"], "5");
        assert_eq!(stored["content-encoding"], "gzip");
        // Never stored: Age, cookies, tags, hop-by-hop fields, and the
        // fields the new private="…" names.
        for gone in [
            "age",
            "set-cookie",
            "surrogate-key",
            "connection",
            "x-hop",
            "x-private",
        ] {
            assert!(!stored.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn s4_4_unsafe_methods_invalidate_on_success() {
        assert!(invalidates(&Method::POST, StatusCode::OK));
        assert!(invalidates(&Method::DELETE, StatusCode::SEE_OTHER));
        assert!(!invalidates(
            &Method::POST,
            StatusCode::INTERNAL_SERVER_ERROR
        ));
        assert!(!invalidates(&Method::GET, StatusCode::OK));
        assert!(!invalidates(&Method::OPTIONS, StatusCode::OK));
    }
}
