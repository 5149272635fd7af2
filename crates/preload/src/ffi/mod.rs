//! The C boundary, and the only `unsafe` code of the crate: the interposed
//! functions the dynamic linker finds before libc's, the next definitions
//! (`dlsym(RTLD_NEXT, ...)`), and the system calls the placeholder and the
//! blocking waits need ([`sys`]).
//!
//! Every entry point: looks the fd up only when the calling thread is not
//! inside the library already (the library's own calls, and those of the
//! runtime it starts, go straight to libc); converts pointers into checked
//! slices and addresses (`EFAULT` for null, `EINVAL` for bad lengths); catches
//! a panic (`EIO`, logged) so none unwinds into C; keeps `errno` as it was on
//! success and sets it on failure.

#![allow(unsafe_code)]

use crate::sock::{self, Core, OptSet, OptShape, OptVal, R};
use crate::stack::{self, Loaded, log};
use libc::{c_int, c_ulong, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::cell::{Cell, RefCell};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

thread_local! {
    /// The thread is inside the library: its calls are libc's.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Gathers a datagram's pieces (sendmsg, writev, recvmsg on UDP).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn resolve(name: &'static str) -> *mut c_void {
    // SAFETY: `name` is a NUL-terminated literal (the macro below appends
    // the NUL); RTLD_NEXT asks for the definition after this library's.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        let msg = b"linerate-preload: libc has no definition of an interposed function\n";
        // SAFETY: writes a static buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        std::process::abort();
    }
    p
}

macro_rules! next_fns {
    ($($name:ident: $ty:ty;)*) => {
        /// libc's definitions, found once each.
        mod next {
            use super::*;
            $(
                pub(super) fn $name() -> $ty {
                    static P: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
                    let mut p = P.load(Ordering::Relaxed);
                    if p.is_null() {
                        p = resolve(concat!(stringify!($name), "\0"));
                        P.store(p, Ordering::Relaxed);
                    }
                    // SAFETY: `p` is libc's definition of the function of
                    // this name, whose C type is this one.
                    unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
                }
            )*
        }
    };
}

next_fns! {
    socket: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    bind: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    listen: unsafe extern "C" fn(c_int, c_int) -> c_int;
    accept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    accept4: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
    __read_chk: unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
    write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
    readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    recv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    __recv_chk: unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t;
    recvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    __recvfrom_chk: unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
    send: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendto: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
    close: unsafe extern "C" fn(c_int) -> c_int;
    shutdown: unsafe extern "C" fn(c_int, c_int) -> c_int;
    getsockname: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getpeername: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    fcntl64: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    ioctl: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;
    dup: unsafe extern "C" fn(c_int) -> c_int;
    dup2: unsafe extern "C" fn(c_int, c_int) -> c_int;
    dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    recvmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int, *mut libc::timespec) -> c_int;
    sendmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int) -> c_int;
    sendfile: unsafe extern "C" fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t;
    sendfile64: unsafe extern "C" fn(c_int, c_int, *mut libc::off64_t, size_t) -> ssize_t;
    pread: unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t;
}

fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno location is always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e };
}

/// The socket behind `fd` if the library serves or watches it and the
/// caller is not the library itself.
fn ours(fd: c_int) -> Option<Arc<Core>> {
    if INSIDE.try_with(Cell::get).unwrap_or(true) {
        return None;
    }
    sock::lookup(fd)
}

/// As [`ours`], for calls that only linerate sockets take over.
fn linerate(fd: c_int) -> Option<Arc<Core>> {
    ours(fd).filter(|c| c.is_linerate())
}

/// Runs `f` inside the library: `None` (hand the call to libc), a value, or
/// `fail` with errno set. A panic is `fail` with `EIO`, logged.
fn enter<T: Copy>(fail: T, f: impl FnOnce() -> Option<R<T>>) -> Option<T> {
    let saved = errno();
    let prev = INSIDE.replace(true);
    let r = catch_unwind(AssertUnwindSafe(f));
    INSIDE.set(prev);
    match r {
        Ok(None) => {
            set_errno(saved);
            None
        }
        Ok(Some(Ok(v))) => {
            set_errno(saved);
            Some(v)
        }
        Ok(Some(Err(e))) => {
            set_errno(e);
            Some(fail)
        }
        Err(_) => {
            log("a call panicked inside the library; it returns EIO");
            set_errno(libc::EIO);
            Some(fail)
        }
    }
}

