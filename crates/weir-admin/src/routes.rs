//! The admin API's endpoints, one function each, read top to bottom from
//! [`handle`]. Every answer is JSON except `/config` (the config's own
//! text), `/metrics` (Prometheus text) and `/status` (a page).

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::json;

use crate::{Ctx, upstreams};
use weir_cache::Invalidation;
use weir_http::body::Body;
use weir_http::h1::Incoming;
use weir_proxy::AdminState;
use weir_server::ReloadError;

/// How long a purge's answer waits for the other instances' acknowledgements.
const PURGE_ACKS_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The largest config `POST /load` takes.
const MAX_CONFIG: usize = 4 * 1024 * 1024;

type Resp = Response<Body>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Body::full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The API's answers are the state of one moment.
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

fn json(status: StatusCode, v: serde_json::Value) -> Resp {
    let mut body = serde_json::to_vec_pretty(&v).unwrap_or_default();
    body.push(b'\n');
    reply(status, "application/json", body)
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Resp {
    json(status, json!({ "error": msg.to_string() }))
}

pub(crate) async fn handle(req: Request<Incoming>, ctx: &Arc<Ctx>) -> Resp {
    if let Err(r) = ctx.guard.check(req.headers()) {
        tracing::warn!(
            "admin API: {} {} refused: {}",
            req.method(),
            req.uri(),
            r.reason
        );
        return error(r.status, r.reason);
    }
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let m = req.method().clone();
    match (&m, segs.as_slice()) {
        (&Method::GET, ["config"]) => config(ctx),
        (&Method::POST, ["load"]) => load(req, ctx).await,
        (&Method::POST, ["reload"]) => reload(req, ctx).await,
        (&Method::POST, ["upgrade"]) => upgrade(ctx).await,
        (&Method::GET, ["upstreams"]) => list_upstreams(ctx),
        (&Method::POST, ["upstreams", name, action]) => {
            let (name, action) = (name.to_string(), action.to_string());
            set_upstream(req, ctx, &name, &action).await
        }
        (&Method::GET, ["certificates"]) => json(
            StatusCode::OK,
            json!(ctx.server.certificates().certificates()),
        ),
        (&Method::GET, ["metrics"]) => reply(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            crate::metrics::render(&ctx.server),
        ),
        (&Method::GET, ["status"] | [""]) => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            crate::status::PAGE,
        ),
        (&Method::GET, ["status.json"]) => json(StatusCode::OK, crate::status::json(&ctx.server)),
        (&Method::GET, ["cache"]) => cache_list(&req, ctx),
        (&Method::GET, ["apps"]) => list_apps(ctx),
        (&Method::GET, ["cluster"]) => cluster(ctx),
        (&Method::POST, ["apps", name, "restart"]) => {
            let name = name.to_string();
            restart_app(ctx, &name).await
        }
        (&Method::POST, ["cache", "purge"]) => cache_purge(req, ctx).await,
        (
            _,
            [
                "config" | "upstreams" | "certificates" | "metrics" | "status" | "status.json"
                | "load" | "reload" | "upgrade" | "cache" | "apps" | "cluster",
            ],
        )
        | (_, ["cache", "purge"])
        | (_, ["apps", _, "restart"])
        | (_, ["upstreams", _, _]) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => error(StatusCode::NOT_FOUND, format!("no admin endpoint {path}")),
    }
}

fn app_json(a: &weir_apps::App) -> serde_json::Value {
    let st = a.status();
    json!({
        "name": a.name,
        "run": st.run,
        "release": st.release,
        "refused": st.refused.as_ref().map(|r| json!({
            "run": r.run,
            "release": r.release,
            "error": r.error,
        })),
        "phase": st.phase.to_string(),
        "error": st.error,
        "instances": a.instances,
        "ready": a.ready(),
        "pids": st.pids.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
        "starts": a.starts(),
        "restarts": a.restarts(),
    })
}

/// `GET /apps`: every app weir runs, what it is doing, its processes.
fn list_apps(ctx: &Ctx) -> Resp {
    let all: Vec<_> = ctx
        .server
        .sites()
        .iter()
        .filter_map(|s| s.app().map(|a| app_json(a)))
        .collect();
    json(StatusCode::OK, json!(all))
}

