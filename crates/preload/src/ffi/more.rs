//! The batch and file calls: recvmmsg, sendmmsg, sendfile.

use super::*;

/// recvmmsg(2): messages one by one, as the kernel's loop takes them: each
/// receive waits as the socket and flags say (the first only with
/// MSG_WAITFORONE, which makes the rest non-blocking), and the timeout is
/// looked at after each message, not while one is awaited: once it has
/// passed, the call returns what it has. The time left is written back.
///
/// # Safety
/// As recvmmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    vlen: libc::c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    if linerate(fd).is_some() {
        if vlen > 0 && msgs.is_null() {
            set_errno(libc::EFAULT);
            return -1;
        }
        let end = if timeout.is_null() {
            None
        } else {
            // SAFETY: the caller's timespec.
            let t = unsafe { *timeout };
            if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
                set_errno(libc::EINVAL);
                return -1;
            }
            let d = std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
            Some(std::time::Instant::now() + d)
        };
        let mut f = flags & !libc::MSG_WAITFORONE;
        let mut done: c_int = 0;
        for i in 0..vlen.min(1024) as usize {
            // SAFETY: entry `i` of the caller's `vlen` messages.
            let m = unsafe { &mut *msgs.add(i) };
            // SAFETY: the caller's message header.
            let n = unsafe { recvmsg(fd, &mut m.msg_hdr, f) };
            if n < 0 {
                if done > 0 {
                    break;
                }
                return -1;
            }
            m.msg_len = n as libc::c_uint;
            done += 1;
            if flags & libc::MSG_WAITFORONE != 0 {
                f |= libc::MSG_DONTWAIT;
            }
            if let Some(end) = end {
                let left = end.saturating_duration_since(std::time::Instant::now());
                // SAFETY: the caller's timespec, read above.
                unsafe {
                    (*timeout).tv_sec = left.as_secs() as libc::time_t;
                    (*timeout).tv_nsec = libc::c_long::from(left.subsec_nanos() as i32);
                }
                if left.is_zero() {
                    break;
                }
            }
        }
        return done;
    }
    // SAFETY: libc's recvmmsg with the caller's arguments.
    unsafe { next::recvmmsg()(fd, msgs, vlen, flags, timeout) }
}

/// sendmmsg(2): messages one by one; the count sent, or -1 if none was.
///
/// # Safety
/// As sendmmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    vlen: libc::c_uint,
    flags: c_int,
) -> c_int {
    if linerate(fd).is_some() {
        if vlen > 0 && msgs.is_null() {
            set_errno(libc::EFAULT);
            return -1;
        }
        let mut done: c_int = 0;
        for i in 0..vlen.min(1024) as usize {
            // SAFETY: entry `i` of the caller's `vlen` messages.
            let m = unsafe { &mut *msgs.add(i) };
            // SAFETY: the caller's message header.
            let n = unsafe { sendmsg(fd, &m.msg_hdr, flags) };
            if n < 0 {
                if done > 0 {
                    break;
                }
                return -1;
            }
            m.msg_len = n as libc::c_uint;
            done += 1;
        }
        return done;
    }
    // SAFETY: libc's sendmmsg with the caller's arguments.
    unsafe { next::sendmmsg()(fd, msgs, vlen, flags) }
}

/// Copies up to `count` bytes of the kernel file `in_fd` (from `*offset`
/// when given, which then advances; else from its file position) to the
/// linerate socket behind `c`, through a per-thread buffer.
fn sendfile_to(c: &Core, in_fd: c_int, offset: Option<&mut i64>, count: usize) -> R<usize> {
    SCRATCH.with_borrow_mut(|s| {
        s.resize(64 * 1024, 0);
        let mut pos = offset;
        let mut done = 0usize;
        while done < count {
            let want = (count - done).min(s.len());
            let p = s.as_mut_ptr().cast::<c_void>();
            let got = match pos.as_deref() {
                // SAFETY: `want` bytes of the scratch buffer.
                Some(&off) => unsafe { next::pread()(in_fd, p, want, off) },
                // SAFETY: as above.
                None => unsafe { next::read()(in_fd, p, want) },
            };
            if got < 0 {
                return if done > 0 { Ok(done) } else { Err(errno()) };
            }
            let got = got as usize;
            if got == 0 {
                break;
            }
            let sent = match c.send(s.get(..got).unwrap_or_default(), 0, None) {
                Ok(n) => n,
                Err(_) if done > 0 => return Ok(done),
                Err(e) => return Err(e),
            };
            done += sent;
            if let Some(off) = pos.as_deref_mut() {
                *off += sent as i64;
            }
            if sent < got {
                if pos.is_none() {
                    // Put the file position back to what was sent.
                    // SAFETY: lseek on the caller's file.
                    unsafe {
                        libc::lseek(
                            in_fd,
                            sent as libc::off_t - got as libc::off_t,
                            libc::SEEK_CUR,
                        )
                    };
                }
                break;
            }
        }
        Ok(done)
    })
}

/// sendfile(2) to a linerate socket (see [`sendfile_to`]).
///
/// # Safety
/// As sendfile(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    if let Some(c) = linerate(out_fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's offset, if given.
            let off = unsafe { offset.as_mut() };
            Some(sendfile_to(&c, in_fd, off, count).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's sendfile with the caller's arguments.
    unsafe { next::sendfile()(out_fd, in_fd, offset, count) }
}

/// sendfile64, the name glibc's headers use with 64-bit file offsets.
///
/// # Safety
/// As sendfile(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    if let Some(c) = linerate(out_fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's offset, if given.
            let off = unsafe { offset.as_mut() };
            Some(sendfile_to(&c, in_fd, off, count).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's sendfile64 with the caller's arguments.
    unsafe { next::sendfile64()(out_fd, in_fd, offset, count) }
}
