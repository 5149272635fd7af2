//! The operating-system edge: every system call of this crate, each a small safe
//! wrapper around one `unsafe` block.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `SIOCGIFMTU` (linux/sockios.h).
const SIOCGIFMTU: libc::Ioctl = 0x8921;
/// `SIOCSIFMTU` (linux/sockios.h).
const SIOCSIFMTU: libc::Ioctl = 0x8922;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Waits up to `timeout` for `fd` to poll readable; `Ok(true)` if it does.
pub(crate) fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        #[allow(unsafe_code)]
        // SAFETY: `pfd` is a valid pollfd and the count (1) matches it.
        let rc = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        match check(rc) {
            Ok(n) => return Ok(n > 0 && pfd.revents & libc::POLLIN != 0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Waits up to `timeout` for any of `fds` to poll readable; `Ok(true)` if one does.
pub(crate) fn poll_any_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let n = libc::nfds_t::try_from(pfds.len()).unwrap_or(libc::nfds_t::MAX);
    loop {
        #[allow(unsafe_code)]
        // SAFETY: `pfds` is a valid array of at least `n` pollfd structs.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), n, ms) };
        match check(rc) {
            Ok(n) => return Ok(n > 0 && pfds.iter().any(|p| p.revents & libc::POLLIN != 0)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Opens `path` read-write, non-blocking, close-on-exec.
pub(crate) fn open_rw_nonblock(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    #[allow(unsafe_code)]
    // SAFETY: `path` is a valid NUL-terminated string; the flags are plain bits.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    let fd = check(fd)?;
    #[allow(unsafe_code)]
    // SAFETY: `fd` was just returned by open(2), is valid, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub(crate) fn set_nonblocking(fd: &impl AsRawFd, on: bool) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: fcntl on a valid descriptor; no pointers.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    #[allow(unsafe_code)]
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// `ioctl(fd, request, &mut *arg)`: an ioctl whose argument is a pointer to `T`.
pub(crate) fn ioctl_ptr<T>(fd: &OwnedFd, request: libc::Ioctl, arg: &mut T) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: `arg` points to a live, properly aligned `T` for the duration of the
    // call; the caller pairs each request with the type the kernel expects for it
    // (a `struct ifreq` for TUNSETIFF, an `int` for TUNSETVNETHDRSZ/TUNSETVNETLE).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, std::ptr::from_mut(arg)) };
    check(rc).map(|_| ())
}

/// `ioctl(fd, request, buf)`: an ioctl whose argument is a structure of
/// variable length the caller laid out in `buf` (TUNSETTXFILTER's `struct
/// tun_filter`: flags, count, then `count` addresses).
pub(crate) fn ioctl_buf(fd: &OwnedFd, request: libc::Ioctl, buf: &mut [u8]) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: `buf` is live and writable for the whole call; the kernel reads
    // at most its length (the caller sizes it for the count it declares).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, buf.as_mut_ptr()) };
    check(rc).map(|_| ())
}

/// `ioctl(fd, request, value)`: an ioctl whose argument is passed by value
/// (TUNSETOFFLOAD takes the flags as an `unsigned long`).
pub(crate) fn ioctl_val(
    fd: &OwnedFd,
    request: libc::Ioctl,
    value: libc::c_ulong,
) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: the argument is an integer; the kernel reads no memory through it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, value) };
    check(rc).map(|_| ())
}

/// Runs `call` (a system call returning a byte count or -1) until it is not
/// interrupted: `Ok(Some(n))` for `n` bytes, `Ok(None)` when it would block.
fn retry(mut call: impl FnMut() -> isize) -> io::Result<Option<usize>> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(Some(n.unsigned_abs()));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// One read(2) into `buf`; `Ok(None)` when it would block.
pub(crate) fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    retry(|| {
        #[allow(unsafe_code)]
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        unsafe {
            libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
        }
    })
}

/// Most buffers [`writev_all`] passes to the kernel in one call.
pub(crate) const MAX_IOV: usize = 16;

