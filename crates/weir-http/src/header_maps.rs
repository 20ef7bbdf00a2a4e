//! A per-thread stock of emptied `HeaderMap`s, so the HTTP/1.1 request and
//! response heads weir parses by hand (`server::http1`, `proxy::h1_client`)
//! reuse the tables of earlier ones instead of allocating two new blocks
//! per map and freeing them again.
//!
//! Why by hand: `http`'s `HeaderMap` has no pool of its own, and a proxied
//! request builds two maps (the client's request, the upstream's response).
//! Creating and dropping them is a visible share of a proxied request's
//! work. A map comes back through [`give`] where its message ends
//! (`pipeline::Listener::handle` for requests, `http1` once a response
//! head is written); a map that never comes back is simply dropped, as
//! before. The stock is per thread (no lock) and bounded in count and in
//! the size of what it keeps, so one request with hundreds of fields does
//! not pin a large table.

use std::cell::RefCell;

use http::HeaderMap;

/// Maps kept per thread. A request gives back what it took (its own map
/// and its response's), so the stock only has to cover a burst of requests
/// read before the first of them is answered; beyond it a map is allocated,
/// as without the stock.
const STOCK: usize = 16;
/// Larger tables are dropped rather than kept: at most 16 maps of 32 fields
/// (about 4 KiB each) stay with a thread.
const MAX_KEPT_CAPACITY: usize = 32;

thread_local! {
    static MAPS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty map with room for `fields` entries, from the stock if it has one.
pub fn take(fields: usize) -> HeaderMap {
    let reused = MAPS.try_with(|m| m.borrow_mut().pop()).ok().flatten();
    match reused {
        Some(mut map) => {
            map.reserve(fields);
            map
        }
        None => HeaderMap::with_capacity(fields),
    }
}

/// Empties `map` and keeps it for a later [`take`] (or drops it when the
/// stock is full or the map is large).
pub fn give(mut map: HeaderMap) {
    // `HeaderMap::new()` (what `mem::take` leaves behind) owns no memory:
    // nothing worth keeping.
    if map.capacity() == 0 || map.capacity() > MAX_KEPT_CAPACITY {
        return;
    }
    map.clear();
    let _ = MAPS.try_with(|m| {
        let mut m = m.borrow_mut();
        if m.len() < STOCK {
            m.push(map);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http::header::{CONTENT_LENGTH, HOST};

    fn stock() -> usize {
        MAPS.with(|m| m.borrow().len())
    }

    #[test]
    fn a_given_map_comes_back_empty_with_its_table() {
        std::thread::spawn(|| {
            let mut m = take(4);
            m.insert(HOST, HeaderValue::from_static("example.com"));
            m.append(CONTENT_LENGTH, HeaderValue::from_static("5"));
            let cap = m.capacity();
            give(m);
            assert_eq!(stock(), 1);

            let again = take(2);
            assert_eq!(stock(), 0);
            assert!(again.is_empty(), "a reused map must hold no field");
            assert_eq!(again.get(HOST), None);
            assert_eq!(again.capacity(), cap, "the same table, not a new one");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn take_makes_room_for_what_is_asked() {
        std::thread::spawn(|| {
            give(HeaderMap::with_capacity(1));
            let m = take(40);
            assert!(m.capacity() >= 40);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_stock_is_bounded_in_count_and_size() {
        std::thread::spawn(|| {
            for _ in 0..STOCK + 10 {
                give(HeaderMap::with_capacity(8));
            }
            assert_eq!(stock(), STOCK);
            MAPS.with(|m| m.borrow_mut().clear());

            give(HeaderMap::with_capacity(MAX_KEPT_CAPACITY * 4));
            give(HeaderMap::new());
            assert_eq!(stock(), 0, "large and unallocated maps are not kept");
        })
        .join()
        .unwrap();
    }
}