/// `POST /apps/{name}/restart`: a rolling restart; answers once it is over
/// (200), or rolled back (500 with why: the old instances still serve).
async fn restart_app(ctx: &Ctx, name: &str) -> Resp {
    let Some(app) = ctx
        .server
        .sites()
        .iter()
        .find_map(|s| s.app().filter(|a| a.name == name).cloned())
    else {
        return error(StatusCode::NOT_FOUND, format!("no app named {name}"));
    };
    tracing::info!("admin API: rolling restart of app {name}");
    match app.restart().await {
        Ok(()) => json(StatusCode::OK, json!({ "ok": true, "app": app_json(&app) })),
        Err(why) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "ok": false, "error": why, "app": app_json(&app) }),
        ),
    }
}

/// `GET /cache[?limit=N]`: the store's numbers and up to N (default 100)
/// stored responses.
fn cache_list(req: &Request<Incoming>, ctx: &Ctx) -> Resp {
    let limit = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("limit=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let store = ctx.server.cache();
    json(
        StatusCode::OK,
        json!({
            "summary": store.summary(),
            "entries": store.list(limit, weir_cache::now()),
        }),
    )
}

/// `POST /cache/purge` with `{"url": …}`, `{"prefix": …}`, `{"pattern": …}`
/// or `{"tag": …}`: removes what it names from the store.
async fn cache_purge(req: Request<Incoming>, ctx: &Arc<Ctx>) -> Resp {
    let (_, b) = match body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: serde_json::Value = match serde_json::from_slice(&b) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("JSON body: {e}")),
    };
    let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let what = if let Some(u) = field("url") {
        Invalidation::Url(u)
    } else if let Some(p) = field("prefix") {
        Invalidation::Prefix(p)
    } else if let Some(p) = field("pattern") {
        Invalidation::Pattern(p)
    } else if let Some(t) = field("tag") {
        Invalidation::Tag(t)
    } else {
        return error(
            StatusCode::BAD_REQUEST,
            "name what to purge: {\"url\": \"http://host/path\"}, {\"prefix\": …}, {\"pattern\": …} or {\"tag\": …}",
        );
    };
    let n = match ctx.server.cache().invalidate(&what) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    tracing::info!("admin API: cache purge of {what}: {n} responses removed");
    let Some(cluster) = ctx.server.cluster().filter(|c| c.cfg.share.cache) else {
        return json(StatusCode::OK, json!({ "purged": n }));
    };
    // The other instances: which of them acknowledged (waiting a moment
    // for them), or that the purge waits for Redis to return.
    let id = cluster.purge(&what);
    let acks = cluster.acks(id, PURGE_ACKS_WITHIN).await;
    json(StatusCode::OK, json!({ "purged": n, "cluster": acks }))
}

/// `GET /cluster`: this instance, the others it hears of, what they share,
/// and whether Redis is reachable.
fn cluster(ctx: &Ctx) -> Resp {
    match ctx.server.cluster() {
        Some(c) => json(StatusCode::OK, json!(c.status())),
        None => error(
            StatusCode::NOT_FOUND,
            "no cluster: this instance has no [cluster] section",
        ),
    }
}

/// `GET /config`: the text the running config was read from. An app whose
/// release in it was refused (rolled back) runs another one: the text then
/// starts with a comment per such app, and `Weir-App-Refused` names them,
/// so the text is never read as what runs.
fn config(ctx: &Ctx) -> Resp {
    let cfg = ctx.server.config();
    match &cfg.text {
        Some(t) => {
            let refused: Vec<(String, weir_apps::supervisor::Status)> = ctx
                .server
                .sites()
                .iter()
                .filter_map(|s| s.app())
                .map(|a| (a.name.clone(), a.status()))
                .filter(|(_, st)| st.refused.is_some())
                .collect();
            let mut text = String::new();
            for (name, st) in &refused {
                text.push_str(&refused_comment(name, st));
            }
            text.push_str(t);
            let mut r = reply(
                StatusCode::OK,
                "application/toml; charset=utf-8",
                Bytes::from(text),
            );
            if let Ok(v) = HeaderValue::from_str(&cfg.source) {
                r.headers_mut().insert("weir-config-source", v);
            }
            for (name, _) in &refused {
                if let Ok(v) = HeaderValue::from_str(name) {
                    r.headers_mut().append("weir-app-refused", v);
                }
            }
            r
        }
        None => error(
            StatusCode::NOT_FOUND,
            format!("weir runs {}: there is no config text", cfg.source),
        ),
    }
}