// ---- pointers into safe values ----

/// `len` bytes at `p` as a slice (`EFAULT` for null with a length).
///
/// # Safety
/// `p` must point to `len` writable bytes the caller owns for the call.
unsafe fn buf_mut<'a>(p: *mut c_void, len: size_t) -> R<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-null, within isize, and valid per the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// # Safety
/// `p` must point to `len` readable bytes.
unsafe fn buf<'a>(p: *const c_void, len: size_t) -> R<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: as in `buf_mut`.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// The address at `p`: `None` for AF_UNSPEC.
///
/// # Safety
/// `p` must point to `len` readable bytes.
unsafe fn read_addr(p: *const sockaddr, len: socklen_t) -> R<Option<SocketAddr>> {
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    let len = len as usize;
    if len < size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least the family is readable.
    let family = c_int::from(unsafe { (*p).sa_family });
    match family {
        libc::AF_UNSPEC => Ok(None),
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: long enough for a sockaddr_in; unaligned read.
            let a = unsafe { p.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            ))))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: long enough for a sockaddr_in6; unaligned read.
            let a = unsafe { p.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            ))))
        }
        libc::AF_INET | libc::AF_INET6 => Err(libc::EINVAL),
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as a C socket address and its length.
fn encode(a: SocketAddr) -> (libc::sockaddr_storage, socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for it.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in>().write(sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in6>().write(sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as socklen_t)
}

/// Writes `a` to `p` (cut to `*lenp`) and its full length to `*lenp`, as
/// the kernel does.
///
/// # Safety
/// `p` must point to `*lenp` writable bytes; `lenp` to a socklen_t.
unsafe fn write_addr(a: SocketAddr, p: *mut sockaddr, lenp: *mut socklen_t) -> R<()> {
    if p.is_null() || lenp.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: lenp is non-null and valid per the caller.
    let room = unsafe { *lenp };
    if (room as c_int) < 0 {
        return Err(libc::EINVAL);
    }
    let (ss, len) = encode(a);
    let n = room.min(len) as usize;
    // SAFETY: `n` bytes fit both the source and the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const ss).cast::<u8>(), p.cast::<u8>(), n);
        *lenp = len;
    }
    Ok(())
}

/// Writes `a` to an optional (`p` null) address out-parameter.
///
/// # Safety
/// As [`write_addr`] when `p` is not null.
unsafe fn write_addr_opt(a: Option<SocketAddr>, p: *mut sockaddr, lenp: *mut socklen_t) -> R<()> {
    match a {
        // SAFETY: per the caller.
        Some(a) if !p.is_null() => unsafe { write_addr(a, p, lenp) },
        _ => Ok(()),
    }
}

// ---- the system calls the rest of the crate uses ----

pub(crate) mod sys;

// ---- load time ----

extern "C" fn on_load() {
    let r = catch_unwind(|| {
        INSIDE.set(true);
        let loaded = stack::init();
        INSIDE.set(false);
        loaded
    });
    match r {
        Ok(Loaded::Exit) => std::process::exit(1),
        Ok(Loaded::Active) => {
            // SAFETY: registers plain extern "C" functions.
            unsafe {
                libc::atexit(on_exit);
                libc::pthread_atfork(None, None, Some(on_fork_child));
            }
        }
        Ok(Loaded::Inert | Loaded::Kernel) => {}
        Err(_) => log("reading the configuration panicked; every socket stays the kernel's"),
    }
}

extern "C" fn on_exit() {
    let _ = catch_unwind(|| {
        INSIDE.set(true);
        stack::at_exit();
    });
}

/// In the child, after `fork`: atomics only (async-signal-safe); the
/// child's own runtime, if any, starts at its first offloaded socket.
extern "C" fn on_fork_child() {
    sock::forked();
}

/// Runs [`on_load`] when the dynamic linker loads the library, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = on_load;

// ---- the interposed functions ----

