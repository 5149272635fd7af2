//! The operating-system edge of the AF_XDP backend that xsk-rs does not cover:
//! the interface's queue count and MTU (ioctls on a datagram socket, so they
//! answer for the calling thread's network namespace), and the BPF file system
//! libxdp pins its dispatcher in. Each call is a small safe wrapper around one
//! `unsafe` block.

pub(crate) use crate::sys::mtu;
use crate::sys::{control_socket, ifreq, ioctl_ifreq, no_such_interface};
use std::ffi::CStr;
use std::io;

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::Ioctl = 0x8946;
/// `ETHTOOL_GCHANNELS` (linux/ethtool.h).
const ETHTOOL_GCHANNELS: u32 = 0x3c;
/// `BPF_FS_MAGIC` (linux/magic.h): `statfs` of a mounted bpffs.
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;

/// `struct ethtool_channels` (linux/ethtool.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// How many queues an AF_XDP socket may bind to on the interface: its combined
/// channels plus the larger of its receive-only and transmit-only ones
/// (`ethtool -l`). `None` when the driver does not report channels.
pub(crate) fn queues(name: &str) -> io::Result<Option<u32>> {
    let fd = control_socket()?;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_data = std::ptr::from_mut(&mut channels).cast();
    match ioctl_ifreq(&fd, SIOCETHTOOL, &mut req) {
        Ok(()) => Ok(Some(
            channels.combined_count + channels.rx_count.max(channels.tx_count),
        )),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(no_such_interface(name, e)),
    }
}

/// True if `path` is a mounted BPF file system.
pub(crate) fn is_bpffs(path: &CStr) -> io::Result<bool> {
    #[allow(unsafe_code)]
    // SAFETY: an all-zero `struct statfs` is a valid value (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    #[allow(unsafe_code)]
    // SAFETY: `path` is NUL-terminated and `st` is a live `struct statfs`.
    let rc = unsafe { libc::statfs(path.as_ptr(), &raw mut st) };
    match check(rc) {
        #[allow(clippy::unnecessary_cast)] // f_type is i64 or u32 depending on the libc
        Ok(_) => Ok(st.f_type as u64 & 0xffff_ffff == BPF_FS_MAGIC),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Mounts a BPF file system at `path` (`mount -t bpf bpf <path>`) unless one is
/// there; `Ok(true)` if it mounted one now.
pub(crate) fn ensure_bpffs(path: &CStr) -> io::Result<bool> {
    if is_bpffs(path)? {
        return Ok(false);
    }
    let dir = std::path::Path::new(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()),
    );
    std::fs::create_dir_all(dir)?;
    #[allow(unsafe_code)]
    // SAFETY: every string is NUL-terminated and lives for the call; no data.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            path.as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    check(rc)?;
    Ok(true)
}

/// `SIOCGIFINDEX` (linux/sockios.h).
const SIOCGIFINDEX: libc::Ioctl = 0x8933;

/// The interface's index in the calling thread's network namespace.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    ioctl_ifreq(&fd, SIOCGIFINDEX, &mut req).map_err(|e| no_such_interface(name, e))?;
    #[allow(unsafe_code)]
    // SAFETY: SIOCGIFINDEX succeeded, so the kernel wrote the `ifru_ifindex` member.
    let index = unsafe { req.ifr_ifru.ifru_ifindex };
    u32::try_from(index).map_err(|_| io::Error::other(format!("{name}: index {index}")))
}

/// `SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`
/// (asm-generic/socket.h).
const SO_BUSY_POLL: libc::c_int = 46;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
/// `SOL_XDP` (linux/socket.h), `XDP_OPTIONS` and `XDP_OPTIONS_ZEROCOPY`
/// (linux/if_xdp.h).
const SOL_XDP: libc::c_int = 283;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

fn set_int(fd: libc::c_int, level: libc::c_int, name: libc::c_int, value: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    #[allow(unsafe_code)]
    // SAFETY: `v` is a live int and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const v).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(rc).map(|_| ())
}

fn get_u32(fd: libc::c_int, level: libc::c_int, name: libc::c_int) -> io::Result<u32> {
    let mut v: u32 = 0;
    let mut len = core::mem::size_of::<u32>() as libc::socklen_t;
    #[allow(unsafe_code)]
    // SAFETY: `v` and `len` are live and `len` is `v`'s size.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &raw mut len) };
    check(rc).map(|_| v)
}

/// Preferred busy polling on an AF_XDP socket: `SO_PREFER_BUSY_POLL`,
/// `SO_BUSY_POLL` (microseconds) and `SO_BUSY_POLL_BUDGET` (packets).
pub(crate) fn set_busy_poll(
    fd: libc::c_int,
    prefer: bool,
    usecs: u32,
    budget: u16,
) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, u32::from(prefer))?;
    set_int(fd, libc::SOL_SOCKET, SO_BUSY_POLL, usecs)?;
    set_int(fd, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, u32::from(budget))
}

/// The socket's `SO_BUSY_POLL` (microseconds).
pub(crate) fn busy_poll(fd: libc::c_int) -> io::Result<u32> {
    get_u32(fd, libc::SOL_SOCKET, SO_BUSY_POLL)
}

/// Whether the socket is bound zero-copy (`XDP_OPTIONS_ZEROCOPY`).
pub(crate) fn zero_copy(fd: libc::c_int) -> io::Result<bool> {
    get_u32(fd, SOL_XDP, XDP_OPTIONS).map(|o| o & XDP_OPTIONS_ZEROCOPY != 0)
}

/// Drives the socket's receive in busy-poll mode (a non-blocking
/// `recvfrom` with no buffer, as libxdp's samples do): the kernel polls the
/// device's queue in this call.
pub(crate) fn busy_poll_kick(fd: libc::c_int) {
    #[allow(unsafe_code)]
    // SAFETY: no buffer and no address: the kernel writes nothing.
    let _ = unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}
