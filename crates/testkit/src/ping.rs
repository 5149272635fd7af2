//! ICMP echo from the kernel's own stack, without a `ping` binary: a raw ICMP
//! (or ICMPv6) socket in the calling thread's network namespace (root only). Run
//! it on a thread inside a namespace with [`crate::netns::Netns::run`].

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The identifier this process's echo requests carry.
fn ident() -> u16 {
    (std::process::id() & 0xffff) as u16
}

/// The Internet checksum of `data` (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[allow(unsafe_code)]
fn raw_socket(v6: bool) -> io::Result<OwnedFd> {
    let (domain, proto) = if v6 {
        (libc::AF_INET6, libc::IPPROTO_ICMPV6)
    } else {
        (libc::AF_INET, libc::IPPROTO_ICMP)
    };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[allow(unsafe_code)]
fn send_to(fd: &OwnedFd, dst: IpAddr, bytes: &[u8]) -> io::Result<()> {
    let addr = socket2_addr(SocketAddr::new(dst, 0));
    // SAFETY: bytes is valid for reads of its length; addr holds a sockaddr of
    // the length given.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
            (&raw const addr.0).cast::<libc::sockaddr>(),
            addr.1,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A sockaddr_storage holding `a`, and its length.
#[allow(unsafe_code)]
fn socket2_addr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably
            // aligned for it.
            unsafe { std::ptr::write((&raw mut s).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut s).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

#[allow(unsafe_code)]
fn set_timeout(fd: &OwnedFd, t: Duration) -> io::Result<()> {
    let t = t.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(t.subsec_micros()),
    };
    // SAFETY: tv is a valid timeval and the length matches it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast::<libc::c_void>(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `count` echo requests to `dst` (IPv4 or IPv6) with `payload` bytes
/// each, one at a time, each waiting up to `timeout` for its reply, and returns
/// how many were answered (a reply must carry the request's identifier,
/// sequence number and payload).
#[allow(unsafe_code)]
pub fn ping(dst: IpAddr, count: u16, payload: usize, timeout: Duration) -> io::Result<u16> {
    let v6 = dst.is_ipv6();
    let fd = raw_socket(v6)?;
    let (request, reply) = if v6 { (128u8, 129u8) } else { (8u8, 0u8) };
    let id = ident();
    let mut answered = 0;
    let mut buf = vec![0u8; 65_536];
    for seq in 0..count {
        let mut msg = vec![request, 0, 0, 0];
        msg.extend_from_slice(&id.to_be_bytes());
        msg.extend_from_slice(&seq.to_be_bytes());
        msg.extend((0..payload).map(|i| (i as u8) ^ (seq as u8)));
        if !v6 {
            // The kernel fills ICMPv6 checksums of raw sockets, not ICMPv4 ones.
            let c = checksum(&msg);
            msg[2..4].copy_from_slice(&c.to_be_bytes());
        }
        send_to(&fd, dst, &msg)?;
        let end = Instant::now() + timeout;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            set_timeout(&fd, left)?;
            // SAFETY: buf is valid for writes of its length.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            let got = buf
                .get(..usize::try_from(n).unwrap_or(0))
                .unwrap_or_default();
            // IPv4 raw sockets see the IP header; IPv6 ones do not.
            let icmp = if v6 {
                got
            } else {
                let ihl = usize::from(got.first().map_or(0, |b| b & 0x0f)) * 4;
                got.get(ihl..).unwrap_or_default()
            };
            let matches = icmp.len() == msg.len()
                && icmp.first() == Some(&reply)
                && icmp.get(4..) == msg.get(4..);
            if matches {
                answered += 1;
                break;
            }
        }
    }
    Ok(answered)
}