/// socket(2): the kernel makes it; the library watches it if the policy may
/// offload it.
///
/// # Safety
/// As socket(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: libc's socket with the caller's arguments.
    let fd = unsafe { next::socket()(domain, ty, proto) };
    if fd >= 0 && !INSIDE.try_with(Cell::get).unwrap_or(true) {
        let _ = enter(0, || {
            sock::on_socket(fd, domain, ty, proto);
            None::<R<c_int>>
        });
    }
    fd
}

/// bind(2).
///
/// # Safety
/// As bind(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's address of `len` bytes.
            let a = match unsafe { read_addr(addr, len) } {
                Ok(Some(a)) => a,
                _ if c.is_linerate() => return Some(Err(libc::EINVAL)),
                _ => return None,
            };
            c.bind(fd, a).map(|r| r.map(|()| 0))
        })
    {
        return v;
    }
    // SAFETY: libc's bind with the caller's arguments.
    unsafe { next::bind()(fd, addr, len) }
}

/// listen(2).
///
/// # Safety
/// As listen(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || c.listen(fd).map(|r| r.map(|()| 0)))
    {
        return v;
    }
    // SAFETY: libc's listen with the caller's arguments.
    unsafe { next::listen()(fd, backlog) }
}

/// accept4(2).
///
/// # Safety
/// As accept4(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    lenp: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
                return Some(Err(libc::EINVAL));
            }
            if !addr.is_null() && lenp.is_null() {
                return Some(Err(libc::EFAULT));
            }
            Some(c.accept(flags)?.and_then(|(nfd, peer)| {
                // SAFETY: the caller's buffer of `*lenp` bytes, if any.
                unsafe { write_addr_opt(Some(peer), addr, lenp) }.map(|()| nfd)
            }))
        })
    {
        return v;
    }
    // SAFETY: libc's accept4 with the caller's arguments.
    unsafe { next::accept4()(fd, addr, lenp, flags) }
}

/// accept(2).
///
/// # Safety
/// As accept(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, lenp: *mut socklen_t) -> c_int {
    if linerate(fd).is_some() {
        // SAFETY: forwards the caller's arguments.
        return unsafe { accept4(fd, addr, lenp, 0) };
    }
    // SAFETY: libc's accept with the caller's arguments.
    unsafe { next::accept()(fd, addr, lenp) }
}

/// connect(2).
///
/// # Safety
/// As connect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's address of `len` bytes.
            let a = match unsafe { read_addr(addr, len) } {
                Ok(a) => a,
                Err(e) if c.is_linerate() => return Some(Err(e)),
                Err(_) => return None,
            };
            c.connect(fd, a).map(|r| r.map(|()| 0))
        })
    {
        return v;
    }
    // SAFETY: libc's connect with the caller's arguments.
    unsafe { next::connect()(fd, addr, len) }
}

fn ssize(n: usize) -> ssize_t {
    ssize_t::try_from(n).unwrap_or(ssize_t::MAX)
}

/// read(2).
///
/// # Safety
/// As read(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's buffer of `n` bytes.
            let b = match unsafe { buf_mut(b, n) } {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            Some(c.recv(b, 0).map(|r| ssize(r.0)))
        })
    {
        return v;
    }
    // SAFETY: libc's read with the caller's arguments.
    unsafe { next::read()(fd, b, n) }
}

/// The fortified read (`_FORTIFY_SOURCE`).
///
/// # Safety
/// As read(2), with `buflen` the buffer's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n <= buflen && linerate(fd).is_some() {
        // SAFETY: the caller's arguments, the length checked.
        return unsafe { read(fd, b, n) };
    }
    // SAFETY: libc's __read_chk with the caller's arguments.
    unsafe { next::__read_chk()(fd, b, n, buflen) }
}

/// write(2).
///
/// # Safety
/// As write(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's buffer of `n` bytes.
            let b = match unsafe { buf(b, n) } {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            Some(c.send(b, 0, None).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's write with the caller's arguments.
    unsafe { next::write()(fd, b, n) }
}

/// recv(2).
///
/// # Safety
/// As recv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, b: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: forwards the caller's arguments.
    unsafe { recvfrom(fd, b, n, flags, null_mut(), null_mut()) }
}