/// `writev(2)` of `head` then every one of `rest` (at most `MAX_IOV - 1`:
/// `EINVAL` if more): one write of their concatenation, gathered by the
/// kernel. `Ok(None)` if the fd would block.
pub(crate) fn writev_all<T: AsRef<[u8]>>(
    fd: &OwnedFd,
    head: &[u8],
    rest: &[T],
) -> io::Result<Option<usize>> {
    if rest.len() >= MAX_IOV {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let empty = libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; MAX_IOV];
    let bufs = core::iter::once(head).chain(rest.iter().map(AsRef::as_ref));
    for (v, b) in iov.iter_mut().zip(bufs) {
        *v = libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        };
    }
    let count = 1 + rest.len();
    retry(|| {
        #[allow(unsafe_code)]
        // SAFETY: the first `count` iovecs of `iov` each point at a borrowed
        // slice valid for reads of its length, which outlives the call;
        // writev only reads them.
        unsafe {
            libc::writev(fd.as_raw_fd(), iov.as_ptr(), count as libc::c_int)
        }
    })
}

/// One write(2) of `buf`; `Ok(None)` when it would block.
pub(crate) fn write(fd: &OwnedFd, buf: &[u8]) -> io::Result<Option<usize>> {
    retry(|| {
        #[allow(unsafe_code)]
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        unsafe {
            libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len())
        }
    })
}

/// A `struct ifreq` naming `name`, the union zeroed.
pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    crate::error::check_ifname(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let bytes = name.as_bytes();
    let mut req = libc::ifreq {
        ifr_name: [0; libc::IFNAMSIZ],
        ifr_ifru: libc::__c_anonymous_ifr_ifru { ifru_mtu: 0 },
    };
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// A datagram socket to ask interface ioctls through.
pub(crate) fn control_socket() -> io::Result<OwnedFd> {
    #[allow(unsafe_code)]
    // SAFETY: socket(2) takes plain integers and returns a new descriptor or -1.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    #[allow(unsafe_code)]
    // SAFETY: `fd` was just returned by socket(2), is valid, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ioctl(fd, request, req)` with a `struct ifreq`.
pub(crate) fn ioctl_ifreq(
    fd: &OwnedFd,
    request: libc::Ioctl,
    req: &mut libc::ifreq,
) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: `req` is a live, aligned `struct ifreq` for the whole call, which is
    // what SIOCGIFMTU, SIOCSIFMTU and SIOCETHTOOL take; for SIOCETHTOOL its data pointer
    // points at a live `struct ethtool_channels` (see `queues`).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, std::ptr::from_mut(req)) };
    check(rc).map(|_| ())
}

/// The interface's MTU. `NotFound` if there is no such interface here.
pub(crate) fn mtu(name: &str) -> io::Result<u32> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    ioctl_ifreq(&fd, SIOCGIFMTU, &mut req).map_err(|e| no_such_interface(name, e))?;
    #[allow(unsafe_code)]
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other(format!("{name}: MTU {mtu}")))
}

/// Sets the interface's MTU (needs `CAP_NET_ADMIN`). `NotFound` if there is
/// no such interface here.
pub(crate) fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("MTU {mtu}")))?;
    ioctl_ifreq(&fd, SIOCSIFMTU, &mut req).map_err(|e| no_such_interface(name, e))
}

/// `ENODEV` says the interface is missing: say which.
pub(crate) fn no_such_interface(name: &str, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ENODEV) {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name:?} in this network namespace"),
        )
    } else {
        e
    }
}

/// A new epoll instance (close-on-exec), whose descriptor polls readable when
/// any descriptor added to it does.
pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    #[allow(unsafe_code)]
    // SAFETY: epoll_create1 takes a flag word and returns a new descriptor.
    let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    #[allow(unsafe_code)]
    // SAFETY: `fd` was just returned by epoll_create1 and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds `fd` to the epoll instance `ep`, watched for `EPOLLIN`.
pub(crate) fn epoll_add(ep: &OwnedFd, fd: RawFd) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: u64::try_from(fd).unwrap_or(0),
    };
    #[allow(unsafe_code)]
    // SAFETY: `ep` is an epoll descriptor, `ev` a valid epoll_event.
    check(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) })?;
    Ok(())
}

// bpf(2) commands (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_PROG_LOAD: libc::c_int = 5;

/// `bpf(2)`'s `union bpf_attr`, as 16 words: every command used here fits
/// in its first 128 bytes, and the kernel takes trailing zeros.
pub(crate) type BpfAttr = [u64; 16];

