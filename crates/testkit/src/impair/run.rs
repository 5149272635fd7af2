//! linerate's engine against a kernel socket over an impaired TAP.
//!
//! The engine runs on the caller's thread, driven by linerate-rt's [`Driver`]
//! over an [`Impaired`] TAP (the only place this module names the driver).

use super::kernel::{self, Received, Sent};
use super::nic::{Impaired, ImpairedConfig};
use super::setup::{
    Direction, KERNEL_IP, PEER_IP, PEER_MAC, RunConfig, RunResult, check_deadline, joined, tap_in,
};
use crate::netns::Netns;
use crate::stream::{Digester, Pattern};
use linerate_nic::Nic;
use linerate_nic::pcap::PcapRecorder;
use linerate_nic::tap::Tap;
use linerate_rt::Driver;
use linerate_toe::{Config, Engine, Instant, RecvError, SendError, SocketHandle, TcpState};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

/// The engine on the impaired TAP.
struct Host {
    driver: Driver<Impaired<Tap>>,
    epoch: std::time::Instant,
}

impl Host {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// One round of the driver; if it moved nothing, waits for the TAP, the
    /// engine's next timer or the next held frame, 2 ms at most.
    fn pump(&mut self) -> io::Result<()> {
        let before = self.driver.stats();
        let now = self.now();
        let next = self.driver.poll(now).map_err(io::Error::other)?;
        let after = self.driver.stats();
        if after.rx_frames != before.rx_frames || after.tx_frames != before.tx_frames {
            return Ok(());
        }
        let now = self.now();
        let held = self.driver.nic().time_to_next().map(|d| now + d);
        let deadline = match (next, held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.driver
            .wait(now, deadline, Duration::from_millis(2))
            .map_err(io::Error::other)?;
        Ok(())
    }

    fn engine(&mut self) -> &mut Engine {
        self.driver.engine_mut()
    }
}

/// Moves `cfg.len` bytes between linerate's engine and a kernel socket in a
/// namespace, over a TAP whose frames cross `cfg.impairment` both ways, and
/// checks them by SHA-256. Root only.
///
/// For looking into a run: `LINERATE_IMPAIR_DEBUG` prints the sender's loss
/// recovery counters and the wrapper's; `LINERATE_IMPAIR_TRACE` prints linerate's
/// sending connection (cwnd, ssthresh, bytes in flight, SRTT) every 5 ms;
/// `LINERATE_IMPAIR_PCAP=<file>` records the TAP's frames (after the
/// impairment), as `LINERATE_IMPAIR_PCAP_K` does in the kernel-to-kernel run.
pub fn linerate(cfg: &RunConfig) -> io::Result<RunResult> {
    let ns = Netns::new("lrk")?;
    cfg.kernel.apply(&ns)?;
    let tap = tap_in(&ns, cfg.offloads, KERNEL_IP)?;
    let nic = Impaired::new(
        tap,
        ImpairedConfig {
            inbound: cfg.impairment,
            outbound: cfg.impairment,
            seed: cfg.seed,
            coalesce: cfg.offloads,
        },
    );
    let mut ecfg = Config::new(PEER_MAC).with_ipv4(PEER_IP, 24);
    ecfg.offloads = cfg.offloads;
    ecfg.tcp.send_buffer = 4 << 20;
    ecfg.tcp.recv_buffer = 4 << 20;
    let engine = Engine::new(ecfg, cfg.seed);
    let mut h = Host {
        driver: Driver::new(engine, nic, 0).map_err(io::Error::other)?,
        epoch: std::time::Instant::now(),
    };
    let pcap = match std::env::var_os("LINERATE_IMPAIR_PCAP") {
        Some(path) => {
            let r = Arc::new(PcapRecorder::create(path)?);
            h.driver.nic_mut().set_recorder(Some(r.clone()));
            Some(r)
        }
        None => None,
    };
    // What the engine receives and sends (after and before the impairment).
    let view = match std::env::var_os("LINERATE_IMPAIR_PCAP_VIEW") {
        Some(path) => {
            let r = Arc::new(PcapRecorder::create(path)?);
            h.driver.nic_mut().set_view_recorder(Some(r.clone()));
            Some(r)
        }
        None => None,
    };
    let end = std::time::Instant::now() + cfg.limit;
    let (secs, sender_retrans, info) = match cfg.direction {
        Direction::KernelToLinerate => {
            let (sent, got_at) = to_linerate(&mut h, &ns, cfg, end)?;
            let secs = got_at.saturating_duration_since(sent.start).as_secs_f64();
            if std::env::var_os("LINERATE_IMPAIR_DEBUG").is_some() {
                eprintln!("kernel sender: {:?}", sent.info);
                kernel::print_recovery_counters(&ns);
            }
            (secs, u64::from(sent.info.total_retrans), sent.info)
        }
        Direction::LinerateToKernel => {
            let (start, rec) = from_linerate(&mut h, &ns, cfg, end)?;
            let secs = rec.end.saturating_duration_since(start).as_secs_f64();
            let c = h.engine().counters();
            if std::env::var_os("LINERATE_IMPAIR_DEBUG").is_some() {
                eprintln!(
                    "linerate sender: retrans {} fast {} timeouts {} tlp {} rack_lost {} undos {} spurious_rtt_skipped {}",
                    c.tcp_retrans_segs,
                    c.tcp_fast_retransmits,
                    c.tcp_timeouts,
                    c.tcp_tlp_probes,
                    c.tcp_rack_lost,
                    c.tcp_undos,
                    c.tcp_rtt_spurious_skipped
                );
            }
            (secs, c.tcp_retrans_segs, rec.info)
        }
    };
    if let Some(r) = pcap {
        r.flush()?;
    }
    if let Some(r) = view {
        r.flush()?;
    }
    let nic = h.driver.nic();
    if std::env::var_os("LINERATE_IMPAIR_DEBUG").is_some() {
        eprintln!(
            "impaired nic: {:?}, tap counters: {:?}",
            nic.stats(),
            nic.counters()
        );
    }
    Ok(RunResult {
        secs,
        sender_retrans,
        kernel: info,
        from_kernel: nic.inbound(),
        to_kernel: nic.outbound(),
        stats: nic.stats(),
    })
}

/// The kernel sends to the engine; returns the sender's report and when the
/// engine saw the end of file.
fn to_linerate(
    h: &mut Host,
    ns: &Netns,
    cfg: &RunConfig,
    end: std::time::Instant,
) -> io::Result<(Sent, std::time::Instant)> {
    let port = 5001;
    let l = h.engine().tcp_listen(port).map_err(io::Error::other)?;
    let sender = kernel::sender(
        ns,
        SocketAddrV4::new(PEER_IP, port),
        cfg.seed,
        cfg.len,
        cfg.limit,
    )?;
    let s: SocketHandle = loop {
        check_deadline(end, "accept")?;
        if let Ok(s) = h.engine().tcp_accept(l) {
            break s;
        }
        if sender.is_finished() {
            // The kernel gave up: its error says why.
            joined(sender)?;
            return Err(io::Error::other(
                "the kernel's sender ended before connecting",
            ));
        }
        h.pump()?;
    };
    let mut d = Digester::default();
    let mut buf = vec![0u8; 256 << 10];
    let got_at = 'recv: loop {
        loop {
            match h.engine().tcp_recv(s, &mut buf) {
                Ok(0) => break 'recv std::time::Instant::now(),
                Ok(n) => d.update(buf.get(..n).unwrap_or_default()),
                Err(RecvError::WouldBlock) => break,
                Err(e) => return Err(io::Error::other(format!("recv after {} bytes: {e}", d.len))),
            }
        }
        check_deadline(end, "receive")?;
        h.pump()?;
    };
    let len = d.len;
    kernel::check(len, &d.finish(), cfg.seed, cfg.len)?;
    h.engine().tcp_close(s).map_err(io::Error::other)?;
    while !sender.is_finished() {
        check_deadline(end, "the kernel sees the close")?;
        h.pump()?;
    }
    Ok((joined(sender)?, got_at))
}

