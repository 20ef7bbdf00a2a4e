//! Validation of `app = …` on a site: an application whose processes weir
//! runs and proxies to (what Tako does), turned into an [`AppConfig`].
//!
//! Owns only checking and defaults; never starts a process, reads the env
//! file (its permissions are checked when the app starts) nor opens a
//! socket.

use std::path::PathBuf;
use std::time::Duration;

use serde_spanned::Spanned;

use crate::HandlerConfig;
use crate::error::Collector;
use crate::raw::{RawApp, RawSite, Shorthand};
use crate::units;

/// A validated `app`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppConfig {
    /// The site's name, for logs, metrics and `weir app restart NAME`.
    pub name: String,
    /// The command line, run by `sh -c "exec …"` with `PORT` and `HOST`
    /// (or `SOCKET`) in its environment.
    pub run: String,
    pub instances: usize,
    /// Working directory; default: the config file's.
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    /// `KEY=value` lines added to `env`; must not be readable by others.
    pub env_file: Option<PathBuf>,
    /// The readiness (and health) check: a GET of this path answering 2xx/3xx.
    pub ready: String,
    pub start_timeout: Duration,
    /// SIGTERM, then SIGKILL after this.
    pub stop_timeout: Duration,
    /// Instances stop after this long with no request; the next request
    /// starts one. `None`: always running.
    pub idle: Option<Duration>,
    /// Reach instances by a Unix socket (`SOCKET`) instead of a port.
    pub socket: bool,
    /// Requests that may wait for an instance to start (scale to zero); over: 503.
    pub queue: usize,
    /// Besides the settings and the env file, what a reload compares to
    /// decide on a rolling restart: `watch`, else `dir` when it is given
    /// (not the config's directory, which holds weir's own files).
    pub watch: Vec<PathBuf>,
}

/// A site's `app`, which is then the site's handler and excludes the
/// others (`root`, `proxy`, `php`, `fastcgi`); without `app`, `own` stands.
pub(crate) fn site_app(
    c: &mut Collector<'_>,
    base: &std::path::Path,
    name: &str,
    s: &RawSite,
    own: Option<HandlerConfig>,
) -> Option<HandlerConfig> {
    let Some(a) = &s.app else {
        return own;
    };
    for (k, set) in [
        ("root", s.root.is_some()),
        ("proxy", s.proxy.is_some()),
        ("php", s.php.is_some()),
        ("fastcgi", s.fastcgi.is_some()),
    ] {
        if set {
            c.at(
                a.span(),
                format!("site \"{name}\": `app` is the site's handler; remove `{k}` (use a route for some paths)"),
            );
        }
    }
    app(c, name, a, base).map(|cfg| HandlerConfig::App(std::sync::Arc::new(cfg)))
}

