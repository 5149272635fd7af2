//! Pinning queue threads to CPUs (`sched_setaffinity(2)`), for
//! [`crate::RuntimeConfig::cpus`].

use std::io;

/// The CPUs the calling thread may run on.
pub(crate) fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set; `sched_getaffinity`
    // writes at most `size_of::<cpu_set_t>()` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is that of `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * core::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is initialised and every index is below its capacity.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * core::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `cpu` is below the set's capacity (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the size is that of `set`.
    let rc = unsafe { libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
