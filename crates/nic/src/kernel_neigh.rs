//! The kernel's neighbour table, read over rtnetlink (Linux).
//!
//! When linerate shares an interface's address with the kernel's stack (AF_XDP
//! with [`crate::xdp::Steering`]), the ARP replies and neighbour
//! advertisements for that address are the kernel's: the kernel resolves the
//! address's neighbours, and linerate asks it for what it found instead of
//! resolving them itself. [`KernelNeighbors::get`] reads one entry
//! (`RTM_GETNEIGH` for one address on one interface), and
//! [`KernelNeighbors::resolve`] has the kernel resolve an address it does not
//! know yet, or confirm one it has not heard from lately (`RTM_NEWNEIGH` with
//! `NTF_USE`, what the kernel's own transmit path does: an `INCOMPLETE` entry
//! and an ARP request or neighbour solicitation, or a `STALE` entry moved to
//! `DELAY` and then probed).
//!
//! Two messages and two attributes are all this needs, so they are written
//! here on `libc` (which the crate already uses) rather than through
//! netlink-packet-route and its companions (netlink-sys, netlink-packet-core,
//! -utils and their own dependencies) for what is a hundred lines of framing.
//!
//! Every call is one request and its answer on a blocking socket with a short
//! receive timeout: for a thread to make now and then (a resolution, a
//! refresh), never per packet.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

const NLMSG_HDR: usize = 16;
const NDMSG: usize = 12;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NTF_USE: u8 = 0x01;

/// Neighbour states (`NUD_*`, linux/neighbour.h).
pub mod nud {
    /// Being resolved.
    pub const INCOMPLETE: u16 = 0x01;
    /// Confirmed recently.
    pub const REACHABLE: u16 = 0x02;
    /// Not confirmed lately; still used, and confirmed on next use.
    pub const STALE: u16 = 0x04;
    /// Waiting before probing a stale entry that was used.
    pub const DELAY: u16 = 0x08;
    /// Probing a stale entry by unicast.
    pub const PROBE: u16 = 0x10;
    /// Resolution failed.
    pub const FAILED: u16 = 0x20;
    /// Needs no resolution (point-to-point, multicast).
    pub const NOARP: u16 = 0x40;
    /// Set by hand; never expires.
    pub const PERMANENT: u16 = 0x80;
    /// States with a usable link-layer address (`NUD_VALID`).
    pub const VALID: u16 = PERMANENT | NOARP | REACHABLE | PROBE | STALE | DELAY;
}

/// One entry of the kernel's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelNeighbor {
    /// Its state ([`nud`]).
    pub state: u16,
    /// Its link-layer address, if the entry has an Ethernet one.
    pub mac: Option<[u8; 6]>,
}

impl KernelNeighbor {
    /// The MAC to send to, if the kernel considers it usable.
    pub fn usable(&self) -> Option<[u8; 6]> {
        if self.state & nud::VALID != 0 {
            self.mac
        } else {
            None
        }
    }

    /// True if the kernel has not confirmed the entry lately (it would
    /// confirm it on its next use; [`KernelNeighbors::resolve`] makes that
    /// use).
    pub fn is_stale(&self) -> bool {
        self.state & nud::STALE != 0
    }
}

