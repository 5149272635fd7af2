//! Capturing frames as the kernel sends and receives them, with an AF_PACKET socket.
//!
//! Open the [`Capture`] on a thread inside the namespace that owns the interface
//! ([`crate::netns::Netns::run`]); the socket stays bound to that interface and can
//! then be read from any thread.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A raw packet socket bound to one interface, seeing both directions.
#[derive(Debug)]
pub struct Capture {
    fd: OwnedFd,
}

impl Capture {
    /// Opens a capture on `ifname` in the calling thread's network namespace.
    #[allow(unsafe_code)]
    pub fn open(ifname: &str) -> io::Result<Capture> {
        let eth_p_all = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(eth_p_all)) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a freshly created, valid descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = CString::new(ifname).map_err(io::Error::other)?;
        // SAFETY: name is a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = eth_p_all;
        addr.sll_ifindex = i32::try_from(index).map_err(io::Error::other)?;
        // SAFETY: addr is a valid sockaddr_ll and the length matches it.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Capture { fd })
    }

    /// Receives frames until none has arrived for `quiet`, or `limit` has passed.
    #[allow(unsafe_code)]
    pub fn collect(&self, quiet: Duration, limit: Duration) -> io::Result<Vec<Vec<u8>>> {
        // A zero SO_RCVTIMEO would block forever.
        let quiet = quiet
            .max(Duration::from_millis(1))
            .min(limit.max(Duration::from_millis(1)));
        let tv = libc::timeval {
            tv_sec: quiet.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(quiet.subsec_micros()),
        };
        // SAFETY: tv is a valid timeval and the length matches it.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast::<libc::c_void>(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let start = Instant::now();
        let mut frames = Vec::new();
        let mut buf = vec![0u8; 65_536 + 256];
        while start.elapsed() < limit {
            // SAFETY: buf is valid for writes of buf.len() bytes.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    break;
                }
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = usize::try_from(n).map_err(io::Error::other)?;
            frames.push(buf.get(..n).unwrap_or_default().to_vec());
        }
        Ok(frames)
    }
}