/// The fortified recv.
///
/// # Safety
/// As recv(2), with `buflen` the buffer's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n <= buflen && linerate(fd).is_some() {
        // SAFETY: the caller's arguments, the length checked.
        return unsafe { recvfrom(fd, b, n, flags, null_mut(), null_mut()) };
    }
    // SAFETY: libc's __recv_chk with the caller's arguments.
    unsafe { next::__recv_chk()(fd, b, n, buflen, flags) }
}

/// recvfrom(2).
///
/// # Safety
/// As recvfrom(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    lenp: *mut socklen_t,
) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            // SAFETY: the caller's buffer of `n` bytes.
            let b = match unsafe { buf_mut(b, n) } {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            if !addr.is_null() && lenp.is_null() {
                return Some(Err(libc::EFAULT));
            }
            Some(c.recv(b, flags).and_then(|(got, from, full)| {
                match from {
                    // SAFETY: the caller's address buffer, if any.
                    Some(_) => unsafe { write_addr_opt(from, addr, lenp) }?,
                    // A stream has no sender address: Linux says so with a
                    // length of 0 (the buffer untouched).
                    // SAFETY: `lenp` is the caller's, checked non-null with `addr`.
                    None if !addr.is_null() => unsafe { *lenp = 0 },
                    None => {}
                }
                // MSG_TRUNC: a datagram's real length, as Linux returns it.
                let n = if flags & libc::MSG_TRUNC != 0 {
                    full
                } else {
                    got
                };
                Ok(ssize(n))
            }))
        })
    {
        return v;
    }
    // SAFETY: libc's recvfrom with the caller's arguments.
    unsafe { next::recvfrom()(fd, b, n, flags, addr, lenp) }
}

/// The fortified recvfrom.
///
/// # Safety
/// As recvfrom(2), with `buflen` the buffer's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    lenp: *mut socklen_t,
) -> ssize_t {
    if n <= buflen && linerate(fd).is_some() {
        // SAFETY: the caller's arguments, the length checked.
        return unsafe { recvfrom(fd, b, n, flags, addr, lenp) };
    }
    // SAFETY: libc's __recvfrom_chk with the caller's arguments.
    unsafe { next::__recvfrom_chk()(fd, b, n, buflen, flags, addr, lenp) }
}

/// The caller's iovec array as a slice.
///
/// # Safety
/// `iov` must point to `cnt` iovecs.
unsafe fn iovecs<'a>(iov: *const iovec, cnt: usize) -> R<&'a [iovec]> {
    if cnt > 1024 {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-null, `cnt` entries per the caller.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt) })
}