/// The TOML comment `GET /config` starts with for an app whose release in
/// the text was refused: which release runs instead, and why.
fn refused_comment(app: &str, st: &weir_apps::supervisor::Status) -> String {
    let Some(r) = &st.refused else {
        return String::new();
    };
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    format!(
        "# weir: app {app:?}: the release below (run = {:?}, release {}) was refused and rolled back: {}\n\
         # weir: app {app:?} runs release {} (run = {:?}) until a reload succeeds\n",
        one_line(&r.run),
        r.release.as_deref().unwrap_or("?"),
        one_line(&r.error),
        st.release.as_deref().unwrap_or("?"),
        one_line(&st.run),
    )
}

async fn body(req: Request<Incoming>) -> Result<(Option<String>, Bytes), Resp> {
    let ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    match Limited::new(req.into_body(), MAX_CONFIG).collect().await {
        Ok(b) => Ok((ct, b.to_bytes())),
        Err(e) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body: {e}"),
        )),
    }
}

fn reload_answer(r: Result<weir_server::ReloadReport, ReloadError>) -> Resp {
    match r {
        Ok(report) => json(StatusCode::OK, json!({ "ok": true, "report": report })),
        Err(ReloadError::Config(errs)) => json(
            StatusCode::BAD_REQUEST,
            json!({
                "ok": false,
                "errors": errs.0.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            }),
        ),
        Err(e) => json(
            StatusCode::BAD_REQUEST,
            json!({ "ok": false, "errors": [e.to_string()] }),
        ),
    }
}

/// Runs a reload on the blocking pool: it reads files and builds sites.
async fn blocking<F>(f: F) -> Resp
where
    F: FnOnce() -> Result<weir_server::ReloadReport, ReloadError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => reload_answer(r),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `POST /load`: a whole config in the body, TOML (any content type) or
/// JSON (`application/json`, the same structure). Relative paths in it are
/// taken from the running config file's directory.
async fn load(req: Request<Incoming>, ctx: &Arc<Ctx>) -> Resp {
    let (ct, bytes) = match body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return error(StatusCode::BAD_REQUEST, "the config is not UTF-8");
    };
    let (name, src) = if ct
        .as_deref()
        .is_some_and(|c| c.starts_with("application/json"))
    {
        match json_to_toml(text) {
            Ok(t) => ("<POST /load, JSON as TOML>", t),
            Err(e) => {
                return json(
                    StatusCode::BAD_REQUEST,
                    json!({ "ok": false, "errors": [format!("JSON: {e}")] }),
                );
            }
        }
    } else {
        ("<POST /load>", text.to_string())
    };
    let base = ctx
        .server
        .config_path()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    let server = ctx.server.clone();
    blocking(
        move || match weir_config::load_str_with(name, &src, &base, &weir_tls::CertFiles) {
            Ok(cfg) => server.reload(cfg, None),
            Err(errs) => {
                tracing::error!("admin API: POST /load refused, the running config stays:\n{errs}");
                server.note_refused(&errs);
                Err(ReloadError::Config(errs))
            }
        },
    )
    .await
}

fn json_to_toml(text: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let t = toml::Value::try_from(v).map_err(|e| e.to_string())?;
    toml::to_string(&t).map_err(|e| e.to_string())
}