/// A NETLINK_ROUTE socket asking about one interface's neighbours, in the
/// network namespace it was opened in.
#[derive(Debug)]
pub struct KernelNeighbors {
    fd: OwnedFd,
    ifindex: u32,
    seq: u32,
    buf: Vec<u8>,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl KernelNeighbors {
    /// Opens the socket for interface `interface` (in the calling thread's
    /// network namespace); kernel answers are waited for at most `timeout`.
    pub fn open(interface: &str, timeout: Duration) -> io::Result<KernelNeighbors> {
        let name = std::ffi::CString::new(interface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
        #[allow(unsafe_code)]
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        KernelNeighbors::with_ifindex(ifindex, timeout)
    }

    /// Opens the socket for the interface of index `ifindex`.
    pub fn with_ifindex(ifindex: u32, timeout: Duration) -> io::Result<KernelNeighbors> {
        #[allow(unsafe_code)]
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        #[allow(unsafe_code)]
        // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros().max(1)),
        };
        #[allow(unsafe_code)]
        // SAFETY: `tv` is a valid timeval and its size is passed.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                core::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(KernelNeighbors {
            fd,
            ifindex,
            seq: 0,
            buf: vec![0; 16 * 1024],
        })
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The kernel's entry for `ip` on the interface; `None` if it has none.
    pub fn get(&mut self, ip: IpAddr) -> io::Result<Option<KernelNeighbor>> {
        let seq = self.request(RTM_GETNEIGH, NLM_F_REQUEST, 0, ip)?;
        match self.answer(seq)? {
            Answer::Neighbor(n) => Ok(Some(n)),
            Answer::Ack => Ok(None),
            Answer::Error(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Answer::Error(e) => Err(e),
        }
    }

    /// Has the kernel resolve `ip` (an entry created if there is none, an ARP
    /// request or neighbour solicitation sent), or confirm a stale entry, as
    /// its own transmit path would (`NTF_USE`). Returns at once; read the
    /// result with [`KernelNeighbors::get`] later.
    pub fn resolve(&mut self, ip: IpAddr) -> io::Result<()> {
        let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
        let seq = self.request(RTM_NEWNEIGH, flags, NTF_USE, ip)?;
        match self.answer(seq)? {
            Answer::Ack | Answer::Neighbor(_) => Ok(()),
            Answer::Error(e) => Err(e),
        }
    }

    /// Sends one neighbour message about `ip`; returns its sequence number.
    fn request(&mut self, kind: u16, flags: u16, ntf: u8, ip: IpAddr) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let (family, addr): (u8, &[u8]) = match &ip {
            IpAddr::V4(a) => (libc::AF_INET as u8, &a.octets()[..]),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, &a.octets()[..]),
        };
        // A stack buffer: header, ndmsg, one attribute of at most 16 bytes.
        let mut msg = [0u8; NLMSG_HDR + NDMSG + 4 + 16];
        let attr_len = 4 + addr.len();
        let len = NLMSG_HDR + NDMSG + attr_len;
        let mut w = Writer(msg.get_mut(..len).unwrap_or_default());
        w.u32(0, len as u32);
        w.u16(4, kind);
        w.u16(6, flags);
        w.u32(8, self.seq);
        w.u32(12, 0);
        // struct ndmsg: family, pad, pad, ifindex, state, flags, type.
        w.put(NLMSG_HDR, &[family]);
        w.u32(NLMSG_HDR + 4, self.ifindex);
        w.u16(NLMSG_HDR + 8, 0);
        w.put(NLMSG_HDR + 10, &[ntf, 0]);
        let a = NLMSG_HDR + NDMSG;
        w.u16(a, attr_len as u16);
        w.u16(a + 2, NDA_DST);
        w.put(a + 4, addr);
        let len = len.min(msg.len());
        #[allow(unsafe_code)]
        // SAFETY: `msg` holds at least `len` initialised bytes; an
        // unconnected netlink socket sends to the kernel.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), len, 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.seq)
    }

    /// Reads messages until the one answering `seq`.
    fn answer(&mut self, seq: u32) -> io::Result<Answer> {
        loop {
            #[allow(unsafe_code)]
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let got = self.buf.get(..n as usize).unwrap_or_default();
            if let Some(a) = parse(got, seq) {
                return Ok(a);
            }
        }
    }
}

/// What the kernel said to one request.
#[derive(Debug)]
enum Answer {
    Neighbor(KernelNeighbor),
    Ack,
    Error(io::Error),
}

/// The answer to `seq` among the messages of one datagram, if there is one.
fn parse(mut msgs: &[u8], seq: u32) -> Option<Answer> {
    while msgs.len() >= NLMSG_HDR {
        let len = rd_u32(msgs, 0)? as usize;
        let kind = rd_u16(msgs, 4)?;
        let this = rd_u32(msgs, 8)?;
        if len < NLMSG_HDR || len > msgs.len() {
            return None;
        }
        let body = msgs.get(NLMSG_HDR..len)?;
        if this == seq {
            match kind {
                NLMSG_ERROR => {
                    let code = rd_u32(body, 0)? as i32;
                    return Some(if code == 0 {
                        Answer::Ack
                    } else {
                        Answer::Error(io::Error::from_raw_os_error(-code))
                    });
                }
                NLMSG_DONE => return Some(Answer::Ack),
                RTM_NEWNEIGH => return parse_neighbor(body).map(Answer::Neighbor),
                _ => {}
            }
        }
        msgs = msgs.get(len.next_multiple_of(4).min(msgs.len())..)?;
    }
    None
}

