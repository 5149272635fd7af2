//! One engine against a hand-driven peer: frames in, frames out, virtual time.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_toe::{Config, Engine, Instant, SocketHandle, TcpState};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{TcpHeader, TcpOptionElement};
use linerate_wire::tcp::{self, Flags, SynOptions};
use linerate_wire::{arp, ethernet, ipv4};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// A TCP segment as seen on the wire.
#[derive(Clone)]
pub struct Seen {
    pub at: Instant,
    pub seq: u32,
    pub ack: u32,
    pub flags: Flags,
    pub wnd: u16,
    pub opts: SynOptions,
    pub payload: Vec<u8>,
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{:?} {:?} seq {} ack {} wnd {} len {}]",
            self.at,
            self.flags,
            self.seq,
            self.ack,
            self.wnd,
            self.payload.len()
        )
    }
}

pub struct Raw {
    pub e: Engine,
    pub now: Instant,
}

impl Raw {
    pub fn new(cfg: Config) -> Raw {
        Raw {
            e: Engine::new(cfg, 42),
            now: Instant::ZERO,
        }
    }

    /// Host 1 of the simulation (10.0.0.1), knowing the peer 10.0.0.2 through an
    /// ARP request the peer sent.
    pub fn host(tune: impl FnOnce(&mut Config)) -> Raw {
        let mut cfg = linerate_toe::sim::Sim::host_config(1);
        tune(&mut cfg);
        let mut r = Raw::new(cfg);
        let mut f = vec![0u8; 14 + arp::PACKET_LEN];
        f[..6].copy_from_slice(&ethernet::BROADCAST);
        f[6..12].copy_from_slice(&PEER_MAC);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        arp::emit_request(&mut f[14..], PEER_MAC, [10, 0, 0, 2], [10, 0, 0, 1]).unwrap();
        r.input(&f);
        r.frames(); // the ARP reply
        r
    }

    pub fn input(&mut self, frame: &[u8]) {
        self.e
            .handle_frame(self.now, frame, &linerate_offload::OffloadMeta::plain());
    }

    /// Frames the engine sends now, segmented and with checksums complete.
    pub fn frames(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut seg = Segmenter::new(CsumMode::Complete);
        let mut buf = SegmentBuf::new();
        self.e.poll_transmit(self.now, &mut |f, m| {
            seg.segment(f, m, &mut buf).unwrap();
            out.extend(buf.iter().map(<[u8]>::to_vec));
        });
        out
    }

    /// TCP segments the engine sends now.
    pub fn segments(&mut self) -> Vec<Seen> {
        let now = self.now;
        self.frames()
            .iter()
            .filter_map(|f| parse_tcp(f, now))
            .collect()
    }

    /// Answers the engine's SYN `syn` on `c` (an active open) with a SYN-ACK
    /// from the peer, from port 80 (the remote port of `c`) with ISS 7000, a
    /// 60,000 byte window and options `opts`; drops the engine's ACK, checks
    /// `c` is established and returns the engine's local port.
    pub fn answer_syn(&mut self, c: SocketHandle, syn: &Seen, opts: &[TcpOptionElement]) -> u16 {
        self.answer_syn_with(c, syn, 7000, 60_000, opts)
    }

    /// [`Raw::answer_syn`] with the peer's ISS `iss` and window `wnd`.
    pub fn answer_syn_with(
        &mut self,
        c: SocketHandle,
        syn: &Seen,
        iss: u32,
        wnd: u16,
        opts: &[TcpOptionElement],
    ) -> u16 {
        let (me, peer) = self.e.tcp_addrs(c).unwrap();
        self.input(&tcp_frame(
            peer.port(),
            me.port(),
            iss,
            Some(syn.seq.wrapping_add(1)),
            Flags::SYN,
            wnd,
            opts,
            &[],
        ));
        self.segments();
        assert_eq!(self.e.tcp_state(c), Ok(TcpState::Established));
        me.port()
    }

    /// Advances time by `d`, running timers; returns the TCP segments sent meanwhile.
    pub fn advance(&mut self, d: Duration) -> Vec<Seen> {
        let end = self.now + d;
        let mut seen = self.segments();
        while let Some(t) = self.e.poll_timeout() {
            if t > end {
                break;
            }
            self.now = t.max(self.now);
            self.e.handle_timeout(self.now);
            seen.extend(self.segments());
        }
        self.now = end;
        seen
    }
}

/// A host ([`Raw::host`], `tune`d) with a connection to the peer's port 80
/// that the peer accepted with a SYN-ACK carrying `opts` ([`Raw::answer_syn`]):
/// the host, the socket, its local port and the sequence number of its first
/// data byte.
pub fn connected(
    tune: impl FnOnce(&mut Config),
    opts: &[TcpOptionElement],
) -> (Raw, SocketHandle, u16, u32) {
    let mut r = Raw::host(tune);
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let port = r.answer_syn(c, &syn, opts);
    (r, c, port, syn.seq.wrapping_add(1))
}

