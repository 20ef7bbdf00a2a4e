//! The current second in the forms responses and logs write: the `Date`
//! field (IMF-fixdate, RFC 9110 §5.6.7), the combined log format's time and
//! ISO 8601 (RFC 3339, UTC). Each is formatted once a second per thread,
//! not per response or line.
//!
//! Each thread keeps its own copy (a `RefCell`, no lock): every response
//! reads it, and a shared one would be contended by every worker. The
//! second comes from the coarse clock ([`clock::unix_secs`]), so it turns
//! at most one kernel tick late.

use std::cell::RefCell;

use crate::clock;

/// `Sun, 06 Nov 1994 08:49:37 GMT`.
const HTTP_LEN: usize = 29;
/// `06/Nov/1994:08:49:37 +0000`.
const CLF_LEN: usize = 26;
/// `1994-11-06T08:49:37Z`.
const ISO_LEN: usize = 20;

struct Cached {
    second: u64,
    http: [u8; HTTP_LEN],
    clf: [u8; CLF_LEN],
    iso: [u8; ISO_LEN],
}

thread_local! {
    static NOW: RefCell<Cached> = const {
        RefCell::new(Cached {
            second: u64::MAX,
            http: [0; HTTP_LEN],
            clf: [0; CLF_LEN],
            iso: [0; ISO_LEN],
        })
    };
}

impl Cached {
    fn set(&mut self, second: u64) {
        let s = httpdate::fmt_http_date(clock::system_time(second));
        let b = s.as_bytes();
        // IMF-fixdate is fixed-width for the years httpdate formats.
        if b.len() != HTTP_LEN {
            return;
        }
        self.http.copy_from_slice(b);
        // "Sun, 06 Nov 1994 08:49:37 GMT": day, month, year and time
        // rearranged as "06/Nov/1994:08:49:37 +0000".
        let clf = &mut self.clf;
        clf[0..2].copy_from_slice(&b[5..7]);
        clf[2] = b'/';
        clf[3..6].copy_from_slice(&b[8..11]);
        clf[6] = b'/';
        clf[7..11].copy_from_slice(&b[12..16]);
        clf[11] = b':';
        clf[12..20].copy_from_slice(&b[17..25]);
        clf[20..].copy_from_slice(b" +0000");
        self.iso = iso8601(second);
        self.second = second;
    }
}

fn with<R>(f: impl FnOnce(&Cached) -> R) -> R {
    let second = clock::unix_secs();
    NOW.with_borrow_mut(|c| {
        if c.second != second {
            c.set(second);
        }
        f(c)
    })
}

fn text(b: &[u8]) -> &str {
    // Only ASCII is ever stored.
    std::str::from_utf8(b).unwrap_or_default()
}

/// `unix_secs` as `1994-11-06T08:49:37Z` (the civil date from the day
/// count, as in Howard Hinnant's `civil_from_days`).
pub fn iso8601(unix_secs: u64) -> [u8; ISO_LEN] {
    let days = (unix_secs / 86_400) as i64;
    let sod = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut out = *b"0000-00-00T00:00:00Z";
    let mut two = |at: usize, v: u64| {
        out[at] = b'0' + (v / 10 % 10) as u8;
        out[at + 1] = b'0' + (v % 10) as u8;
    };
    two(0, (y / 100) as u64);
    two(2, (y % 100) as u64);
    two(5, m as u64);
    two(8, d as u64);
    two(11, sod / 3600);
    two(14, sod / 60 % 60);
    two(17, sod % 60);
    out
}

/// Appends the `Date` field's value for now.
pub fn extend(dst: &mut Vec<u8>) {
    with(|c| dst.extend_from_slice(&c.http));
}

/// Appends now as the `Date` field writes it (the JSON access log's time).
pub fn push_http(out: &mut String) {
    with(|c| out.push_str(text(&c.http)));
}

/// Appends now as the combined log format writes it, in UTC.
pub fn push_clf(out: &mut String) {
    with(|c| out.push_str(text(&c.clf)));
}

/// Appends now as the combined log format writes it, in UTC.
pub fn extend_clf(dst: &mut Vec<u8>) {
    with(|c| dst.extend_from_slice(&c.clf));
}

/// Appends now in ISO 8601, UTC (`1994-11-06T08:49:37Z`).
pub fn extend_iso8601(dst: &mut Vec<u8>) {
    with(|c| dst.extend_from_slice(&c.iso));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_of_one_second() {
        let mut c = Cached {
            second: u64::MAX,
            http: [0; HTTP_LEN],
            clf: [0; CLF_LEN],
            iso: [0; ISO_LEN],
        };
        c.set(784_111_777);
        assert_eq!(text(&c.iso), "1994-11-06T08:49:37Z");
        assert_eq!(text(&iso8601(0)), "1970-01-01T00:00:00Z");
        assert_eq!(text(&iso8601(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(text(&iso8601(1_795_802_701)), "2026-11-27T18:05:01Z");
        assert_eq!(text(&c.http), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(text(&c.clf), "06/Nov/1994:08:49:37 +0000");
        assert_eq!(c.second, 784_111_777);
    }

    #[test]
    fn now_is_the_clocks_second() {
        // Read within one second of the clock, so all three forms agree.
        let (second, v, http, clf) = loop {
            let second = clock::unix_secs();
            let mut v = Vec::new();
            extend(&mut v);
            let (mut http, mut clf) = (String::new(), String::new());
            push_http(&mut http);
            push_clf(&mut clf);
            if clock::unix_secs() == second {
                break (second, v, http, clf);
            }
        };
        let want = httpdate::fmt_http_date(clock::system_time(second));
        assert_eq!(v, want.as_bytes());
        assert_eq!(http, want);
        assert_eq!(&clf[..2], &want[5..7]);
        assert!(clf.ends_with(&format!("{} +0000", &want[17..25])), "{clf}");
    }
}
