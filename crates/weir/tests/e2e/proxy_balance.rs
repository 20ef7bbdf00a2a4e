//! One end-to-end test per balancing family, through the real binary.

use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::proxy::{Upstream, Weir, client};

use crate::WEIR;

async fn three() -> [Upstream; 3] {
    [
        Upstream::start("a").await,
        Upstream::start("b").await,
        Upstream::start("c").await,
    ]
}

fn list(ups: &[Upstream]) -> String {
    let v: Vec<String> = ups.iter().map(|u| format!("\"{}\"", u.addr)).collect();
    format!("[{}]", v.join(", "))
}

fn weir(ups: &[Upstream], extra: &str) -> Weir {
    Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = {}{extra} }}\n",
            list(ups)
        ),
    )
}

async fn get(
    w: &Weir,
    path: &str,
    headers: &[(&str, &str)],
) -> (String, reqwest::header::HeaderMap) {
    let mut r = client().get(w.url(path));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    (r.text().await.unwrap(), h)
}

#[tokio::test]
async fn smooth_weighted_round_robin() {
    let (a, b) = (Upstream::start("a").await, Upstream::start("b").await);
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [{{ addr = \"{}\", weight = 3 }}, \"{}\"] }}\n",
            a.addr, b.addr
        ),
    );
    let mut got = String::new();
    for _ in 0..8 {
        got.push_str(&get(&w, "/", &[]).await.0);
    }
    assert_eq!(got, "aabaaaba");
}

#[tokio::test]
async fn least_conn_avoids_the_busy_upstream() {
    let ups = three().await;
    let w = weir(&ups, ", balance = \"least_conn\"");
    let c = client();
    let slow = c.get(w.url("/slow/600")).send();
    let quick = async {
        // Only once the slow request is in flight (its upstream sleeps 600 ms).
        let slow_upstream = async || {
            let slow = |u: &Upstream| u.seen().iter().any(|s| s.uri == "/slow/600");
            ups.iter().any(slow)
        };
        assert!(
            poll_until_async(PATIENCE, slow_upstream).await,
            "the slow request never reached an upstream"
        );
        for _ in 0..6 {
            get(&w, "/", &[]).await;
        }
    };
    let (r, _) = tokio::join!(slow, quick);
    let busy = r.unwrap().text().await.unwrap();
    let busy = ups.iter().find(|u| u.name == busy).unwrap();
    assert_eq!(busy.count(), 1, "the busy upstream got more requests");
}

#[tokio::test]
async fn random_and_p2c_use_every_upstream() {
    for mode in ["random", "p2c"] {
        let ups = three().await;
        let w = weir(&ups, &format!(", balance = \"{mode}\""));
        for _ in 0..60 {
            get(&w, "/", &[]).await;
        }
        for u in &ups {
            assert!(u.count() >= 5, "{mode}: {} got {}", u.name, u.count());
        }
    }
}

#[tokio::test]
async fn first_available_fills_the_first() {
    let ups = three().await;
    let w = weir(&ups, ", balance = \"first\"");
    for _ in 0..5 {
        assert_eq!(get(&w, "/", &[]).await.0, "a");
    }
}

#[tokio::test]
async fn hashing_pins_keys_and_spreads_them() {
    let ups = three().await;
    let w = weir(&ups, ", balance = \"hash\", hash_key = \"header:X-User\"");
    let mut owners = std::collections::HashSet::new();
    for user in 0..30 {
        let u = user.to_string();
        let first = get(&w, "/", &[("x-user", &u)]).await.0;
        for _ in 0..3 {
            assert_eq!(get(&w, "/other", &[("x-user", &u)]).await.0, first);
        }
        owners.insert(first);
    }
    assert_eq!(owners.len(), 3);

    let ups = three().await;
    let w = weir(&ups, ", balance = \"hash\", hash_key = \"uri\"");
    let first = get(&w, "/page/7", &[]).await.0;
    for _ in 0..5 {
        assert_eq!(get(&w, "/page/7", &[]).await.0, first);
    }

    let ups = three().await;
    let w = weir(&ups, ", balance = \"ip_hash\"");
    let first = get(&w, "/", &[]).await.0;
    for _ in 0..5 {
        assert_eq!(get(&w, "/", &[]).await.0, first);
    }
}

#[tokio::test]
async fn sticky_cookie_pins_a_session() {
    let ups = three().await;
    let w = weir(&ups, ", sticky_cookie = \"weir_up\"");
    let (first, h) = get(&w, "/", &[]).await;
    let set = h["set-cookie"].to_str().unwrap().to_string();
    assert!(set.starts_with("weir_up="), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    for _ in 0..6 {
        let (who, h) = get(&w, "/", &[("cookie", &format!("a=1; {cookie}"))]).await;
        assert_eq!(who, first);
        assert!(h.get("set-cookie").is_none());
    }
}
