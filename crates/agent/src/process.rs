//! What an agent process sets up about itself.

/// Raises the soft limit on open files to the hard limit, and returns both (before,
/// after). An agent holds a descriptor per connection: the soft limit inherited from a
/// shell (often 1,024) would let one client's idle connections shut out everyone,
/// peers included, long before the connection limits apply.
///
/// # Errors
/// The limit cannot be read or set.
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: `lim` is a valid rlimit read just above, soft raised to hard.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
        Ok((before as u64, lim.rlim_cur as u64))
    }
    #[cfg(not(unix))]
    {
        Ok((0, 0))
    }
}