/// `POST /reload`: reads the config file again; `{"config": "PATH"}` reads
/// another one (it becomes the file SIGHUP reads).
async fn reload(req: Request<Incoming>, ctx: &Arc<Ctx>) -> Resp {
    let (_, bytes) = match body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let path = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => v.get("config").and_then(|p| p.as_str()).map(PathBuf::from),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("JSON body: {e}")),
        }
    };
    let server = ctx.server.clone();
    blocking(move || server.reload_file(path)).await
}

/// `POST /upgrade`: starts the binary now at this process's path, hands it
/// the sockets, and once it serves, this process drains and exits.
async fn upgrade(ctx: &Arc<Ctx>) -> Resp {
    let server = ctx.server.clone();
    match tokio::task::spawn_blocking(move || server.upgrade()).await {
        Ok(Ok(pid)) => json(StatusCode::OK, json!({ "ok": true, "pid": pid })),
        Ok(Err(e)) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "ok": false, "errors": [e.to_string()] }),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

fn upstream_json(u: &crate::UpstreamRef) -> serde_json::Value {
    use weir_proxy::counter;
    let errors: serde_json::Map<String, serde_json::Value> = counter::ERRORS
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                k.to_string(),
                json!(u.up.counts.sum(counter::FIRST_ERROR + i)),
            )
        })
        .collect();
    let app = u.app.as_ref().map(|a| {
        let st = a.status();
        json!({
            "name": a.name,
            "phase": st.phase.to_string(),
            "error": st.error,
            "pid": st.pids.iter().find(|(slot, _)| *slot == u.idx).map(|(_, p)| p),
        })
    });
    json!({
        "site": u.site,
        "route": u.route,
        "name": u.up.cfg.name,
        "app": app,
        "state": u.up.admin_state(),
        "health": if u.healthy() { "up" } else { "down" },
        "in_flight": u.up.in_flight(),
        "weight": u.up.weight(),
        "requests": u.up.counts.sum(counter::REQUESTS),
        "retries": u.up.counts.sum(counter::RETRIES),
        "errors": errors,
        "idle_connections": u.proxy.idle_connections(u.idx),
    })
}

/// `GET /upstreams`.
fn list_upstreams(ctx: &Ctx) -> Resp {
    let all: Vec<_> = upstreams(&ctx.server).iter().map(upstream_json).collect();
    json(StatusCode::OK, json!(all))
}

/// `POST /upstreams/{name}/drain|ready|maint|weight`: every upstream of that
/// name (in every site, or in `?site=NAME`'s). `weight` takes
/// `{"weight": N}`.
async fn set_upstream(req: Request<Incoming>, ctx: &Arc<Ctx>, name: &str, action: &str) -> Resp {
    let site = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("site=").map(str::to_string))
    });
    let change: Box<dyn Fn(&weir_proxy::Upstream)> = match action {
        "drain" => Box::new(|u| u.set_admin_state(AdminState::Drain)),
        "ready" => Box::new(|u| u.set_admin_state(AdminState::Ready)),
        "maint" => Box::new(|u| u.set_admin_state(AdminState::Maint)),
        "weight" => {
            let (_, bytes) = match body(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let w = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("weight").and_then(|w| w.as_u64()));
            match w {
                Some(w) if (1..=1000).contains(&w) => {
                    Box::new(move |u: &weir_proxy::Upstream| u.set_weight(w as u32))
                }
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "give the weight as {\"weight\": N}, N from 1 to 1000",
                    );
                }
            }
        }
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("unknown action `{other}`: use drain, ready, maint or weight"),
            );
        }
    };
    let matched: Vec<_> = upstreams(&ctx.server)
        .into_iter()
        .filter(|u| u.up.cfg.name == name && site.as_deref().is_none_or(|s| s == u.site))
        .collect();
    if matched.is_empty() {
        return error(StatusCode::NOT_FOUND, format!("no upstream named `{name}`"));
    }
    for u in &matched {
        change(&u.up);
        tracing::info!(
            "admin API: upstream {} of site {} is now {:?} (weight {})",
            u.up.cfg.name,
            u.site,
            u.up.admin_state(),
            u.up.weight()
        );
    }
    json(
        StatusCode::OK,
        json!(matched.iter().map(upstream_json).collect::<Vec<_>>()),
    )
}