/// `bpf(cmd, attr, sizeof attr)`. The caller lays out `attr` for `cmd`;
/// every pointer it puts there points at memory it keeps alive and
/// correctly sized across the call (the functions below).
fn bpf(cmd: libc::c_int, attr: &mut BpfAttr) -> io::Result<libc::c_long> {
    #[allow(unsafe_code)]
    // SAFETY: `attr` is live and writable for its whole size, which is passed;
    // the pointers inside it are valid per each caller (see below).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            core::mem::size_of::<BpfAttr>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Two 32-bit fields in one attr word, in the kernel's (native) layout.
fn pair(lo: u32, hi: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&lo.to_ne_bytes());
    b[4..].copy_from_slice(&hi.to_ne_bytes());
    u64::from_ne_bytes(b)
}

fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(rc).map_err(|_| io::Error::other("bpf: descriptor out of range"))?;
    #[allow(unsafe_code)]
    // SAFETY: bpf(2) just returned `fd`, a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `BPF_MAP_CREATE` (close-on-exec, as every bpf descriptor), with
/// `map_flags` (`BPF_F_NO_PREALLOC`, ...).
pub(crate) fn bpf_map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr: BpfAttr = [0; 16];
    attr[0] = pair(map_type, key_size);
    attr[1] = pair(value_size, max_entries);
    attr[2] = pair(map_flags, 0);
    owned(bpf(BPF_MAP_CREATE, &mut attr)?)
}

/// `BPF_PROG_LOAD` of `insns` (8 bytes each), the verifier's log in `log`.
pub(crate) fn bpf_prog_load(
    prog_type: u32,
    insns: &[[u8; 8]],
    license: &std::ffi::CStr,
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    let count =
        u32::try_from(insns.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut attr: BpfAttr = [0; 16];
    attr[0] = pair(prog_type, count);
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    let log_len = u32::try_from(log.len()).unwrap_or(u32::MAX);
    attr[3] = pair(u32::from(!log.is_empty()), log_len);
    attr[4] = log.as_mut_ptr() as u64;
    // `insns`, `license` and `log` are borrowed for the call: the pointers
    // above stay valid until it returns.
    owned(bpf(BPF_PROG_LOAD, &mut attr)?)
}

/// `BPF_MAP_UPDATE_ELEM`: `key` to `value` (sized as the map's), `flags`
/// `BPF_ANY`/`BPF_NOEXIST`/`BPF_EXIST`.
pub(crate) fn bpf_map_update(
    map: &OwnedFd,
    key: &[u8],
    value: &[u8],
    flags: u64,
) -> io::Result<()> {
    let mut attr: BpfAttr = [0; 16];
    attr[0] = u64::from(map.as_raw_fd().unsigned_abs());
    attr[1] = key.as_ptr() as u64;
    attr[2] = value.as_ptr() as u64;
    attr[3] = flags;
    // The kernel reads the map's key and value sizes from `key` and `value`:
    // callers pass slices of exactly those sizes.
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// `BPF_MAP_LOOKUP_ELEM`: `Ok(true)` with the value in `value` (sized as the
/// map's values), `Ok(false)` if there is no such key.
pub(crate) fn bpf_map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr: BpfAttr = [0; 16];
    attr[0] = u64::from(map.as_raw_fd().unsigned_abs());
    attr[1] = key.as_ptr() as u64;
    attr[2] = value.as_mut_ptr() as u64;
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_DELETE_ELEM`: `Ok(false)` if there was no such key.
pub(crate) fn bpf_map_delete(map: &OwnedFd, key: &[u8]) -> io::Result<bool> {
    let mut attr: BpfAttr = [0; 16];
    attr[0] = u64::from(map.as_raw_fd().unsigned_abs());
    attr[1] = key.as_ptr() as u64;
    match bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_GET_NEXT_KEY`: the key after `key` (the first with `None`) in
/// `next`; `Ok(false)` at the end.
pub(crate) fn bpf_map_next_key(
    map: &OwnedFd,
    key: Option<&[u8]>,
    next: &mut [u8],
) -> io::Result<bool> {
    let mut attr: BpfAttr = [0; 16];
    attr[0] = u64::from(map.as_raw_fd().unsigned_abs());
    attr[1] = key.map_or(0, |k| k.as_ptr() as u64);
    attr[2] = next.as_mut_ptr() as u64;
    match bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}
