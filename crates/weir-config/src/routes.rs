//! Validation of a site's `[[site."x".route]]` tables and the handler they
//! make with the site's own: which requests a route takes ([`PathPattern`],
//! its `match` conditions), how its path is rewritten ([`PathRewrite`]),
//! what answers them and through which filters ([`RouteConfig`]).
//!
//! Owns only checking and defaults; never opens a socket nor answers.

use std::sync::Arc;

use serde_spanned::Spanned;

use super::HandlerConfig;
use super::error::Collector;
use super::proxy::proxy_config;
use super::raw::{RawRoute, RawSite};

/// A path pattern of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathPattern {
    /// Every path (a route with no `path`, matching on other conditions).
    Any,
    /// `path_regex`: the groups fill `{1}`.. in the route's templates.
    Regex(PathRegex),
    /// `"/api/"`: paths starting with it.
    Prefix(String),
    /// `"/api/*"`: `/api/...` and `/api` itself; holds `/api/`.
    Dir(String),
    /// Any other pattern with `*` (matching any run of characters).
    Glob(String),
}

impl PathPattern {
    pub fn parse(p: &str) -> Result<PathPattern, String> {
        if !p.starts_with('/') && !p.starts_with('*') {
            return Err(format!("`{p}` must start with `/` (or `*`)"));
        }
        match p.find('*') {
            None => Ok(PathPattern::Prefix(p.to_string())),
            Some(i) if i == p.len() - 1 && p.ends_with("/*") => {
                Ok(PathPattern::Dir(p[..p.len() - 1].to_string()))
            }
            Some(_) => Ok(PathPattern::Glob(p.to_string())),
        }
    }

    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathPattern::Any => true,
            PathPattern::Regex(r) => r.re.is_match(path),
            PathPattern::Prefix(p) => path.starts_with(p.as_str()),
            PathPattern::Dir(d) => {
                path.starts_with(d.as_str())
                    || path == &d[..d.len() - 1] && !d[..d.len() - 1].is_empty()
            }
            PathPattern::Glob(g) => glob_match(g.as_bytes(), path.as_bytes()),
        }
    }

    /// The literal part before the first `*`.
    pub fn literal(&self) -> &str {
        match self {
            PathPattern::Any | PathPattern::Regex(_) => "",
            PathPattern::Prefix(p) | PathPattern::Dir(p) => p,
            PathPattern::Glob(g) => &g[..g.find('*').unwrap_or(g.len())],
        }
    }
}

/// A compiled `path_regex`, compared by its source.
#[derive(Debug, Clone)]
pub struct PathRegex {
    pub src: String,
    pub re: regex_lite::Regex,
}

impl PartialEq for PathRegex {
    fn eq(&self, o: &Self) -> bool {
        self.src == o.src
    }
}
impl Eq for PathRegex {}

/// `*` matches any run of bytes; everything else matches itself.
fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if p < pat.len() && pat[p] == s[i] {
            p += 1;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&b| b == b'*')
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRewrite {
    None,
    /// Replace the pattern's literal prefix with this (`""` strips it).
    Replace(String),
    /// The new path (and query, after a `?`) from placeholders and groups.
    Template(crate::traffic::Template),
}

impl PathRewrite {
    /// The path sent upstream for `path` matched by `pattern`.
    pub fn apply<'a>(&self, pattern: &PathPattern, path: &'a str) -> std::borrow::Cow<'a, str> {
        use std::borrow::Cow;
        let PathRewrite::Replace(with) = self else {
            // A template is filled by the request filters, which see the request.
            return Cow::Borrowed(path);
        };
        let lit = pattern.literal();
        let rest = if let Some(r) = path.strip_prefix(lit) {
            r
        } else if let PathPattern::Dir(d) = pattern
            && path == &d[..d.len() - 1]
        {
            ""
        } else {
            return Cow::Borrowed(path);
        };
        let mut out = String::with_capacity(with.len() + rest.len() + 1);
        out.push_str(with);
        if !out.ends_with('/') && !rest.is_empty() && !rest.starts_with('/') {
            out.push('/');
        }
        out.push_str(rest);
        if !out.starts_with('/') {
            out.insert(0, '/');
        }
        Cow::Owned(out)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub pattern: PathPattern,
    pub rewrite: PathRewrite,
    pub handler: HandlerConfig,
    /// The cache in front of this route's proxy (the site's unless the
    /// route says otherwise).
    pub cache: Option<Arc<crate::cache::CachePolicy>>,
    /// Conditions besides the path.
    pub matcher: crate::traffic::RouteMatch,
    /// Its own limits, access control and header rules (after the site's).
    pub filters: Arc<crate::traffic::Filters>,
    /// The compression of its answers other than static files (the site's
    /// unless the route says otherwise); `None`: off.
    pub compress: Option<Arc<crate::files::CompressOptions>>,
}

