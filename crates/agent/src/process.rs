//! What an agent process sets up about itself.

/// The open-file limits of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit found.
    pub before: u64,
    /// The soft limit now.
    pub after: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft limit on open files to the hard limit (or, when that is
/// unlimited, to the kernel's ceiling `fs.nr_open`). An agent holds a descriptor per
/// connection: the soft limit inherited from a shell (often 1,024) would let one
/// client's idle connections shut out everyone, peers included, long before the
/// connection limits apply.
///
/// # Errors
/// The limit cannot be read or set.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = lim.rlim_cur as u64;
    let mut target = lim.rlim_max;
    if target == libc::RLIM_INFINITY {
        // NOFILE cannot be unlimited: the kernel's ceiling is fs.nr_open.
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if lim.rlim_cur < target {
        let want = libc::rlimit {
            rlim_cur: target,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the rlimit we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim.rlim_cur = target;
    }
    Ok(OpenFileLimit {
        before,
        after: lim.rlim_cur as u64,
        hard: lim.rlim_max as u64,
    })
}

/// `n` distinct ports free on loopback now: each bound at once (so none is handed out
/// twice), then released for the agents to take. The one place tests, benchmarks and
/// the cluster demo pick ports; another process may still take one in between, which
/// the agent then reports as a bind error naming it.
///
/// # Errors
/// The error of a bind (no free port) or of reading its address.
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let held = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}
