//! The current second in the two forms responses and logs write: the `Date`
//! field (IMF-fixdate, RFC 9110 §5.6.7) and the combined log format's time.
//! Both are formatted once a second per thread, not per response or line.
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

struct Cached {
    second: u64,
    http: [u8; HTTP_LEN],
    clf: [u8; CLF_LEN],
}

thread_local! {
    static NOW: RefCell<Cached> = const {
        RefCell::new(Cached { second: u64::MAX, http: [0; HTTP_LEN], clf: [0; CLF_LEN] })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_of_one_second() {
        let mut c = Cached {
            second: u64::MAX,
            http: [0; HTTP_LEN],
            clf: [0; CLF_LEN],
        };
        c.set(784_111_777);
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