/// What a site's routes take from the site unless they say otherwise.
#[derive(Clone, Copy)]
pub struct Inherited<'a> {
    pub cache: Option<&'a Arc<crate::cache::CachePolicy>>,
    pub compress: Option<&'a Arc<crate::files::CompressOptions>>,
}

/// The site's handler once `proxy` and `route` are taken into account;
/// `own` is the handler from `root` (or `None` without one).
pub fn site_handler(
    c: &mut Collector<'_>,
    site: &str,
    s: &RawSite,
    own: Option<HandlerConfig>,
    inherited: Inherited<'_>,
    files: &dyn Fn(&mut Collector<'_>, &Spanned<String>) -> HandlerConfig,
) -> Option<HandlerConfig> {
    let own = match (&s.proxy, own) {
        (Some(p), Some(h)) => {
            c.at(
                p.span(),
                format!(
                    "site \"{site}\": has both `root` and `proxy`; proxy some paths with [[site.\"{site}\".route]] instead"
                ),
            );
            Some(h)
        }
        (Some(p), None) => Some(HandlerConfig::Proxy(Arc::new(proxy_config(
            c,
            &format!("site \"{site}\": proxy"),
            p,
        )))),
        (None, h) => h,
    };
    let Some(routes) = &s.route else {
        return own;
    };
    let routes = routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            route_config(
                c,
                &format!("site \"{site}\": route {}", i + 1),
                r,
                inherited,
                files,
                s.root.as_ref(),
            )
        })
        .collect();
    Some(HandlerConfig::Routes {
        routes,
        fallback: own.map(Box::new),
    })
}

