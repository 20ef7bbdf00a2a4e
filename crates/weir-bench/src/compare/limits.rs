//! Process limits and CPU pinning for benchmark runs.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

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

/// The pinned mode's two disjoint CPU sets: the server (and only it) runs
/// on `server`, the load generator and the proxied scenarios' backend on
/// `generator`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuSplit {
    /// CPUs of the server under test (its whole process tree).
    pub server: Vec<usize>,
    /// CPUs of weir-bench itself (the generator) and of `weir-bench backend`.
    pub generator: Vec<usize>,
}

impl CpuSplit {
    /// Splits `available` (sorted, distinct) into two disjoint halves: the
    /// server gets the upper half, rounded down, the generator the rest, so
    /// on 2 CPUs each gets one. `None` with fewer than 2 CPUs.
    pub fn of(available: &[usize]) -> Option<CpuSplit> {
        let mut cpus = available.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.len() < 2 {
            return None;
        }
        let generator = cpus.len() - cpus.len() / 2;
        Some(CpuSplit {
            server: cpus[generator..].to_vec(),
            generator: cpus[..generator].to_vec(),
        })
    }

    /// The split of the CPUs this process may run on.
    pub fn of_this_process() -> Result<CpuSplit, String> {
        let cpus = affinity(0).map_err(|e| format!("cannot read the CPU affinity: {e}"))?;
        CpuSplit::of(&cpus).ok_or_else(|| {
            format!(
                "pinning needs at least 2 CPUs; this process may use {}",
                cpu_list(&cpus)
            )
        })
    }
}

/// `[0, 2, 3]` → `"0,2,3"`, as `taskset -c` takes it.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs thread (or process) `tid` may run on; 0 is the calling thread.
pub fn affinity(tid: u32) -> Result<Vec<usize>, nix::Error> {
    let set = sched_getaffinity(Pid::from_raw(tid as i32))?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Pins the calling thread (and the threads it spawns later) to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), nix::Error> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_disjoint_covers_every_cpu_and_gives_each_side_one_on_two() {
        assert_eq!(
            CpuSplit::of(&[0, 1]),
            Some(CpuSplit {
                server: vec![1],
                generator: vec![0]
            })
        );
        assert_eq!(CpuSplit::of(&[3]), None);
        assert_eq!(CpuSplit::of(&[]), None);
        for cpus in [
            vec![0, 1, 2],
            vec![0, 1, 2, 3],
            vec![2, 5, 7, 8, 9],
            (0..64).collect(),
        ] {
            let s = CpuSplit::of(&cpus).unwrap();
            assert!(!s.server.is_empty() && !s.generator.is_empty(), "{s:?}");
            assert!(s.server.iter().all(|c| !s.generator.contains(c)), "{s:?}");
            let mut all = [s.server.clone(), s.generator.clone()].concat();
            all.sort_unstable();
            assert_eq!(all, cpus);
            assert!(s.server.len() <= s.generator.len());
        }
        assert_eq!(cpu_list(&[0, 2, 3]), "0,2,3");
    }

    #[test]
    fn a_pinned_thread_reads_back_its_cpus() {
        let Ok(split) = CpuSplit::of_this_process() else {
            return; // one CPU: nothing to split
        };
        let want = split.generator.clone();
        let got = std::thread::spawn(move || {
            pin_current_thread(&want).unwrap();
            affinity(0).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(got, split.generator);
    }
}
