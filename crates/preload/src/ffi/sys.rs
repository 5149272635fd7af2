//! Safe wrappers over the system calls of the placeholder and the waits.

use super::*;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;

/// Sleeps while `*seq == expected`, at most `timeout`. `Err(EINTR)` if a
/// signal arrived.
pub(crate) fn futex_wait(seq: &AtomicU32, expected: u32, timeout: Option<Duration>) -> R<()> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos().min(999_999_999) as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `seq` is a live u32; the timespec outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            seq.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            tsp,
        )
    };
    if r == -1 && errno() == libc::EINTR {
        return Err(libc::EINTR);
    }
    Ok(())
}

/// Wakes every thread in [`futex_wait`] on `seq`.
pub(crate) fn futex_wake(seq: &AtomicU32) {
    // SAFETY: `seq` is a live u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            seq.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            c_int::MAX,
        )
    };
}

/// Reads and throws away what `fd` has queued.
fn drain(fd: c_int) {
    let mut b = [0u8; 4096];
    loop {
        // SAFETY: `b` is writable for its length.
        let n = unsafe { next::recv()(fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
        if n < b.len() as ssize_t {
            return;
        }
    }
}

/// Makes the placeholder `fd` unwritable: its send buffer full.
fn fill(fd: c_int) {
    static ZEROS: [u8; 16384] = [0; 16384];
    for _ in 0..8 {
        // SAFETY: a static buffer, readable.
        let n = unsafe {
            next::send()(
                fd,
                ZEROS.as_ptr().cast(),
                ZEROS.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < ZEROS.len() as ssize_t {
            return;
        }
    }
}

/// Moves the placeholder `fd` (peer `b`) from showing `cur` (readable,
/// writable) to showing `want`.
pub(crate) fn show(fd: c_int, b: &OwnedFd, cur: (bool, bool), want: (bool, bool)) {
    use std::os::fd::AsRawFd;
    let b = b.as_raw_fd();
    if want.0 != cur.0 {
        if want.0 {
            // SAFETY: one readable byte.
            unsafe {
                next::send()(
                    b,
                    [1u8].as_ptr().cast(),
                    1,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
        } else {
            drain(fd);
        }
    }
    if want.1 != cur.1 {
        if want.1 {
            drain(b);
        } else {
            fill(fd);
        }
    }
}

fn pair() -> R<(c_int, c_int)> {
    let mut sv = [0 as c_int; 2];
    // SAFETY: `sv` has room for the two fds.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(errno());
    }
    let small: c_int = 4096;
    // SAFETY: an int option value of its size.
    unsafe {
        next::setsockopt()(
            sv[0],
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&raw const small).cast(),
            size_of::<c_int>() as socklen_t,
        )
    };
    Ok((sv[0], sv[1]))
}

/// A new placeholder: the program's fd and the library's end.
pub(crate) fn placeholder_new() -> R<(c_int, OwnedFd)> {
    let (a, b) = pair()?;
    // SAFETY: `b` is a fresh fd nobody else owns.
    Ok((a, unsafe { OwnedFd::from_raw_fd(b) }))
}

/// Puts a placeholder under the number `fd` (closing the kernel socket
/// there); returns the library's end.
pub(crate) fn placeholder_over(fd: c_int) -> R<OwnedFd> {
    let (a, b) = pair()?;
    // SAFETY: plain fd calls on fds this function holds, and `fd`, which
    // the caller's table entry owns.
    unsafe {
        if next::dup3()(a, fd, libc::O_CLOEXEC) < 0 {
            let e = errno();
            next::close()(a);
            next::close()(b);
            return Err(e);
        }
        next::close()(a);
        Ok(OwnedFd::from_raw_fd(b))
    }
}

fn int_opt(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: an int and its length.
    let r = unsafe { next::getsockopt()(fd, level, name, (&raw mut v).cast(), &mut len) };
    (r == 0).then_some(v)
}

fn time_opt(fd: c_int, name: c_int) -> Option<Duration> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = size_of::<libc::timeval>() as socklen_t;
    // SAFETY: a timeval and its length.
    let r =
        unsafe { next::getsockopt()(fd, libc::SOL_SOCKET, name, (&raw mut tv).cast(), &mut len) };
    if r != 0 || (tv.tv_sec == 0 && tv.tv_usec == 0) {
        return None;
    }
    Some(
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64),
    )
}

/// The flags and options the program set on the kernel socket `fd`:
/// non-blocking, close-on-exec, options.
pub(crate) fn kernel_state(fd: c_int) -> (bool, bool, sock::Opts) {
    // SAFETY: fcntl queries on an fd.
    let (fl, fdfl) = unsafe {
        (
            next::fcntl()(fd, libc::F_GETFL),
            next::fcntl()(fd, libc::F_GETFD),
        )
    };
    let flag = |level, name| int_opt(fd, level, name).is_some_and(|v| v != 0);
    let opts = sock::Opts {
        reuseaddr: flag(libc::SOL_SOCKET, libc::SO_REUSEADDR),
        reuseport: flag(libc::SOL_SOCKET, libc::SO_REUSEPORT),
        keepalive: flag(libc::SOL_SOCKET, libc::SO_KEEPALIVE),
        keepidle: int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
        keepintvl: int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
        keepcnt: int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
        nodelay: flag(libc::IPPROTO_TCP, libc::TCP_NODELAY),
        v6only: flag(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY),
        rcvtimeo: time_opt(fd, libc::SO_RCVTIMEO),
        sndtimeo: time_opt(fd, libc::SO_SNDTIMEO),
        ..sock::Opts::default()
    };
    (
        fl >= 0 && fl & libc::O_NONBLOCK != 0,
        fdfl >= 0 && fdfl & libc::FD_CLOEXEC != 0,
        opts,
    )
}

/// `bind` on the kernel socket `fd`.
pub(crate) fn kernel_bind(fd: c_int, a: SocketAddr) -> R<()> {
    let (ss, len) = encode(a);
    // SAFETY: a valid address of `len` bytes.
    let r = unsafe { next::bind()(fd, (&raw const ss).cast(), len) };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// The port the kernel socket `fd` is bound to.
pub(crate) fn kernel_port(fd: c_int) -> Option<u16> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: the storage and its length.
    let r = unsafe { next::getsockname()(fd, (&raw mut ss).cast(), &mut len) };
    if r != 0 {
        return None;
    }
    // SAFETY: the kernel wrote an address of `len` bytes.
    unsafe { read_addr((&raw const ss).cast(), len) }
        .ok()
        .flatten()
        .map(|a| a.port())
}

/// SIGPIPE to the calling thread, as a write to a closed stream raises.
pub(crate) fn raise_sigpipe() {
    // SAFETY: raise has no memory preconditions.
    unsafe { libc::raise(libc::SIGPIPE) };
}

/// What the kernel says of interface `name` in the calling thread's network
/// namespace: its Ethernet address, MTU and addresses (`getifaddrs(3)`, which
/// asks over rtnetlink, and `SIOCGIFMTU`).
pub(crate) fn interface(name: &str) -> std::io::Result<crate::config::Interface> {
    use std::io::{Error, ErrorKind};
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(Error::new(ErrorKind::InvalidInput, "not an interface name"));
    }
    let mut found = crate::config::Interface::default();
    let mut seen = false;
    let mut list: *mut libc::ifaddrs = null_mut();
    // SAFETY: getifaddrs writes a list head it allocated into `list`.
    if unsafe { libc::getifaddrs(&raw mut list) } != 0 {
        return Err(Error::last_os_error());
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: a live node of the list getifaddrs made (freed below).
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if n.to_bytes() != name.as_bytes() || ifa.ifa_addr.is_null() {
            continue;
        }
        seen = true;
        // SAFETY: ifa_addr points at a sockaddr of the family it says.
        let family = c_int::from(unsafe { (*ifa.ifa_addr).sa_family });
        match family {
            libc::AF_PACKET => {
                // SAFETY: an AF_PACKET address is a sockaddr_ll.
                let ll = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_ll>() };
                if ll.sll_halen == 6 {
                    found.mac.copy_from_slice(&ll.sll_addr[..6]);
                }
            }
            libc::AF_INET | libc::AF_INET6 => {
                // SAFETY: the address and its netmask, both of `family`
                // (the mask may be absent).
                let a = unsafe { read_addr(ifa.ifa_addr, size_of::<libc::sockaddr_in6>() as _) };
                let mask = if ifa.ifa_netmask.is_null() {
                    None
                } else {
                    // SAFETY: as above.
                    unsafe { read_addr(ifa.ifa_netmask, size_of::<libc::sockaddr_in6>() as _) }
                        .ok()
                        .flatten()
                };
                let len = |m: Option<SocketAddr>| -> u8 {
                    match m.map(|m| m.ip()) {
                        Some(std::net::IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
                        Some(std::net::IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
                        None => 0,
                    }
                };
                match a {
                    Ok(Some(SocketAddr::V4(v4))) => found.ipv4.push((*v4.ip(), len(mask))),
                    Ok(Some(SocketAddr::V6(v6))) => found.ipv6.push((*v6.ip(), len(mask))),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    // SAFETY: the list getifaddrs made, freed once.
    unsafe { libc::freeifaddrs(list) };
    if !seen {
        return Err(Error::new(ErrorKind::NotFound, "no such interface"));
    }
    // SAFETY: socket(2) takes plain integers; the result is checked.
    let s = unsafe { next::socket()(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: `s` was just made and is owned by nothing else.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: an all-zero ifreq is valid (a name and a union of integers).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name and writes the MTU into the live ifreq.
    let r = unsafe {
        next::ioctl()(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SIOCGIFMTU as c_ulong,
            &raw mut req,
        )
    };
    if r != 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled the union's MTU member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    found.mtu = u32::try_from(mtu).unwrap_or(0);
    Ok(found)
}

/// Marks the calling thread as the library's own: its calls go to libc
/// untouched (linerate-rt's queue threads, from their first instruction).
pub(crate) fn library_thread() {
    let _ = INSIDE.try_with(|i| i.set(true));
}

/// Process ids in memory shared with every process forked after it was
/// made (`MAP_SHARED | MAP_ANONYMOUS`): the queues kept for forked children
/// (`nic.children`), each held by the child serving it (0: free). Never
/// unmapped: it lives as long as the program.
pub(crate) struct Slots {
    slots: &'static [std::sync::atomic::AtomicI32],
}

impl Slots {
    /// `len` free slots.
    pub(crate) fn new(len: usize) -> std::io::Result<Slots> {
        let bytes = len.max(1) * std::mem::size_of::<std::sync::atomic::AtomicI32>();
        // SAFETY: an anonymous mapping: no descriptor, no address asked for.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the mapping is `bytes` long, page-aligned (so aligned for
        // AtomicI32), zeroed by the kernel (0 is a valid AtomicI32), and
        // never unmapped, so the slice is valid for 'static; it is only
        // accessed through atomics, also by the other processes sharing it.
        let slots = unsafe {
            std::slice::from_raw_parts(p.cast::<std::sync::atomic::AtomicI32>().cast_const(), len)
        };
        Ok(Slots { slots })
    }

    /// The slots.
    pub(crate) fn all(&self) -> &'static [std::sync::atomic::AtomicI32] {
        self.slots
    }
}

/// This process's id.
pub(crate) fn pid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::getpid() }
}

/// Whether process `pid` exists and has not exited (a zombie has).
pub(crate) fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; only the existence check is made.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc != 0 && errno() != libc::EPERM {
        return false;
    }
    // The state is the field after the command's closing parenthesis.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