fn app(
    c: &mut Collector<'_>,
    site: &str,
    raw: &Spanned<Shorthand<RawApp>>,
    base: &std::path::Path,
) -> Option<AppConfig> {
    let key = format!("site \"{site}\": app");
    let default = RawApp::default();
    let (r, run) = match raw.get_ref() {
        Shorthand::To(s) => (&default, s.clone()),
        Shorthand::Full(r) => match &r.run {
            Some(run) => (&**r, run.clone()),
            None => {
                c.at(
                    raw.span(),
                    format!("{key}: needs `run = \"node server.js\"`"),
                );
                return None;
            }
        },
    };
    if run.trim().is_empty() {
        c.at(raw.span(), format!("{key}.run: empty command"));
        return None;
    }
    let instances = match r.instances {
        None => 1,
        Some(n) if (1..=64).contains(&n) => n as usize,
        Some(n) => {
            c.at(
                raw.span(),
                format!("{key}.instances: {n} is out of range (1 to 64)"),
            );
            1
        }
    };
    let dur =
        |c: &mut Collector<'_>, name: &str, v: &Option<crate::raw::Value>, d: Duration| match v {
            None => d,
            Some(v) => match units::parse_duration(v) {
                Ok(x) if !x.is_zero() => x,
                Ok(_) => {
                    c.at(raw.span(), format!("{key}.{name}: must be more than zero"));
                    d
                }
                Err(m) => {
                    c.at(raw.span(), format!("{key}.{name}: {m}"));
                    d
                }
            },
        };
    let start_timeout = dur(
        c,
        "start_timeout",
        &r.start_timeout,
        Duration::from_secs(30),
    );
    let stop_timeout = dur(c, "stop_timeout", &r.stop_timeout, Duration::from_secs(10));
    let idle = r
        .idle
        .as_ref()
        .map(|_| dur(c, "idle", &r.idle, Duration::from_secs(900)));
    let ready = r.ready.clone().unwrap_or_else(|| "/".into());
    if !ready.starts_with('/') {
        c.at(
            raw.span(),
            format!("{key}.ready: `{ready}` must start with `/`"),
        );
    }
    let mut env = Vec::new();
    for (k, v) in r.env.iter().flatten() {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            c.at(
                raw.span(),
                format!("{key}.env: `{k}` is not a variable name"),
            );
        } else {
            env.push((k.clone(), v.clone()));
        }
    }
    let dir = r
        .dir
        .as_ref()
        .map_or_else(|| base.to_path_buf(), |d| base.join(d));
    Some(AppConfig {
        name: site.to_string(),
        run,
        instances,
        watch: match (&r.watch, &r.dir) {
            (Some(w), _) => w.iter().map(|p| dir.join(p)).collect(),
            (None, Some(_)) => vec![dir.clone()],
            (None, None) => Vec::new(),
        },
        dir,
        env,
        env_file: r.env_file.as_ref().map(|f| base.join(f)),
        ready,
        start_timeout,
        stop_timeout,
        idle,
        socket: r.socket.unwrap_or(false),
        queue: r.queue.map_or(1024, |q| q.clamp(0, 1_000_000) as usize),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::HandlerConfig;

    fn app(toml: &str) -> Result<crate::app::AppConfig, String> {
        let cfg = crate::load_str("weir.toml", toml, std::path::Path::new("/srv/conf"))
            .map_err(|e| e.to_string())?;
        match &cfg.sites[0].handler {
            HandlerConfig::App(a) => Ok((**a).clone()),
            h => panic!("not an app: {h:?}"),
        }
    }

    #[test]
    fn one_line_gives_the_defaults() {
        let a = app("[site.\"shop.test\"]\napp = \"node server.js\"\n").unwrap();
        assert_eq!(a.name, "shop.test");
        assert_eq!(a.run, "node server.js");
        assert_eq!(a.instances, 1);
        assert_eq!(a.dir, std::path::Path::new("/srv/conf"));
        assert_eq!(a.ready, "/");
        assert!(
            a.watch.is_empty(),
            "the config's own directory is not watched"
        );
        assert_eq!(a.start_timeout, Duration::from_secs(30));
        assert_eq!(a.stop_timeout, Duration::from_secs(10));
        assert_eq!((a.idle, a.socket, a.queue), (None, false, 1024));
    }

    #[test]
    fn every_key_is_read_and_paths_are_relative_to_the_config() {
        let a = app(r#"
[site."shop.test".app]
run = "bin/shop --port $PORT"
instances = 3
dir = "shop"
env = { MODE = "production" }
env_file = "shop.env"
ready = "/healthz"
start_timeout = "5s"
stop_timeout = "2s"
idle = "15m"
socket = true
queue = 10
watch = ["bin", "shop.conf"]
"#)
        .unwrap();
        assert_eq!(a.instances, 3);
        assert_eq!(a.dir, std::path::Path::new("/srv/conf/shop"));
        assert_eq!(a.env, vec![("MODE".to_string(), "production".to_string())]);
        assert_eq!(
            a.env_file.as_deref(),
            Some(std::path::Path::new("/srv/conf/shop.env"))
        );
        assert_eq!(a.ready, "/healthz");
        assert_eq!(a.start_timeout, Duration::from_secs(5));
        assert_eq!(a.stop_timeout, Duration::from_secs(2));
        assert_eq!(a.idle, Some(Duration::from_secs(900)));
        assert!(a.socket);
        assert_eq!(a.queue, 10);
        assert_eq!(
            a.watch,
            vec![
                std::path::PathBuf::from("/srv/conf/shop/bin"),
                "/srv/conf/shop/shop.conf".into()
            ]
        );
    }

    #[test]
    fn an_app_with_routes_is_their_fallback() {
        let cfg = crate::load_str(
            "weir.toml",
            "[site.\"a.test\"]\napp = \"x\"\n[[site.\"a.test\".route]]\npath = \"/ping\"\nrespond = 200\n",
            std::path::Path::new("/srv"),
        )
        .unwrap();
        let h = &cfg.sites[0].handler;
        assert!(matches!(h, HandlerConfig::Routes { .. }), "{h:?}");
        assert_eq!(h.app().map(|a| a.run.as_str()), Some("x"));
    }

    #[test]
    fn a_given_dir_is_watched() {
        let a = app("[site.\"a.test\".app]\nrun = \"x\"\ndir = \"/srv/a\"\n").unwrap();
        assert_eq!(a.watch, vec![std::path::PathBuf::from("/srv/a")]);
    }

    #[test]
    fn mistakes_are_reported() {
        for (toml, says) in [
            ("[site.\"a.test\".app]\ninstances = 2\n", "needs `run"),
            ("[site.\"a.test\"]\napp = \" \"\n", "empty command"),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\ninstances = 0\n",
                "out of range",
            ),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\nready = \"health\"\n",
                "must start with `/`",
            ),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\nidle = \"0s\"\n",
                "more than zero",
            ),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\nstart_timeout = \"soon\"\n",
                "start_timeout",
            ),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\nenv = { \"A=B\" = \"1\" }\n",
                "not a variable name",
            ),
            (
                "[site.\"a.test\"]\nroot = \"/srv\"\napp = \"x\"\n",
                "remove `root`",
            ),
            (
                "[site.\"a.test\".app]\nrun = \"x\"\ninstance = 2\n",
                "did you mean `instances`",
            ),
        ] {
            let e = app(toml).expect_err(toml);
            assert!(e.contains(says), "{toml}: {e}");
        }
    }
}