/// The engine sends to the kernel; returns when the connection was
/// established and the receiver's report.
fn from_linerate(
    h: &mut Host,
    ns: &Netns,
    cfg: &RunConfig,
    end: std::time::Instant,
) -> io::Result<(std::time::Instant, Received)> {
    let port = 5002;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = kernel::receiver(ns, SocketAddrV4::new(KERNEL_IP, port), ready_tx, cfg.limit)?;
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| io::Error::other("the kernel's receiver did not listen"))?;
    let now = h.now();
    let c = h
        .engine()
        .tcp_connect(now, SocketAddr::from((KERNEL_IP, port)))
        .map_err(io::Error::other)?;
    while h.engine().tcp_state(c).map_err(io::Error::other)? != TcpState::Established {
        check_deadline(end, "connect")?;
        h.pump()?;
    }
    let start = std::time::Instant::now();
    let mut p = Pattern::new(cfg.seed, cfg.len);
    let mut buf = vec![0u8; 256 << 10];
    let (mut off, mut filled) = (0, 0);
    let mut shut = false;
    let trace = std::env::var_os("LINERATE_IMPAIR_TRACE").is_some();
    let mut last = start;
    while !receiver.is_finished() {
        while !shut {
            if off == filled {
                filled = p.fill(&mut buf);
                off = 0;
                if filled == 0 {
                    h.engine().tcp_shutdown(c).map_err(io::Error::other)?;
                    shut = true;
                    break;
                }
            }
            match h
                .engine()
                .tcp_send(c, buf.get(off..filled).unwrap_or_default())
            {
                Ok(n) => off += n,
                Err(SendError::WouldBlock) => break,
                Err(e) => return Err(io::Error::other(format!("send: {e}"))),
            }
        }
        check_deadline(end, "send")?;
        h.pump()?;
        if trace && last.elapsed() >= Duration::from_millis(5) {
            last = std::time::Instant::now();
            if let Ok(i) = h.engine().tcp_info(c) {
                eprintln!(
                    "t {:>6.1} ms cwnd {:>8} ssthresh {:>8} unacked {:>8} snd_wnd {:>8} srtt {:?} min_rtt {:?} reo_wnd {:?} sendq {:>8}",
                    start.elapsed().as_secs_f64() * 1e3,
                    i.cwnd,
                    i.ssthresh,
                    i.unacked,
                    i.snd_wnd,
                    i.srtt,
                    i.min_rtt,
                    i.reo_wnd,
                    i.send_queue
                );
            }
        }
    }
    let rec = joined(receiver)?;
    kernel::check(rec.len, &rec.digest, cfg.seed, cfg.len)?;
    Ok((start, rec))
}
