//! The request-filter phase, between the route and the handler: the
//! filters of the site, then of the route, each of which may answer
//! instead of the handler (address lists, limits, authentication, the body
//! limit), then their request header rules.
//!
//! A request filter is a type implementing [`RequestFilter`] in a module of
//! its own under `filter/`, and one line in [`request_filters!`]'s table
//! below, which builds it from a layer's config when that config asks for
//! it. A layer's filters are built once at config load ([`Filters::build`]),
//! and each route's and site's list once from its layers ([`chain`]); a
//! site or route without filters has an empty list, so the static path
//! pays one branch. Dispatch is static (an enum the table generates).
//!
//! Answers only to refuse; never serves content.

// A refusal is the answer itself, returned once and straight to the
// client; boxing it would only add an allocation on that path.
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use http::Response;

use weir_config::traffic;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_traffic::limit::{Held, Limiter};

use crate::access_log::Outcome;

mod addresses;
mod basic_auth;
mod body_limit;
mod forward_auth;
mod limits;
mod request_headers;

pub(super) use limits::LimitFields;
pub(super) use request_headers::apply;

/// One request filter: a step every request of the routes and sites it is
/// registered for passes before the handler.
pub(super) trait RequestFilter: Send + Sync {
    /// Whether it rewrites the request instead of checking it: rewrites
    /// run after the checks of every layer.
    const REWRITES: bool = false;

    /// Passes the request, with the delay (ms) it must wait before the
    /// handler (0: none), or refuses it with the answer.
    fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>>;

    /// Whether it waits on something but a delay ([`RequestFilter::wait`]):
    /// a list with such a filter runs as a boxed future; the others run
    /// without one.
    fn waits(&self) -> bool {
        false
    }

    /// What it waits on (after [`RequestFilter::check`]), if it
    /// [`waits`](RequestFilter::waits).
    fn wait(
        &self,
        _req: &mut Checking<'_>,
    ) -> impl Future<Output = Result<(), Response<Body>>> + Send {
        std::future::ready(Ok(()))
    }
}

/// A request as a request filter sees it.
pub(super) struct Checking<'a> {
    pub parts: &'a mut http::request::Parts,
    pub conn: &'a ConnInfo,
    /// The client's address (after trusted proxies).
    pub client: IpAddr,
    /// A route's `path_regex` groups.
    pub captures: &'a [String],
    /// What the answer owes the filters that passed it.
    pub passed: &'a mut Passed,
    /// What the limits and authentication did, for the access log.
    pub outcome: &'a mut Outcome,
}

/// What one layer's filters are built from.
pub(super) struct Layer<'a> {
    pub cfg: &'a Arc<traffic::Filters>,
    /// `site "x"` or `site "x" route /p`, for log lines.
    pub label: &'a str,
    /// [`SITE`] or [`ROUTE`]: where it keeps what the answer owes it.
    pub index: usize,
    pub workers: usize,
    /// Its limits, shared with their response filter ([`LimitFields`]).
    pub limiters: &'a Arc<[Arc<Limiter>]>,
}

