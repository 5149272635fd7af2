//! One interface's steering program shared between processes.
//!
//! An interface takes one XDP program, and the BPF link that attaches it is
//! exclusive: a second process cannot attach its own. So the process that
//! attached it lends it. Every process holding a [`Steering`](super::Steering)
//! runs a small server on an abstract Unix socket named after the interface
//! (abstract names belong to the network namespace, as the interface's index
//! does); a process that finds the name answered joins: it receives
//! duplicates of the link's and the maps' descriptors (`SCM_RIGHTS`) and puts
//! its own sockets in the `xsks` map at its queues. Nothing is pinned: the
//! kernel keeps the program while any process holds a duplicate of the link,
//! and detaches it when the last one closes it or dies. When the serving
//! process goes, another holder takes the name over (each one tries to bind
//! it every [`RETRY`] until one does).

use super::XdpAttach;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a holder that does not serve tries to take the name over.
const RETRY: Duration = Duration::from_millis(100);

/// Layout version of [`Header`] on the socket.
const VERSION: u8 = 1;

/// The descriptors lent, in this order: link, xsks, ports, flows, counts,
/// addrs.
pub(super) const FDS: usize = 6;

/// What a joining process needs to know besides the descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub attach: XdpAttach,
    pub rx_hash: bool,
    /// The `xdp.frags` program (multi-buffer sockets).
    pub frags: bool,
    pub xsks_max: u32,
    pub ports_max: u32,
    pub flows_max: u32,
}

impl Header {
    fn encode(&self) -> [u8; 16] {
        let [x0, x1, x2, x3] = self.xsks_max.to_le_bytes();
        let [p0, p1, p2, p3] = self.ports_max.to_le_bytes();
        let [f0, f1, f2, f3] = self.flows_max.to_le_bytes();
        [
            VERSION,
            u8::from(self.attach == XdpAttach::Native),
            u8::from(self.rx_hash),
            u8::from(self.frags),
            x0,
            x1,
            x2,
            x3,
            p0,
            p1,
            p2,
            p3,
            f0,
            f1,
            f2,
            f3,
        ]
    }

    fn decode(b: &[u8; 16]) -> io::Result<Header> {
        let [
            v,
            native,
            hash,
            frags,
            x0,
            x1,
            x2,
            x3,
            p0,
            p1,
            p2,
            p3,
            f0,
            f1,
            f2,
            f3,
        ] = *b;
        if v != VERSION {
            return Err(io::Error::other(format!(
                "the process lending the steering program speaks version {v}, this one {VERSION}"
            )));
        }
        Ok(Header {
            attach: if native == 1 {
                XdpAttach::Native
            } else {
                XdpAttach::Generic
            },
            rx_hash: hash == 1,
            frags: frags == 1,
            xsks_max: u32::from_le_bytes([x0, x1, x2, x3]),
            ports_max: u32::from_le_bytes([p0, p1, p2, p3]),
            flows_max: u32::from_le_bytes([f0, f1, f2, f3]),
        })
    }
}

/// The abstract socket name of interface `ifindex`'s program.
fn address(ifindex: u32) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("linerate-steer/{ifindex}").as_bytes())
}

/// Asks the process serving interface `ifindex`'s program for it: `None`
/// when nobody serves it.
pub(super) fn join(ifindex: u32) -> io::Result<Option<(Header, [OwnedFd; FDS])>> {
    let s = match UnixStream::connect_addr(&address(ifindex)?) {
        Ok(s) => s,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT)) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = [0u8; 16];
    let mut space = nix::cmsg_space!([RawFd; FDS]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut head)];
        let msg = recvmsg::<()>(
            s.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(r) = c {
                // SAFETY: descriptors the kernel just installed in this
                // process for us (SCM_RIGHTS), owned by nobody else.
                #[allow(unsafe_code)]
                fds.extend(r.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        (msg.bytes, fds)
    };
    if n == 0 {
        // The server went away between accept and answer: as if nobody
        // served.
        return Ok(None);
    }
    if n != head.len() {
        return Err(io::Error::other("a short answer from the steering server"));
    }
    let header = Header::decode(&head)?;
    let fds: [OwnedFd; FDS] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
        io::Error::other(format!(
            "the steering server sent {} descriptors, not {FDS}",
            v.len()
        ))
    })?;
    Ok(Some((header, fds)))
}

/// The server of one [`Steering`](super::Steering): lends its descriptors to
/// processes that ask, once it holds the name. Stops (its thread joined)
/// when dropped.
#[derive(Debug)]
pub(super) struct Server {
    stop: EventFd,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts serving `fds` (duplicates, closed when the server stops) with
    /// `header` for interface `ifindex`.
    pub(super) fn start(ifindex: u32, header: Header, fds: [OwnedFd; FDS]) -> io::Result<Server> {
        let stop = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(io::Error::from)?;
        let wake = stop.as_fd().try_clone_to_owned()?;
        let addr = address(ifindex)?;
        let thread = std::thread::Builder::new()
            .name("linerate-steer".into())
            .spawn(move || serve(&addr, &header, &fds, &wake))?;
        Ok(Server {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The server's loop: binds the name (or waits for it to free), answers each
/// connection, until `stop` is readable.
fn serve(addr: &SocketAddr, header: &Header, fds: &[OwnedFd; FDS], stop: &OwnedFd) {
    let mut listener: Option<UnixListener> = None;
    loop {
        if listener.is_none() {
            listener = UnixListener::bind_addr(addr).ok();
        }
        let timeout = if listener.is_some() {
            PollTimeout::NONE
        } else {
            PollTimeout::try_from(RETRY).unwrap_or(PollTimeout::MAX)
        };
        let mut set = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        if let Some(l) = &listener {
            set.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut set, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let ready = |i: usize| {
            set.get(i)
                .and_then(PollFd::revents)
                .is_some_and(|r| !r.is_empty())
        };
        if ready(0) {
            return;
        }
        if ready(1)
            && let Some(l) = &listener
            && let Ok((s, _)) = l.accept()
        {
            let _ = lend(&s, header, fds);
        }
    }
}

fn lend(s: &UnixStream, header: &Header, fds: &[OwnedFd; FDS]) -> io::Result<()> {
    let head = header.encode();
    let raw: [RawFd; FDS] = fds.each_ref().map(AsRawFd::as_raw_fd);
    let cmsg = [ControlMessage::ScmRights(&raw)];
    sendmsg::<()>(
        s.as_raw_fd(),
        &[IoSlice::new(&head)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_round_trips() {
        let h = Header {
            attach: XdpAttach::Native,
            rx_hash: true,
            frags: false,
            xsks_max: 4,
            ports_max: 1024,
            flows_max: 65_536,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let [_, rest @ ..] = h.encode();
        let mut b = [9u8; 16];
        for (d, s) in b.iter_mut().skip(1).zip(rest) {
            *d = s;
        }
        assert!(Header::decode(&b).is_err());
    }
}
