//! systemd's readiness protocol (`Type=notify`): READY once listening,
//! RELOADING and READY around a reload, STOPPING at shutdown. Silent when
//! weir is not started by systemd (no `NOTIFY_SOCKET`).

fn send(state: &[sd_notify::NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("systemd notification failed: {e}");
    }
}

pub fn ready() {
    send(&[sd_notify::NotifyState::Ready]);
}

pub fn reloading() {
    // systemd 253 and later want the monotonic time with RELOADING.
    match sd_notify::NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[sd_notify::NotifyState::Reloading, now]),
        Err(_) => send(&[sd_notify::NotifyState::Reloading]),
    }
}

pub fn stopping() {
    send(&[sd_notify::NotifyState::Stopping]);
}

/// Tells systemd that `pid` is now the service's main process (after a
/// binary upgrade), and that it is ready.
pub fn main_pid(pid: u32) {
    send(&[
        sd_notify::NotifyState::MainPid(pid),
        sd_notify::NotifyState::Ready,
    ]);
}