/// The registration table: `Variant(module::Type) => how a layer's config
/// makes one (None: it asks for none),` one line per filter, in the order
/// they run within a layer. Generates [`Step`], its dispatch, and the
/// function that builds a layer's steps.
macro_rules! request_filters {
    (
        fn $build:ident($layer:ident);
        $( $(#[$doc:meta])* $variant:ident($ty:ty) => $make:expr, )*
    ) => {
        /// A registered request filter, shared by the lists of its layer's
        /// site and routes.
        #[derive(Clone)]
        pub(super) enum Step {
            $( $(#[$doc])* $variant(Arc<$ty>), )*
        }

        impl Step {
            fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
                match self {
                    $( Step::$variant(f) => f.check(req), )*
                }
            }

            fn waits(&self) -> bool {
                match self {
                    $( Step::$variant(f) => f.waits(), )*
                }
            }

            async fn wait(&self, req: &mut Checking<'_>) -> Result<(), Response<Body>> {
                match self {
                    $( Step::$variant(f) => f.wait(req).await, )*
                }
            }
        }

        /// The checks and the rewrites `layer` asks for, in table order.
        fn $build($layer: &Layer<'_>) -> (Vec<Step>, Vec<Step>) {
            let (mut checks, mut rewrites) = (Vec::new(), Vec::new());
            $(
                if let Some(f) = $make {
                    let list = if <$ty as RequestFilter>::REWRITES {
                        &mut rewrites
                    } else {
                        &mut checks
                    };
                    list.push(Step::$variant(Arc::new(f)));
                }
            )*
            (checks, rewrites)
        }
    };
}

request_filters! {
    fn steps(layer);
    /// `allow` and `deny` (403).
    Addresses(addresses::Addresses) => addresses::Addresses::build(layer),
    /// `limit`s (429 with `Retry-After`, or a delay).
    Limits(limits::Limits) => limits::Limits::build(layer),
    /// `basic_auth` (401).
    BasicAuth(basic_auth::BasicAuth) => basic_auth::BasicAuth::build(layer),
    /// `forward_auth` (the auth service's own answer).
    ForwardAuth(forward_auth::ForwardAuth) => forward_auth::ForwardAuth::build(layer),
    /// `max_body` (413 for a declared length past it).
    BodyLimit(body_limit::BodyLimit) => body_limit::BodyLimit::build(layer),
    /// `request_headers` rules.
    RequestHeaders(request_headers::RequestHeaders) =>
        request_headers::RequestHeaders::build(layer),
}

/// The filters of one site or route (a layer), built once.
pub(super) struct Filters {
    pub cfg: Arc<traffic::Filters>,
    pub limiters: Arc<[Arc<Limiter>]>,
    checks: Vec<Step>,
    rewrites: Vec<Step>,
}

/// What a request that passed owes its answer: for the site's filters
/// (`[SITE]`) and the route's (`[ROUTE]`).
#[derive(Default)]
pub(super) struct Passed {
    /// Connection-limit slots, released when the answer is done.
    pub held: Vec<Held>,
    pub owed: [limits::Owed; 2],
}

/// Where a layer's filters keep what they owe in [`Passed::owed`].
pub(super) const SITE: usize = 0;
pub(super) const ROUTE: usize = 1;

impl Filters {
    /// The filters of the layer `cfg` at `index` ([`SITE`] or [`ROUTE`]);
    /// `None` for an empty config: nothing to run.
    pub fn build(
        cfg: &Arc<traffic::Filters>,
        label: String,
        index: usize,
        workers: usize,
    ) -> Option<Filters> {
        if cfg.is_empty() {
            return None;
        }
        let limiters: Arc<[Arc<Limiter>]> = cfg
            .limits
            .iter()
            .map(|l| weir_traffic::shared::limiter(l.clone(), &label))
            .collect();
        let (checks, rewrites) = steps(&Layer {
            cfg,
            label: &label,
            index,
            workers,
            limiters: &limiters,
        });
        Some(Filters {
            cfg: cfg.clone(),
            limiters,
            checks,
            rewrites,
        })
    }
}

/// The request filters a route's (or a site's own handler's) requests
/// pass, in order: the site's checks, the route's, then their rewrites.
#[derive(Default)]
pub(super) struct RequestFilters {
    steps: Box<[Step]>,
    /// Whether a step waits on something but a delay.
    waits: bool,
    /// The smallest `max_body` of the layers.
    max_body: Option<u64>,
}

/// The registration of a route's (`route`) or a site's own handler's
/// (`None`) request filters under those of its site: built once at
/// config load.
pub(super) fn chain(site: Option<&Filters>, route: Option<&Filters>) -> RequestFilters {
    let layers = [site, route];
    let steps: Box<[Step]> = layers
        .iter()
        .flatten()
        .flat_map(|f| f.checks.iter())
        .chain(layers.iter().flatten().flat_map(|f| f.rewrites.iter()))
        .cloned()
        .collect();
    RequestFilters {
        waits: steps.iter().any(Step::waits),
        max_body: layers.iter().flatten().filter_map(|f| f.cfg.max_body).min(),
        steps,
    }
}

impl RequestFilters {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether a filter can wait on something but a delay (a password
    /// check, the auth service): then [`RequestFilters::run`], boxed.
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// The smallest body limit of its layers, if any has one.
    pub fn max_body(&self) -> Option<u64> {
        self.max_body
    }

    /// Runs every filter in turn, each delay waited where it is asked for:
    /// `Ok` with what the answer owes, or the answer that refuses the
    /// request.
    pub async fn run(
        &self,
        parts: &mut http::request::Parts,
        conn: &ConnInfo,
        client: IpAddr,
        captures: &[String],
        outcome: &mut Outcome,
    ) -> Result<Option<Box<Passed>>, Response<Body>> {
        let mut passed = Passed::default();
        let mut req = Checking {
            parts,
            conn,
            client,
            captures,
            passed: &mut passed,
            outcome,
        };
        for s in &self.steps {
            let delay = s.check(&mut req)?;
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            if s.waits() {
                s.wait(&mut req).await?;
            }
        }
        Ok(passed.boxed())
    }

    /// [`RequestFilters::run`] for a list that never waits on anything but
    /// a delay: no future to box; the delay to wait is returned (the
    /// largest any filter asks for).
    pub fn run_now(
        &self,
        parts: &mut http::request::Parts,
        conn: &ConnInfo,
        client: IpAddr,
        captures: &[String],
        outcome: &mut Outcome,
    ) -> Result<(Option<Box<Passed>>, u64), Response<Body>> {
        let mut passed = Passed::default();
        let mut req = Checking {
            parts,
            conn,
            client,
            captures,
            passed: &mut passed,
            outcome,
        };
        let mut delay = 0;
        for s in &self.steps {
            delay = delay.max(s.check(&mut req)?);
        }
        Ok((passed.boxed(), delay))
    }
}

impl Passed {
    /// Boxed when something is owed (no allocation otherwise).
    fn boxed(self) -> Option<Box<Passed>> {
        let empty = self.held.is_empty() && self.owed.iter().all(limits::Owed::is_empty);
        (!empty).then(|| Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::super::tests::test_store;
    use super::super::{Registry, build_sites, handler::SiteHandler};
    use super::Outcome;

    fn conn() -> weir_http::conn::ConnInfo {
        weir_http::conn::ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
            tls_info: None,
            worker: Default::default(),
        }
    }

    fn parts(declared: Option<u64>) -> http::request::Parts {
        let mut b = http::Request::get("/api/x").header("host", "a");
        if let Some(n) = declared {
            b = b.header("content-length", n);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// The registration table builds each list once: a site without
    /// filters gets an empty one; a route's runs the site's checks, the
    /// route's, then the site's and the route's header rules (the route's
    /// last, so they win); the body limit is the smallest; only a list
    /// with forward authentication waits.
    #[test]
    fn request_filters_are_registered_once_per_route_and_site() {
        let cfg = weir_config::load_str(
            "t.toml",
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nroot = \".\"\n\
             [site.\"b\"]\nlisten = [\"127.0.0.1:1\"]\ndeny = [\"10.0.0.0/8\"]\nmax_body = \"100\"\n\
             request_headers = { set = { X-Who = \"site\", X-Site = \"1\" } }\n\
             [[site.\"b\".route]]\npath = \"/api/\"\nrespond = { status = 200 }\nmax_body = \"10\"\n\
             request_headers = { set = { X-Who = \"route\" } }\n\
             [[site.\"b\".route]]\npath = \"/auth/\"\nrespond = { status = 200 }\n\
             forward_auth = { url = \"http://127.0.0.1:9/x\" }\n",
            std::path::Path::new("."),
        )
        .unwrap();
        let sites = build_sites(&cfg, &[], &Registry::new(1), &test_store()).unwrap();
        assert!(sites[0].request.is_empty());
        let site = &sites[1];
        assert!(!site.request.is_empty() && !site.request.waits());
        assert_eq!(site.request.max_body(), Some(100));
        let SiteHandler::Routes { routes, .. } = &site.handler else {
            panic!("not a routed site");
        };
        let (api, auth) = (&routes[0].request, &routes[1].request);
        assert_eq!(api.max_body(), Some(10));
        assert!(!api.waits() && auth.waits());

        let conn = conn();
        let mut p = parts(None);
        let Ok((passed, delay)) = api.run_now(
            &mut p,
            &conn,
            [127, 0, 0, 1].into(),
            &[],
            &mut Outcome::default(),
        ) else {
            panic!("a request the route's filters pass was refused");
        };
        assert!(passed.is_none() && delay == 0);
        assert_eq!(p.headers["x-who"], "route");
        assert_eq!(p.headers["x-site"], "1");

        let refused = |client: [u8; 4], declared| {
            api.run_now(
                &mut parts(declared),
                &conn,
                client.into(),
                &[],
                &mut Outcome::default(),
            )
            .err()
            .map(|r| r.status())
        };
        assert_eq!(refused([10, 1, 2, 3], None), Some(StatusCode::FORBIDDEN));
        assert_eq!(
            refused([127, 0, 0, 1], Some(11)),
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert_eq!(refused([127, 0, 0, 1], Some(10)), None);
        // The site's three steps (address lists, body limit, header rules)
        // are in each route's list too, around the route's own.
        assert_eq!(site.request.steps.len(), 3);
        assert_eq!(api.steps.len(), 5);
    }
}