/// Reads into the pieces of `iov`: a stream fills them in order (waiting
/// only for the first bytes); a datagram is scattered over them.
fn recv_iov(c: &Core, iov: &[iovec], flags: c_int) -> R<(usize, Option<SocketAddr>, usize)> {
    if c.is_udp() {
        let total: usize = iov.iter().map(|v| v.iov_len).sum();
        return SCRATCH.with_borrow_mut(|s| {
            s.resize(total.min(65_536), 0);
            let (n, from, full) = c.recv(s, flags)?;
            let mut at = 0;
            for v in iov {
                if at >= n {
                    break;
                }
                let k = v.iov_len.min(n - at);
                // SAFETY: the caller's piece of `iov_len` bytes.
                let dst = unsafe { buf_mut(v.iov_base, k) }?;
                dst.copy_from_slice(s.get(at..at + k).unwrap_or_default());
                at += k;
            }
            Ok((n, from, full))
        });
    }
    let mut done = 0;
    for v in iov {
        // SAFETY: the caller's piece of `iov_len` bytes.
        let b = unsafe { buf_mut(v.iov_base, v.iov_len) }?;
        if b.is_empty() {
            continue;
        }
        let f = if done == 0 {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        match c.recv(b, f) {
            Ok((n, _, _)) => {
                done += n;
                if n < b.len() {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok((done, None, done))
}

/// Writes the pieces of `iov`: a stream in order, a datagram as one.
fn send_iov(c: &Core, iov: &[iovec], flags: c_int, to: Option<SocketAddr>) -> R<usize> {
    if c.is_udp() {
        return SCRATCH.with_borrow_mut(|s| {
            s.clear();
            for v in iov {
                // SAFETY: the caller's piece of `iov_len` bytes.
                s.extend_from_slice(unsafe { buf(v.iov_base, v.iov_len) }?);
            }
            c.send(s, flags, to)
        });
    }
    let mut done = 0;
    for v in iov {
        // SAFETY: the caller's piece of `iov_len` bytes.
        let b = unsafe { buf(v.iov_base, v.iov_len) }?;
        if b.is_empty() {
            continue;
        }
        let f = if done == 0 {
            flags
        } else {
            flags | libc::MSG_NOSIGNAL
        };
        match c.send(b, f, to) {
            Ok(n) => {
                done += n;
                if n < b.len() {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// readv(2).
///
/// # Safety
/// As readv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            let Ok(cnt) = usize::try_from(cnt) else {
                return Some(Err(libc::EINVAL));
            };
            // SAFETY: the caller's `cnt` iovecs.
            let iov = match unsafe { iovecs(iov, cnt) } {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            Some(recv_iov(&c, iov, 0).map(|r| ssize(r.0)))
        })
    {
        return v;
    }
    // SAFETY: libc's readv with the caller's arguments.
    unsafe { next::readv()(fd, iov, cnt) }
}

/// writev(2).
///
/// # Safety
/// As writev(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            let Ok(cnt) = usize::try_from(cnt) else {
                return Some(Err(libc::EINVAL));
            };
            // SAFETY: the caller's `cnt` iovecs.
            let iov = match unsafe { iovecs(iov, cnt) } {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            Some(send_iov(&c, iov, 0, None).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's writev with the caller's arguments.
    unsafe { next::writev()(fd, iov, cnt) }
}

/// recvmsg(2) (no control messages on linerate sockets: `msg_controllen` 0).
///
/// # Safety
/// As recvmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            if msg.is_null() {
                return Some(Err(libc::EFAULT));
            }
            // SAFETY: the caller's msghdr.
            let m = unsafe { &mut *msg };
            // SAFETY: the caller's iovecs.
            let iov = match unsafe { iovecs(m.msg_iov, m.msg_iovlen) } {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            Some(recv_iov(&c, iov, flags).and_then(|(n, from, full)| {
                if !m.msg_name.is_null() {
                    match from {
                        // SAFETY: the caller's name buffer of msg_namelen bytes.
                        Some(a) => unsafe { write_addr(a, m.msg_name.cast(), &mut m.msg_namelen) }?,
                        None => m.msg_namelen = 0,
                    }
                }
                m.msg_controllen = 0;
                m.msg_flags = if full > n { libc::MSG_TRUNC } else { 0 };
                Ok(ssize(n))
            }))
        })
    {
        return v;
    }
    // SAFETY: libc's recvmsg with the caller's arguments.
    unsafe { next::recvmsg()(fd, msg, flags) }
}

/// Decides an undecided UDP socket by its first destination; `Some` when
/// the call is then the library's answer (an error), `None` to go on.
fn decide_dest(c: &Core, fd: c_int, to: Option<SocketAddr>) -> Option<R<bool>> {
    if c.is_linerate() {
        return Some(Ok(true));
    }
    match to {
        Some(to) => Some(c.decide_by_sendto(fd, to)),
        None => Some(Ok(false)),
    }
}

/// sendto(2).
///
/// # Safety
/// As sendto(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    b: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            // A stream ignores the address, as Linux's TCP does (the
            // socket's own peer is the destination).
            let to = if addr.is_null() || !c.is_udp() {
                None
            } else {
                // SAFETY: the caller's address of `alen` bytes.
                match unsafe { read_addr(addr, alen) } {
                    Ok(a) => a,
                    Err(e) if c.is_linerate() => return Some(Err(e)),
                    Err(_) => return None,
                }
            };
            match decide_dest(&c, fd, to)? {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            // SAFETY: the caller's buffer of `n` bytes.
            let b = match unsafe { buf(b, n) } {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            Some(c.send(b, flags, to).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's sendto with the caller's arguments.
    unsafe { next::sendto()(fd, b, n, flags, addr, alen) }
}

/// send(2).
///
/// # Safety
/// As send(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, b: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if linerate(fd).is_some() {
        // SAFETY: forwards the caller's arguments.
        return unsafe { sendto(fd, b, n, flags, std::ptr::null(), 0) };
    }
    // SAFETY: libc's send with the caller's arguments.
    unsafe { next::send()(fd, b, n, flags) }
}

/// sendmsg(2) (control messages are ignored on linerate sockets).
///
/// # Safety
/// As sendmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            if msg.is_null() {
                return Some(Err(libc::EFAULT));
            }
            // SAFETY: the caller's msghdr.
            let m = unsafe { &*msg };
            let to = if m.msg_name.is_null() || !c.is_udp() {
                None
            } else {
                // SAFETY: the caller's name of msg_namelen bytes.
                match unsafe { read_addr(m.msg_name.cast(), m.msg_namelen) } {
                    Ok(a) => a,
                    Err(e) if c.is_linerate() => return Some(Err(e)),
                    Err(_) => return None,
                }
            };
            match decide_dest(&c, fd, to)? {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            // SAFETY: the caller's iovecs.
            let iov = match unsafe { iovecs(m.msg_iov, m.msg_iovlen) } {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            Some(send_iov(&c, iov, flags, to).map(ssize))
        })
    {
        return v;
    }
    // SAFETY: libc's sendmsg with the caller's arguments.
    unsafe { next::sendmsg()(fd, msg, flags) }
}

/// close(2).
///
/// # Safety
/// As close(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if ours(fd).is_some() {
        let _ = enter(0, || {
            Core::close(fd);
            None::<R<c_int>>
        });
    }
    // SAFETY: libc's close with the caller's argument.
    unsafe { next::close()(fd) }
}

