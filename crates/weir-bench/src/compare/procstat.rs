//! Reads CPU time, memory and CPU placement of processes (and their
//! descendants) from /proc. Read-only; never signals or changes a process.

use std::fs;
use std::time::Duration;

/// Clock ticks per second for /proc/<pid>/stat times.
fn ticks_per_sec() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

/// The fields of /proc/<pid>/stat after the `(comm)` field.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// User + system CPU time of one process (all its threads).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let f = stat_fields(pid)?;
    // After "(comm) ": state=0, ppid=1, ..., utime=11, stime=12.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / ticks_per_sec()))
}

/// Resident set size of one process, in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Proportional set size of one process, in bytes (`Pss:` of
/// /proc/<pid>/smaps_rollup): each shared page counts once over all the
/// processes sharing it, so nginx's master and workers are not charged the
/// same pages twice, as summed RSS does.
pub fn pss_bytes(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    pss_of(&s)
}

fn pss_of(rollup: &str) -> Option<u64> {
    let line = rollup.lines().find(|l| l.starts_with("Pss:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Every thread of `pid`, with the CPUs it may run on (its affinity) and
/// the CPU it last ran on (field 39 of /proc/<pid>/task/<tid>/stat).
pub fn task_cpus(pid: u32) -> Vec<TaskCpus> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|tid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let after = &stat[stat.rfind(')')? + 2..];
            // After "(comm) ", state is field 0, so `processor` (39) is 36.
            let last_cpu = after.split_whitespace().nth(36)?.parse().ok()?;
            Some(TaskCpus {
                tid,
                allowed: super::limits::affinity(tid).ok()?,
                last_cpu,
            })
        })
        .collect()
}

/// One thread's CPU placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCpus {
    /// Thread id.
    pub tid: u32,
    /// CPUs it may run on.
    pub allowed: Vec<usize>,
    /// CPU it last ran on.
    pub last_cpu: usize,
}

/// Checks that every thread of every process in `pid`'s tree may run only
/// on `cpus` (and last ran on one of them); `Err` names the first that may not.
pub fn tree_confined(pid: u32, cpus: &[usize]) -> Result<(), String> {
    for p in process_tree(pid) {
        for t in task_cpus(p) {
            if !t.allowed.iter().all(|c| cpus.contains(c)) || !cpus.contains(&t.last_cpu) {
                return Err(format!(
                    "thread {} of process {p} may run on CPUs {:?} (last on {}), not only on {cpus:?}",
                    t.tid, t.allowed, t.last_cpu
                ));
            }
        }
    }
    Ok(())
}

/// CPU time the hypervisor gave to other guests while this machine's CPUs
/// wanted to run ("steal" in /proc/stat), summed over the CPUs. On a shared
/// virtual machine it is why one repeat runs slower than the next: the
/// reports show it beside every row, so a noisy run reads as noisy.
pub fn machine_steal() -> Option<Duration> {
    let s = fs::read_to_string("/proc/stat").ok()?;
    steal_of(&s)
}

fn steal_of(stat: &str) -> Option<Duration> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / ticks_per_sec()))
}

/// `pid` and all its live descendants.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(f) = stat_fields(p)
                && let Some(pp) = f.get(1).and_then(|v| v.parse::<u32>().ok())
            {
                parents.push((p, pp));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let cur = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == cur).map(|(p, _)| *p));
        i += 1;
    }
    tree
}

/// A sample of a process tree: summed CPU time, PSS and RSS.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TreeSample {
    /// Summed CPU time of the live processes.
    pub cpu: Duration,
    /// Summed PSS in bytes: the tree's memory, shared pages counted once.
    pub pss: u64,
    /// Summed RSS in bytes (shared pages once per process that maps them).
    pub rss: u64,
}

/// Samples the tree rooted at each of `pids`.
pub fn sample(pids: &[u32]) -> TreeSample {
    let mut s = TreeSample::default();
    for &root in pids {
        for p in process_tree(root) {
            s.cpu += cpu_time(p).unwrap_or_default();
            s.pss += pss_bytes(p).unwrap_or(0);
            s.rss += rss_bytes(p).unwrap_or(0);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_self() {
        let me = std::process::id();
        assert!(rss_bytes(me).unwrap() > 0);
        assert!(pss_bytes(me).unwrap() > 0);
        let tree = sample(&[me]);
        assert!(tree.pss > 0 && tree.pss <= tree.rss, "{tree:?}");
        let tasks = task_cpus(me);
        assert!(tasks.iter().any(|t| t.tid == me), "{tasks:?}");
        assert!(cpu_time(me).is_some());
        assert!(process_tree(me).contains(&me));
        assert!(machine_steal().is_some());
    }

    #[test]
    fn pss_is_the_rollup_pss_line_in_bytes() {
        let rollup = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  8192 kB\nPss:  5120 kB\nPss_Anon: 4000 kB\n";
        assert_eq!(pss_of(rollup), Some(5120 * 1024));
        assert_eq!(pss_of("Rss: 1 kB\n"), None);
    }

    #[test]
    fn steal_is_the_eighth_figure_of_the_cpu_line() {
        let stat = "cpu  9641034 699 1433332 4336980 22544 0 469808 207005 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let ticks = ticks_per_sec();
        assert_eq!(
            steal_of(stat),
            Some(Duration::from_secs_f64(207005.0 / ticks))
        );
        assert_eq!(steal_of("intr 1 2 3\n"), None);
    }
}