/// Parses a TCP frame over IPv4 (checksums verified).
pub fn parse_tcp(f: &[u8], at: Instant) -> Option<Seen> {
    let eth = ethernet::Packet::new_checked(f).ok()?;
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    assert!(ip.verify_checksum());
    let t = tcp::Packet::new_checked(ip.payload()).ok()?;
    assert!(t.verify_checksum(ip.pseudo_header_sum(ip.payload().len() as u16)));
    Some(Seen {
        at,
        seq: t.seq_number(),
        ack: t.ack_number(),
        flags: t.flags(),
        wnd: t.window(),
        opts: tcp::parse_syn_options(t.options()).ok()?,
        payload: t.payload().to_vec(),
    })
}

/// A TCP segment from the peer (10.0.0.2) to the engine (10.0.0.1), checksums filled.
#[allow(clippy::too_many_arguments)]
pub fn tcp_frame(
    peer_port: u16,
    my_port: u16,
    seq: u32,
    ack: Option<u32>,
    flags: Flags,
    wnd: u16,
    opts: &[TcpOptionElement],
    payload: &[u8],
) -> Vec<u8> {
    let mut h = TcpHeader::new(peer_port, my_port, seq, wnd);
    h.syn = flags.contains(Flags::SYN);
    h.fin = flags.contains(Flags::FIN);
    h.rst = flags.contains(Flags::RST);
    h.psh = flags.contains(Flags::PSH);
    if let Some(a) = ack {
        h.ack = true;
        h.acknowledgment_number = a;
    }
    h.set_options(opts).unwrap();
    FrameBuilder::new(Ip::v4([10, 0, 0, 2], [10, 0, 0, 1]), L4::Tcp(h))
        .macs(PEER_MAC, ME_MAC)
        .build(payload)
}

pub fn peer_addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::from([10, 0, 0, 2]), port)
}

/// Every TCP option of an IPv4 frame the engine sent, in order (NOPs and the end
/// of list left out), parsed by etherparse.
pub fn tcp_options(f: &[u8]) -> Vec<TcpOptionElement> {
    let eth = ethernet::Packet::new_checked(f).unwrap();
    let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
    let t = linerate_wire::etherparse::TcpHeaderSlice::from_slice(ip.payload()).unwrap();
    t.options_iterator()
        .map(|o| o.unwrap())
        .filter(|o| !matches!(o, TcpOptionElement::Noop))
        .collect()
}

/// An established connection receiving from a hand-driven sender on port 80
/// (the peer's ISN 99, window 60,000, no options, so our window field is the
/// window in bytes): the sender's stream is `stream`, sent in segments of the
/// test's choosing.
pub struct Receiver {
    pub r: Raw,
    pub c: SocketHandle,
    /// Our port.
    pub port: u16,
    /// The peer's ISN + 1: the stream's first sequence number.
    pub base: u32,
    /// Our ISN + 1.
    pub me: u32,
    pub stream: Vec<u8>,
}

impl Receiver {
    /// Established, with the engine's config as `tune` leaves it (neighbours
    /// kept for an hour).
    pub fn new(tune: impl FnOnce(&mut Config)) -> Receiver {
        let mut r = Raw::host(|c| {
            c.neighbor_ttl = Duration::from_secs(3600);
            tune(c);
        });
        let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
        let syn = r.segments().remove(0);
        r.answer_syn_with(c, &syn, 99, 60_000, &[]);
        let (me, _) = r.e.tcp_addrs(c).unwrap();
        Receiver {
            r,
            c,
            port: me.port(),
            base: 100,
            me: syn.seq.wrapping_add(1),
            stream: super::pattern(1 << 20, 11),
        }
    }

    /// Stream bytes `[from, to)` in one segment, ACK only, acknowledging
    /// nothing of ours, window 60,000.
    pub fn send(&mut self, from: usize, to: usize) {
        self.send_with(from, to, 0, Flags::ACK, 60_000);
    }

    /// Stream bytes `[from, to)` in one segment with `flags` and window `wnd`,
    /// acknowledging `acked` bytes of ours.
    pub fn send_with(&mut self, from: usize, to: usize, acked: u32, flags: Flags, wnd: u16) {
        let f = tcp_frame(
            80,
            self.port,
            self.base.wrapping_add(from as u32),
            Some(self.me.wrapping_add(acked)),
            flags,
            wnd,
            &[],
            &self.stream[from..to],
        );
        self.r.input(&f);
    }

    /// Everything readable now.
    pub fn read(&mut self) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = self.r.e.tcp_recv(self.c, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    /// The window the engine advertised last, and its ACK number (relative).
    pub fn last_ack(&mut self) -> Option<(usize, usize)> {
        self.r
            .segments()
            .last()
            .map(|s| (s.ack.wrapping_sub(self.base) as usize, usize::from(s.wnd)))
    }
}
