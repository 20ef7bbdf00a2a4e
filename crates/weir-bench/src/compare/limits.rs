//! Process limits and CPU pinning for benchmark runs.

/// Raises the soft RLIMIT_NOFILE to the hard limit (c10000 needs it); the
/// servers we spawn inherit it. Returns the new soft limit.
pub fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 0,
    }
}

/// Pins the calling thread (and the threads it spawns later) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), nix::Error> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}