/// shutdown(2).
///
/// # Safety
/// As shutdown(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || c.shutdown(how).map(|r| r.map(|()| 0)))
    {
        return v;
    }
    // SAFETY: libc's shutdown with the caller's arguments.
    unsafe { next::shutdown()(fd, how) }
}

/// getsockname(2).
///
/// # Safety
/// As getsockname(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(
    fd: c_int,
    addr: *mut sockaddr,
    lenp: *mut socklen_t,
) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            Some(c.sockname()?.and_then(|a| {
                // SAFETY: the caller's buffer of `*lenp` bytes.
                unsafe { write_addr(a, addr, lenp) }.map(|()| 0)
            }))
        })
    {
        return v;
    }
    // SAFETY: libc's getsockname with the caller's arguments.
    unsafe { next::getsockname()(fd, addr, lenp) }
}

/// getpeername(2).
///
/// # Safety
/// As getpeername(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(
    fd: c_int,
    addr: *mut sockaddr,
    lenp: *mut socklen_t,
) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            Some(c.peername()?.and_then(|a| {
                // SAFETY: the caller's buffer of `*lenp` bytes.
                unsafe { write_addr(a, addr, lenp) }.map(|()| 0)
            }))
        })
    {
        return v;
    }
    // SAFETY: libc's getpeername with the caller's arguments.
    unsafe { next::getpeername()(fd, addr, lenp) }
}

/// Copies `src` to the option buffer, cut to `*lenp`; `*lenp` becomes the
/// bytes written.
///
/// # Safety
/// `val` must point to `*lenp` writable bytes.
unsafe fn put_opt(src: &[u8], val: *mut c_void, lenp: *mut socklen_t) -> R<()> {
    // SAFETY: lenp checked non-null by the caller.
    let room = unsafe { *lenp } as c_int;
    if room < 0 {
        return Err(libc::EINVAL);
    }
    let n = (room as usize).min(src.len());
    // SAFETY: `n` bytes fit the caller's buffer.
    let dst = unsafe { buf_mut(val, n) }?;
    dst.copy_from_slice(src.get(..n).unwrap_or_default());
    // SAFETY: as above.
    unsafe { *lenp = n as socklen_t };
    Ok(())
}

fn timeval_of(t: Option<Duration>) -> libc::timeval {
    let t = t.unwrap_or_default();
    libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros()),
    }
}

fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: a plain C struct without padding holes that matter for a copy
    // to the caller; viewed for its size only.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// getsockopt(2).