fn route_config(
    c: &mut Collector<'_>,
    key: &str,
    r: &Spanned<RawRoute>,
    site: Inherited<'_>,
    files: &dyn Fn(&mut Collector<'_>, &Spanned<String>) -> HandlerConfig,
    site_root: Option<&Spanned<String>>,
) -> Option<RouteConfig> {
    use crate::traffic;
    let raw = r.get_ref();
    let cache = crate::cache::policy(c, &format!("{key}: cache"), raw.cache.as_ref(), site.cache);
    let compress_key = format!("{key}: compress");
    let compress =
        crate::files::answer_compression(c, &compress_key, raw.compress.as_ref(), site.compress);
    // A route's own `compress` covers its static files too.
    let files_of_route = |c: &mut Collector<'_>, root: &Spanned<String>| {
        let mut h = files(c, root);
        if let (HandlerConfig::Static(o), Some(rc)) = (&mut h, &raw.compress) {
            o.compress = crate::files::compress(c, &compress_key, rc, &o.compress);
        }
        h
    };
    let files: &dyn Fn(&mut Collector<'_>, &Spanned<String>) -> HandlerConfig = &files_of_route;
    let pattern = match (&raw.path, &raw.path_regex) {
        (Some(p), Some(_)) => {
            c.at(
                p.span(),
                format!("{key}: `path` and `path_regex` exclude each other; keep one"),
            );
            return None;
        }
        (Some(p), None) => match PathPattern::parse(p.get_ref()) {
            Ok(p) => p,
            Err(m) => {
                c.at(p.span(), format!("{key}: path: {m}"));
                return None;
            }
        },
        (None, Some(re)) => match regex_lite::Regex::new(re.get_ref()) {
            Ok(compiled) => PathPattern::Regex(PathRegex {
                src: re.get_ref().clone(),
                re: compiled,
            }),
            Err(e) => {
                c.at(re.span(), format!("{key}: path_regex: {e}"));
                return None;
            }
        },
        (None, None) => PathPattern::Any,
    };
    let matcher = match &raw.matches {
        Some(m) => traffic::route_match(c, key, m),
        None => traffic::RouteMatch::default(),
    };
    if pattern == PathPattern::Any && matcher.is_empty() {
        c.at(
            r.span(),
            format!("{key}: matches nothing in particular: add `path = \"/api/*\"`, `path_regex` or `match = {{ ... }}`"),
        );
    }
    let groups = match &pattern {
        PathPattern::Regex(r) => r.re.captures_len() - 1,
        _ => 0,
    };
    let rewrite = match (&raw.rewrite, raw.strip_prefix) {
        (Some(w), Some(true)) => {
            c.at(
                w.span(),
                format!("{key}: `rewrite` and `strip_prefix` exclude each other; keep one"),
            );
            PathRewrite::None
        }
        (Some(w), _)
            if w.get_ref().contains('{')
                || !matches!(
                    pattern,
                    PathPattern::Prefix(_) | PathPattern::Dir(_) | PathPattern::Glob(_)
                ) =>
        {
            match traffic::Template::parse(w.get_ref()) {
                Ok(t) if t.max_capture() > groups => {
                    c.at(
                        w.span(),
                        format!(
                            "{key}: rewrite uses group {{{}}} but the path has {groups}",
                            t.max_capture()
                        ),
                    );
                    PathRewrite::None
                }
                Ok(_) if !w.get_ref().starts_with('/') && !w.get_ref().starts_with('{') => {
                    c.at(
                        w.span(),
                        format!("{key}: rewrite must make a path starting with `/`"),
                    );
                    PathRewrite::None
                }
                Ok(t) => PathRewrite::Template(t),
                Err(m) => {
                    c.at(w.span(), format!("{key}: rewrite: {m}"));
                    PathRewrite::None
                }
            }
        }
        (Some(w), _) => PathRewrite::Replace(w.get_ref().clone()),
        (None, Some(true)) => PathRewrite::Replace(String::new()),
        (None, _) => PathRewrite::None,
    };
    let fcgi = raw.php.is_some() as u8 + raw.fastcgi.is_some() as u8;
    let given = raw.proxy.is_some() as u8
        + (raw.root.is_some() && fcgi == 0) as u8
        + raw.redirect.is_some() as u8
        + raw.respond.is_some() as u8
        + fcgi;
    if given > 1 {
        c.at(
            r.span(),
            format!(
                "{key}: give one of `proxy`, `root`, `php`, `fastcgi`, `redirect` or `respond`"
            ),
        );
        return None;
    }
    let handler = if let Some((f, php)) = raw
        .php
        .as_ref()
        .map(|p| (p, true))
        .or(raw.fastcgi.as_ref().map(|f| (f, false)))
    {
        let make = |c: &mut Collector<'_>, root: &Spanned<String>| match files(c, root) {
            HandlerConfig::Static(o) => o,
            _ => unreachable!("the files closure makes static options"),
        };
        // A route's scripts are under its own root, else the site's.
        let opts = raw.root.as_ref().or(site_root).map(|root| make(c, root));
        let name = if php { "php" } else { "fastcgi" };
        let cfg = crate::fastcgi::fastcgi(c, &format!("{key}: {name}"), f, php, opts, &make)?;
        HandlerConfig::FastCgi(Arc::new(cfg))
    } else if let Some(p) = &raw.proxy {
        HandlerConfig::Proxy(Arc::new(proxy_config(c, &format!("{key}: proxy"), p)))
    } else if let Some(root) = &raw.root {
        let mut h = files(c, root);
        if let (HandlerConfig::Static(o), Some(t)) = (&mut h, &raw.try_files) {
            o.try_files = crate::try_files(c, key, t);
        }
        h
    } else if let Some(rd) = &raw.redirect {
        let rd = traffic::redirect(c, key, rd)?;
        if rd.to.max_capture() > groups {
            c.at(
                r.span(),
                format!(
                    "{key}: redirect uses group {{{}}} but the path has {groups}",
                    rd.to.max_capture()
                ),
            );
        }
        HandlerConfig::Redirect(rd)
    } else if let Some(rs) = &raw.respond {
        HandlerConfig::Respond(traffic::respond(c, key, rs)?)
    } else {
        c.at(
            r.span(),
            format!("{key}: has nothing to do: add `proxy = {{ to = [\"127.0.0.1:9000\"] }}`, `root`, `redirect` or `respond`"),
        );
        return None;
    };
    if let Some(rc) = &raw.cache
        && matches!(rc.get_ref(), crate::raw::RawCacheSwitch::On(_))
        && !matches!(handler, HandlerConfig::Proxy(_))
    {
        c.at(
            rc.span(),
            format!("{key}: `cache` keeps responses of a proxy; this route has none"),
        );
    }
    if let Some(t) = &raw.try_files
        && !matches!(handler, HandlerConfig::Static(_))
    {
        c.at(
            t.span(),
            format!("{key}: `try_files` looks for files; this route has no `root`"),
        );
    }
    let filters = traffic::filters(c, key, raw.filter_keys());
    Some(RouteConfig {
        pattern,
        rewrite,
        handler,
        cache,
        matcher,
        filters: Arc::new(filters),
        compress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        let d = PathPattern::parse("/api/*").unwrap();
        assert!(d.matches("/api/users"));
        assert!(d.matches("/api"));
        assert!(!d.matches("/apix"));
        let p = PathPattern::parse("/static/").unwrap();
        assert!(p.matches("/static/a.css"));
        assert!(!p.matches("/static"));
        let g = PathPattern::parse("/*.php").unwrap();
        assert!(g.matches("/index.php"));
        assert!(g.matches("/a/b.php"));
        assert!(!g.matches("/a/b.phpx"));
    }

    #[test]
    fn rewrites_and_strips() {
        let d = PathPattern::parse("/api/*").unwrap();
        let strip = PathRewrite::Replace(String::new());
        assert_eq!(strip.apply(&d, "/api/users"), "/users");
        assert_eq!(strip.apply(&d, "/api"), "/");
        let v2 = PathRewrite::Replace("/v2/".into());
        assert_eq!(v2.apply(&d, "/api/users"), "/v2/users");
        assert_eq!(PathRewrite::None.apply(&d, "/api/x"), "/api/x");
    }
}
