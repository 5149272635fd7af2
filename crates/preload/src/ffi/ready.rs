//! select and poll: answered in the library, without a system call, when
//! the kernel would return at once over linerate sockets alone.
//!
//! The kernel answers every readiness call over the placeholders (see the
//! crate's `# Readiness`), which costs a system call even when a linerate
//! socket is ready: for a program that calls `select` before each small
//! `read` (iperf3) that is most of its time. When every fd of a `select` or
//! `poll` set is a linerate socket of this process, the library knows what
//! the kernel would see on each placeholder ([`sock::shown`]); if that makes
//! the call return at once (something is ready, or the timeout is zero) it
//! returns the same answer itself. Any other fd in the set (a pipe, a kernel
//! socket, a bad fd), a call that would wait, or a bad `nfds` goes to the
//! kernel as before, so waiting, timeouts, signals and errors stay the
//! kernel's. A set pointer the kernel would refuse with `EFAULT` faults in
//! the library instead, as glibc's `FD_ISSET` on it would in the program.

use super::*;

/// Bits of one `fd_set` word.
const WORD_BITS: usize = c_ulong::BITS as usize;

/// The word `i` of `set` (0 for a null set).
///
/// # Safety
/// `set` is null or a caller's fd_set of at least `i + 1` words.
unsafe fn word(set: *const libc::fd_set, i: usize) -> c_ulong {
    if set.is_null() {
        0
    } else {
        // SAFETY: per the caller.
        unsafe { set.cast::<c_ulong>().add(i).read_unaligned() }
    }
}

/// The answer of select over the sets if it is at once: `None` for the kernel.
///
/// # Safety
/// As select(2), with `nfds` within `FD_SETSIZE`.
unsafe fn select_at_once(
    nfds: usize,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    zero_timeout: bool,
) -> Option<c_int> {
    const MAX_WORDS: usize = libc::FD_SETSIZE / WORD_BITS;
    let words = nfds.div_ceil(WORD_BITS);
    // Readable and writable bits found, per word.
    let mut out = [[0 as c_ulong; 2]; MAX_WORDS];
    let mut count: c_int = 0;
    for (i, [out_r, out_w]) in (0..words).zip(out.iter_mut()) {
        let rest = nfds - i * WORD_BITS;
        let mask = if rest < WORD_BITS {
            (1 << rest) - 1
        } else {
            c_ulong::MAX
        };
        // SAFETY: each set holds `FD_SETSIZE` bits, `words` of them used.
        let (r, w, e) = unsafe { (word(rd, i) & mask, word(wr, i) & mask, word(ex, i) & mask) };
        let mut any = r | w | e;
        while any != 0 {
            let bit = any.trailing_zeros() as usize;
            any &= any - 1;
            let fd = c_int::try_from(i * WORD_BITS + bit).ok()?;
            let (readable, writable) = sock::shown(fd)?;
            let b: c_ulong = 1 << bit;
            if readable && r & b != 0 {
                *out_r |= b;
                count += 1;
            }
            if writable && w & b != 0 {
                *out_w |= b;
                count += 1;
            }
            // A placeholder (an AF_UNIX stream socket) never has an
            // exceptional condition: `ex` bits come back cleared.
        }
    }
    if count == 0 && !zero_timeout {
        return None;
    }
    for (which, set) in [rd, wr, ex].into_iter().enumerate() {
        if set.is_null() {
            continue;
        }
        for (i, found) in (0..words).zip(out.iter()) {
            // `ex` (2) has nothing.
            let v = found.get(which).copied().unwrap_or(0);
            // SAFETY: as `word`: the kernel writes back the same words.
            unsafe { set.cast::<c_ulong>().add(i).write_unaligned(v) };
        }
    }
    Some(count)
}

/// select(2): see the module docs. On an answer at once the timeout is left
/// as it was (the kernel writes back the time left, which is all of it).
///
/// # Safety
/// As select(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    if !INSIDE.try_with(Cell::get).unwrap_or(true)
        && sock::active()
        && let Ok(n) = usize::try_from(nfds)
        && (1..=libc::FD_SETSIZE).contains(&n)
        && let Some(v) = enter(-1, || {
            let zero = !timeout.is_null() && {
                // SAFETY: the caller's timeval.
                let t = unsafe { timeout.read_unaligned() };
                t.tv_sec == 0 && t.tv_usec == 0
            };
            // SAFETY: the caller's sets of `FD_SETSIZE` bits.
            unsafe { select_at_once(n, rd, wr, ex, zero) }.map(Ok)
        })
    {
        return v;
    }
    // SAFETY: libc's select with the caller's arguments.
    unsafe { next::select()(nfds, rd, wr, ex, timeout) }
}

/// What poll would report for `fd` asking `events` at once: `None` for the
/// kernel. As the kernel's poll of an AF_UNIX stream socket: readable is
/// POLLIN and POLLRDNORM, writable POLLOUT, POLLWRNORM and POLLWRBAND.
fn poll_events(fd: c_int, events: libc::c_short) -> Option<libc::c_short> {
    let (readable, writable) = sock::shown(fd)?;
    let mut got = 0;
    if readable {
        got |= libc::POLLIN | libc::POLLRDNORM;
    }
    if writable {
        got |= libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND;
    }
    Some(got & events)
}

/// poll(2): see the module docs.
///
/// # Safety
/// As poll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    if !INSIDE.try_with(Cell::get).unwrap_or(true)
        && sock::active()
        && !fds.is_null()
        && let Ok(n) = usize::try_from(nfds)
        && (1..=1024).contains(&n)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's array of `nfds` pollfds.
            let set = unsafe { std::slice::from_raw_parts_mut(fds, n) };
            let mut got = [0 as libc::c_short; 1024];
            let mut count: c_int = 0;
            for (p, g) in set.iter().zip(got.iter_mut()) {
                // A negative fd is skipped, as the kernel skips it.
                if p.fd >= 0 {
                    *g = poll_events(p.fd, p.events)?;
                    count += c_int::from(*g != 0);
                }
            }
            if count == 0 && timeout != 0 {
                return None;
            }
            for (p, g) in set.iter_mut().zip(got) {
                p.revents = g;
            }
            Some(Ok(count))
        })
    {
        return v;
    }
    // SAFETY: libc's poll with the caller's arguments.
    unsafe { next::poll()(fds, nfds, timeout) }
}
