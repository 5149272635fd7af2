//! Ports held in the kernel's stack for linerate, as Onload does: a kernel
//! socket bound to the shared address and the port (TCP: bound, not
//! listening; UDP: bound). While it is open the kernel neither hands the port
//! out as an ephemeral port (a port bound explicitly is skipped by
//! `inet_hash_connect`) nor lets a kernel program bind it, so the two stacks
//! never pick the same 4-tuple. The socket is made in the interface's network
//! namespace ([`NetNs`]), whichever thread claims the port.

use crate::claims::{ClaimError, L4};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A network namespace, held open (`/proc/thread-self/ns/net`).
#[derive(Debug)]
pub(crate) struct NetNs(OwnedFd);

impl NetNs {
    /// The calling thread's network namespace.
    pub(crate) fn current() -> io::Result<NetNs> {
        Ok(NetNs(
            std::fs::File::open("/proc/thread-self/ns/net")?.into(),
        ))
    }

    /// Device and inode: equal for the same namespace.
    fn id(&self) -> io::Result<(u64, u64)> {
        #[allow(unsafe_code)]
        // SAFETY: an all-zero `struct stat` is a valid value (plain integers).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        #[allow(unsafe_code)]
        // SAFETY: a live descriptor and a live `struct stat`.
        let rc = unsafe { libc::fstat(self.0.as_raw_fd(), &raw mut st) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        #[allow(clippy::unnecessary_cast)] // the field types differ between libcs
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// Enters this namespace on the calling thread (`setns(2)`).
    fn enter(&self) -> io::Result<()> {
        #[allow(unsafe_code)]
        // SAFETY: setns(2) with a live namespace descriptor; it changes only
        // the calling thread's network namespace.
        let rc = unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// A new socket in this namespace: the calling thread enters it for the
    /// `socket(2)` call only, if it is elsewhere (a socket stays in the
    /// namespace it was made in).
    fn socket(&self, domain: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
        let here = NetNs::current()?;
        let away = here.id()? != self.id()?;
        if away {
            self.enter()?;
        }
        #[allow(unsafe_code)]
        // SAFETY: socket(2) takes plain integers; the result is checked.
        let fd = unsafe { libc::socket(domain, ty, 0) };
        let made = if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            #[allow(unsafe_code)]
            // SAFETY: `fd` was just returned by socket(2) and is owned by
            // nothing else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        if away {
            here.enter()?;
        }
        made
    }
}

/// A kernel socket in `ns` bound to `local` for `l4`; `InUse` if the kernel
/// has it.
pub(crate) fn hold(ns: &NetNs, l4: L4, local: SocketAddr) -> Result<OwnedFd, ClaimError> {
    let domain = match local.ip() {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    };
    let ty = match l4 {
        L4::Tcp => libc::SOCK_STREAM,
        L4::Udp => libc::SOCK_DGRAM,
    } | libc::SOCK_CLOEXEC;
    let fd = ns.socket(domain, ty).map_err(ClaimError::Io)?;
    let rc = match local {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            bind(&fd, std::ptr::from_ref(&sin).cast(), size_of_val(&sin))
        }
        SocketAddr::V6(a) => {
            let on: libc::c_int = 1;
            #[allow(unsafe_code)]
            // SAFETY: `on` is a live c_int for the call and its length is given.
            let _ = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_V6ONLY,
                    std::ptr::from_ref(&on).cast(),
                    size_of_val(&on) as libc::socklen_t,
                )
            };
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            bind(&fd, std::ptr::from_ref(&sin6).cast(), size_of_val(&sin6))
        }
    };
    match rc {
        Ok(()) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
            Err(ClaimError::InUse { l4, local })
        }
        Err(e) => Err(ClaimError::Io(e)),
    }
}

fn bind(fd: &OwnedFd, addr: *const libc::sockaddr, len: usize) -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: `addr` points at a live sockaddr of `len` bytes for the call.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), addr, len as libc::socklen_t) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_port_is_in_use_for_the_kernel() {
        // Loopback, a port the kernel picks: held, then refused to a second
        // holder and to a kernel program, free again once released.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = probe.local_addr().unwrap();
        drop(probe);
        let ns = NetNs::current().unwrap();
        let held = hold(&ns, L4::Udp, local).unwrap();
        assert!(matches!(
            hold(&ns, L4::Udp, local),
            Err(ClaimError::InUse { .. })
        ));
        assert!(std::net::UdpSocket::bind(local).is_err());
        drop(held);
        assert!(std::net::UdpSocket::bind(local).is_ok());
        let tcp = hold(&ns, L4::Tcp, local).unwrap();
        assert!(std::net::TcpListener::bind(local).is_err());
        drop(tcp);
    }
}