///
/// # Safety
/// As getsockopt(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    lenp: *mut socklen_t,
) -> c_int {
    if let Some(c) = ours(fd)
        && let Some(v) = enter(-1, || {
            let got = c.getsockopt(level, name)?;
            if lenp.is_null() {
                return Some(Err(libc::EFAULT));
            }
            let r = match got {
                Err(e) => Err(e),
                // SAFETY: the caller's buffer of `*lenp` bytes.
                Ok(OptVal::Int(i)) => unsafe { put_opt(&i.to_ne_bytes(), val, lenp) },
                // SAFETY: as above.
                Ok(OptVal::Time(t)) => unsafe { put_opt(as_bytes(&timeval_of(t)), val, lenp) },
                Ok(OptVal::Linger(l)) => {
                    let lg = libc::linger {
                        l_onoff: c_int::from(l.is_some()),
                        l_linger: l.unwrap_or(0),
                    };
                    // SAFETY: as above.
                    unsafe { put_opt(as_bytes(&lg), val, lenp) }
                }
                Ok(OptVal::Str(s)) => {
                    let mut b = [0u8; 16];
                    let n = s.len().min(15);
                    if let (Some(d), Some(src)) = (b.get_mut(..n), s.as_bytes().get(..n)) {
                        d.copy_from_slice(src);
                    }
                    // SAFETY: as above.
                    unsafe { put_opt(b.get(..=n).unwrap_or_default(), val, lenp) }
                }
                Ok(OptVal::TcpInfo(i)) => {
                    // SAFETY: all-zero is a valid tcp_info.
                    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
                    ti.tcpi_state = i.state;
                    ti.tcpi_options = i.options;
                    // Two 4-bit fields in one byte: send scale low, receive high.
                    ti.tcpi_snd_rcv_wscale = (i.snd_wscale & 0xf) | (i.rcv_wscale & 0xf) << 4;
                    ti.tcpi_retransmits = i.retransmits;
                    ti.tcpi_rto = i.rto;
                    ti.tcpi_snd_mss = i.snd_mss;
                    ti.tcpi_unacked = i.unacked;
                    ti.tcpi_rtt = i.rtt;
                    ti.tcpi_rttvar = i.rttvar;
                    ti.tcpi_snd_ssthresh = i.snd_ssthresh;
                    ti.tcpi_snd_cwnd = i.snd_cwnd;
                    ti.tcpi_total_retrans = u32::from(i.retransmits);
                    ti.tcpi_min_rtt = i.min_rtt;
                    ti.tcpi_notsent_bytes = i.notsent_bytes;
                    // SAFETY: as above.
                    unsafe { put_opt(as_bytes(&ti), val, lenp) }
                }
            };
            Some(r.map(|()| 0))
        })
    {
        return v;
    }
    // SAFETY: libc's getsockopt with the caller's arguments.
    unsafe { next::getsockopt()(fd, level, name, val, lenp) }
}

/// setsockopt(2).
///
/// # Safety
/// As setsockopt(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            if val.is_null() && len > 0 {
                return Some(Err(libc::EFAULT));
            }
            let len = len as usize;
            let v = match Core::opt_shape(level, name) {
                OptShape::Int if len >= size_of::<c_int>() => {
                    // SAFETY: at least an int's bytes at `val`.
                    OptSet::Int(unsafe { val.cast::<c_int>().read_unaligned() })
                }
                OptShape::Time if len >= size_of::<libc::timeval>() => {
                    // SAFETY: at least a timeval's bytes at `val`.
                    let tv = unsafe { val.cast::<libc::timeval>().read_unaligned() };
                    if tv.tv_usec < 0 || tv.tv_usec >= 1_000_000 {
                        return Some(Err(libc::EDOM));
                    }
                    OptSet::Time(if tv.tv_sec < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0) {
                        None
                    } else {
                        Some(
                            Duration::from_secs(tv.tv_sec as u64)
                                + Duration::from_micros(tv.tv_usec as u64),
                        )
                    })
                }
                OptShape::Linger if len >= size_of::<libc::linger>() => {
                    // SAFETY: at least a linger's bytes at `val`.
                    let l = unsafe { val.cast::<libc::linger>().read_unaligned() };
                    OptSet::Linger(l.l_onoff != 0, l.l_linger)
                }
                _ => OptSet::Short,
            };
            c.setsockopt(level, name, v).map(|r| r.map(|()| 0))
        })
    {
        return v;
    }
    // SAFETY: libc's setsockopt with the caller's arguments.
    unsafe { next::setsockopt()(fd, level, name, val, len) }
}