/// An `ndmsg` and its attributes.
fn parse_neighbor(body: &[u8]) -> Option<KernelNeighbor> {
    let state = rd_u16(body, 8)?;
    let mut attrs = body.get(NDMSG..)?;
    let mut mac = None;
    while attrs.len() >= 4 {
        let len = usize::from(rd_u16(attrs, 0)?);
        let kind = rd_u16(attrs, 2)? & 0x3fff;
        if len < 4 || len > attrs.len() {
            break;
        }
        if kind == NDA_LLADDR {
            mac = attrs.get(4..len).and_then(|m| <[u8; 6]>::try_from(m).ok());
        }
        attrs = attrs.get(len.next_multiple_of(4).min(attrs.len())..)?;
    }
    Some(KernelNeighbor { state, mac })
}

fn rd_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn rd_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Native-endian writes into a message being built (netlink's byte order).
struct Writer<'a>(&'a mut [u8]);

impl Writer<'_> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        if let Some(d) = self.0.get_mut(at..at + bytes.len()) {
            d.copy_from_slice(bytes);
        }
    }
    fn u16(&mut self, at: usize, v: u16) {
        self.put(at, &v.to_ne_bytes());
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.put(at, &v.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDR + body.len();
        let mut m = vec![0u8; len.next_multiple_of(4)];
        m[..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        m[NLMSG_HDR..len].copy_from_slice(body);
        m
    }

    #[test]
    fn parses_an_entry_an_error_and_skips_other_sequences() {
        let mut nd = vec![2u8, 0, 0, 0, 7, 0, 0, 0];
        nd.extend_from_slice(&nud::STALE.to_ne_bytes());
        nd.extend_from_slice(&[0, 1]);
        nd.extend_from_slice(&8u16.to_ne_bytes());
        nd.extend_from_slice(&NDA_DST.to_ne_bytes());
        nd.extend_from_slice(&[10, 0, 0, 1]);
        nd.extend_from_slice(&10u16.to_ne_bytes());
        nd.extend_from_slice(&NDA_LLADDR.to_ne_bytes());
        nd.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0, 0]);
        let mut both = msg(RTM_NEWNEIGH, 6, &nd);
        both.extend(msg(RTM_NEWNEIGH, 7, &nd));
        match parse(&both, 7) {
            Some(Answer::Neighbor(n)) => {
                assert_eq!(n.usable(), Some([2, 0, 0, 0, 0, 9]));
                assert!(n.is_stale());
            }
            other => panic!("{other:?}"),
        }
        let enoent = msg(NLMSG_ERROR, 3, &(-libc::ENOENT).to_ne_bytes());
        assert!(
            matches!(parse(&enoent, 3), Some(Answer::Error(e)) if e.raw_os_error() == Some(libc::ENOENT))
        );
        assert!(parse(&enoent, 4).is_none());
        let failed = KernelNeighbor {
            state: nud::FAILED,
            mac: Some([2; 6]),
        };
        assert_eq!(failed.usable(), None);
    }

    #[test]
    fn truncated_answers_are_not_read_past() {
        let m = msg(RTM_NEWNEIGH, 1, &[2, 0, 0, 0]);
        for cut in 0..m.len() {
            let _ = parse(&m[..cut], 1);
        }
        assert!(matches!(
            parse(&m, 1),
            None | Some(Answer::Neighbor(KernelNeighbor { mac: None, .. }))
        ));
    }

    #[test]
    fn loopback_has_no_entry_for_an_unknown_address() {
        let mut k = KernelNeighbors::open("lo", Duration::from_millis(500)).unwrap();
        assert!(k.ifindex() > 0);
        // Loopback keeps no neighbours: nothing, or an error the kernel
        // gives for a device without a table; never a hang.
        let _ = k.get("192.0.2.1".parse().unwrap());
    }
}
