//! Threads of their own for work that must never compete with requests on
//! a worker's runtime (active health checks, the admin API, an app's
//! supervisor): each runs one future on a current-thread tokio runtime and
//! ends with it. Owns nothing else.

use std::future::Future;

/// Runs the future `make` returns on a new thread named `name`, on a
/// current-thread runtime; a runtime that cannot start is logged as
/// `what`'s failure.
pub fn spawn<F, Fut>(
    name: String,
    what: &'static str,
    make: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::Builder::new().name(name).spawn(move || {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(make()),
            Err(e) => tracing::error!("{what}: cannot start a runtime: {e}"),
        }
    })
}