/// After the kernel duplicated a linerate socket's fd into `new`.
fn dup_done(c: &Arc<Core>, new: c_int) {
    if new >= 0 {
        // The duplicate of a placeholder is close-on-exec too, whatever
        // the program asked (it reads its own setting back from fcntl).
        // SAFETY: a flag on the descriptor dup just made.
        unsafe { next::fcntl()(new, libc::F_SETFD, libc::FD_CLOEXEC) };
        let _ = enter(0, || {
            c.dup_to(new);
            None::<R<c_int>>
        });
    }
}

fn fcntl_impl(
    fd: c_int,
    cmd: c_int,
    arg: c_ulong,
    real: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
) -> c_int {
    if let Some(c) = linerate(fd) {
        if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
            // SAFETY: libc's fcntl duplicating the placeholder.
            let new = unsafe { real(fd, cmd, arg as c_int) };
            dup_done(&c, new);
            return new;
        }
        if let Some(v) = enter(-1, || c.fcntl(cmd, arg as c_int)) {
            return v;
        }
    }
    // SAFETY: libc's fcntl with the caller's arguments (an int or a pointer,
    // passed in the same register).
    unsafe { real(fd, cmd, arg) }
}

/// fcntl(2): O_NONBLOCK and FD_CLOEXEC are kept per linerate socket, F_DUPFD
/// duplicates it; the rest act on the placeholder.
///
/// # Safety
/// As fcntl(2) (the variadic argument read as one integer or pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, next::fcntl())
}

/// fcntl64, the name glibc's headers use with 64-bit file offsets.
///
/// # Safety
/// As fcntl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, next::fcntl64())
}

/// ioctl(2): FIONBIO, FIONREAD, FIOCLEX and FIONCLEX on linerate sockets.
///
/// # Safety
/// As ioctl(2) (the variadic argument read as one pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if let Some(c) = linerate(fd)
        && let Some(v) = enter(-1, || {
            let p = arg.cast::<c_int>();
            match req {
                libc::FIONBIO => {
                    if p.is_null() {
                        return Some(Err(libc::EFAULT));
                    }
                    // SAFETY: the caller's int.
                    let on = unsafe { p.read_unaligned() } != 0;
                    c.set_nonblock(on).map(|r| r.map(|()| 0))
                }
                // Close-on-exec as the program sees it; the placeholder
                // itself stays close-on-exec (exec starts clean: a new
                // image has no runtime to serve an inherited socket).
                libc::FIOCLEX => c.fcntl(libc::F_SETFD, libc::FD_CLOEXEC),
                libc::FIONCLEX => c.fcntl(libc::F_SETFD, 0),
                libc::FIONREAD => {
                    if p.is_null() {
                        return Some(Err(libc::EFAULT));
                    }
                    Some(c.readable_bytes()?.map(|n| {
                        // SAFETY: the caller's int.
                        unsafe { p.write_unaligned(n) };
                        0
                    }))
                }
                _ => None,
            }
        })
    {
        return v;
    }
    // SAFETY: libc's ioctl with the caller's arguments.
    unsafe { next::ioctl()(fd, req, arg) }
}

/// dup(2).
///
/// # Safety
/// As dup(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: libc's dup with the caller's argument.
    let new = unsafe { next::dup()(fd) };
    if let Some(c) = linerate(fd) {
        dup_done(&c, new);
    }
    new
}

/// dup3(2) and dup2(2): a linerate socket at `new` is closed first, as the
/// kernel closes what was there.
fn dup_into(old: c_int, new: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if old != new && ours(new).is_some() {
        let _ = enter(0, || {
            Core::close(new);
            None::<R<c_int>>
        });
    }
    let r = real();
    if r >= 0
        && old != new
        && let Some(c) = linerate(old)
    {
        dup_done(&c, r);
    }
    r
}

/// dup2(2).
///
/// # Safety
/// As dup2(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: libc's dup2 with the caller's arguments.
    dup_into(old, new, || unsafe { next::dup2()(old, new) })
}

/// dup3(2).
///
/// # Safety
/// As dup3(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: libc's dup3 with the caller's arguments.
    dup_into(old, new, || unsafe { next::dup3()(old, new, flags) })
}

mod more;
