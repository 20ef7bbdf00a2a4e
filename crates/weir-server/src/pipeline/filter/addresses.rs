//! `allow` and `deny`: a client address a layer denies, or that its allow
//! list does not hold, is answered 403.

use std::net::IpAddr;
use std::sync::Arc;

use http::{Response, StatusCode};
use ipnet::IpNet;

use weir_config::traffic;
use weir_http::body::Body;
use weir_http::response::error;

use super::{Checking, Layer, RequestFilter};

pub(in crate::pipeline) struct Addresses(Arc<traffic::Filters>);

impl Addresses {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        let c = layer.cfg;
        (!c.allow.is_empty() || !c.deny.is_empty()).then(|| Addresses(c.clone()))
    }
}

impl RequestFilter for Addresses {
    fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        let c = &self.0;
        let ip = req.client;
        if listed(&c.deny, ip) || (!c.allow.is_empty() && !listed(&c.allow, ip)) {
            return Err(error(StatusCode::FORBIDDEN));
        }
        Ok(0)
    }
}

fn listed(list: &[IpNet], ip: IpAddr) -> bool {
    // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    list.iter().any(|n| n.contains(&ip))
}
