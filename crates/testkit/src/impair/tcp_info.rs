//! The kernel's own view of a TCP socket: `getsockopt(TCP_INFO)` (Linux's
//! `struct tcp_info`, `include/uapi/linux/tcp.h`, as far as `tcpi_snd_wnd`).

use std::io;
use std::os::fd::AsRawFd;

/// Linux's `struct tcp_info` up to `tcpi_snd_wnd` (kernel 5.19 and later; an
/// older kernel fills less and leaves the rest zero).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

const _: () = assert!(core::mem::size_of::<RawTcpInfo>() == 232);

/// What the kernel says of one of its TCP sockets (the fields the impaired-path
/// measurements use; names as in `struct tcp_info` without `tcpi_`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// TCP state (1: ESTABLISHED ... as `TCP_ESTABLISHED` and on).
    pub state: u8,
    /// Options negotiated: bit 0 timestamps, 1 SACK, 2 window scaling, 3 ECN.
    pub options: u8,
    /// Sending MSS.
    pub snd_mss: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Segments now marked lost.
    pub lost: u32,
    /// Reordering degree the sender assumes (segments).
    pub reordering: u32,
    /// Congestion window (segments).
    pub snd_cwnd: u32,
    /// Smoothed RTT (microseconds).
    pub rtt_us: u32,
    /// RTT variance (microseconds).
    pub rttvar_us: u32,
    /// Retransmission timeout (microseconds).
    pub rto_us: u32,
    /// The least RTT seen (microseconds; the windowed minimum RACK uses).
    pub min_rtt_us: u32,
    /// Segments sent, retransmissions included.
    pub segs_out: u32,
    /// Segments received.
    pub segs_in: u32,
    /// Data segments received.
    pub data_segs_in: u32,
    /// Data segments sent.
    pub data_segs_out: u32,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// D-SACK blocks received that showed a retransmission was not needed.
    pub dsack_dups: u32,
    /// Reordering events seen.
    pub reord_seen: u32,
    /// Out-of-order segments received.
    pub rcv_ooopack: u32,
}

impl TcpInfo {
    /// Timestamps negotiated.
    pub fn timestamps(&self) -> bool {
        self.options & 1 != 0
    }

    /// SACK negotiated.
    pub fn sack(&self) -> bool {
        self.options & 2 != 0
    }

    /// Window scaling negotiated.
    pub fn window_scaling(&self) -> bool {
        self.options & 4 != 0
    }

    /// ECN negotiated (`TCPI_OPT_ECN`).
    pub fn ecn(&self) -> bool {
        self.options & 8 != 0
    }
}

/// `setsockopt(TCP_CONGESTION)`: sets `socket`'s congestion control by name
/// (root may pick any the kernel has, whatever
/// `net.ipv4.tcp_allowed_congestion_control` says).
#[allow(unsafe_code)]
pub fn set_congestion(socket: &impl AsRawFd, name: &str) -> io::Result<()> {
    let len = libc::socklen_t::try_from(name.len()).map_err(|_| io::Error::other("name"))?;
    // SAFETY: the kernel reads `len` bytes from `name`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast::<libc::c_void>(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(TCP_INFO)` on `socket`.
#[allow(unsafe_code)]
pub fn tcp_info(socket: &impl AsRawFd) -> io::Result<TcpInfo> {
    let mut raw = RawTcpInfo::default();
    let mut len = libc::socklen_t::try_from(core::mem::size_of::<RawTcpInfo>())
        .map_err(|_| io::Error::other("tcp_info size"))?;
    // SAFETY: `raw` is a plain-old-data struct of `len` bytes that outlives the
    // call; the kernel writes at most `len` bytes into it and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut raw).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpInfo {
        state: raw.state,
        options: raw.options,
        snd_mss: raw.snd_mss,
        total_retrans: raw.total_retrans,
        lost: raw.lost,
        reordering: raw.reordering,
        snd_cwnd: raw.snd_cwnd,
        rtt_us: raw.rtt,
        rttvar_us: raw.rttvar,
        rto_us: raw.rto,
        min_rtt_us: raw.min_rtt,
        segs_out: raw.segs_out,
        segs_in: raw.segs_in,
        data_segs_in: raw.data_segs_in,
        data_segs_out: raw.data_segs_out,
        bytes_retrans: raw.bytes_retrans,
        dsack_dups: raw.dsack_dups,
        reord_seen: raw.reord_seen,
        rcv_ooopack: raw.rcv_ooopack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// Over loopback (no root needed): the kernel's counts agree with what was
    /// sent, so the struct's layout is right where it matters.
    #[test]
    fn tcp_info_of_a_loopback_connection_reads_sensible_fields() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            (all.len(), tcp_info(&s).unwrap())
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&vec![7u8; 1 << 20]).unwrap();
        let open = tcp_info(&c).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let (got, recv) = t.join().unwrap();
        let sent = tcp_info(&c).unwrap();
        assert_eq!(got, 1 << 20);
        assert_eq!(open.state, 1, "ESTABLISHED");
        // Closed both ways: TCP_CLOSE (the time-wait state lives elsewhere).
        assert_eq!(sent.state, 7);
        assert!(sent.timestamps() && sent.sack(), "{sent:?}");
        assert!(sent.snd_mss > 1000, "{sent:?}");
        assert!(
            u64::from(sent.data_segs_out) * u64::from(sent.snd_mss) >= 1 << 20,
            "{sent:?}"
        );
        assert!(sent.rtt_us > 0 && sent.rtt_us < 1_000_000, "{sent:?}");
        assert!(recv.data_segs_in >= 1 && recv.segs_out >= 1, "{recv:?}");
        assert_eq!(sent.total_retrans, 0, "{sent:?}");
    }
}
