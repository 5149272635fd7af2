//! Receive-window auto-tuning (`TcpConfig::recv_autotune`, dynamic right-sizing
//! in the manner of Linux's `tcp_rcv_space_adjust`) between two engines of the
//! simulation over a 10 ms one-way link: a reader that keeps up gets its window
//! grown from the initial 64 KiB towards `recv_buffer` and a transfer as fast
//! as with the largest buffer from the start; one that does not read keeps the
//! initial buffer; the right edge the receiver advertises never moves left
//! (RFC 7323 section 2.4, RFC 9293 section 3.8.6.2.2); with auto-tuning off the
//! buffer is `recv_buffer` from the first segment, as before.
//!
//! The windows are read off the receiver's frames by etherparse, and scaled by
//! the shift its SYN-ACK offered, not taken from the engine.
//!
//! The engines are stepped as `Sim::poll` steps them, except that each one
//! transmits after every frame it is handed, as a host taking frames one at a
//! time would: the receiver then acknowledges every second segment and slow
//! start doubles the congestion window per RTT. (`Sim::poll` answers a burst
//! that arrives at one instant, the link having no bandwidth, with a single
//! ACK, and RFC 3465's limit of 2 MSS per ACK then makes slow start linear:
//! the window would hardly ever be what limits the sender.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::pattern;
use linerate_toe::sim::{Link, LinkConfig, Sim};
use linerate_toe::{Engine, Instant, TcpConfig, TcpInfo};
use linerate_wire::etherparse::{SlicedPacket, TcpOptionElement, TransportSlice};
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(10);
const MAX: usize = 4 << 20;
const INITIAL: usize = 64 << 10;

/// How the receiving application reads.
#[derive(Clone, Copy)]
enum Reader {
    /// Everything there is, at every step.
    Prompt,
    /// Never.
    Never,
    /// `bytes` every `every`.
    Slow { bytes: usize, every: Duration },
}

/// A segment the receiver sent, as etherparse reads it.
#[derive(Debug, Clone, Copy)]
struct Adv {
    at: Instant,
    syn: bool,
    ack: u32,
    /// The window in bytes: the field, scaled unless in the SYN-ACK.
    wnd: u64,
}

impl Adv {
    fn right(&self) -> u32 {
        self.ack.wrapping_add(self.wnd as u32)
    }
}

struct Outcome {
    /// Virtual time from connect until the reader had every byte.
    elapsed: Option<Duration>,
    /// Bytes read.
    got: usize,
    /// Every segment the receiver sent, from its SYN-ACK on.
    advs: Vec<Adv>,
    /// The shift the receiver's SYN-ACK offered.
    shift: u8,
    info: TcpInfo,
    /// The instants at which the receiver's capacity grew.
    growths: Vec<Instant>,
    grown: u64,
    /// Segments the sender sent again (retransmissions and probes).
    retrans: u64,
    /// Buffer storage the receiver holds at the end.
    buffers: usize,
}

/// Sends `total` bytes from engine 0 to engine 1 over `link`, both with `tune` applied to their TCP defaults (send buffers of
/// [`MAX`]), the receiver reading as `reader` says, for at most `limit` of
/// virtual time; every frame engine 1 sends is parsed on the way.
fn run(
    link: LinkConfig,
    tune: impl Fn(&mut TcpConfig),
    total: usize,
    reader: Reader,
    limit: Duration,
) -> Outcome {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.tcp.send_buffer = MAX;
            c.tcp.recv_buffer = MAX;
            tune(&mut c.tcp);
            Engine::new(c, 7 + u64::from(i))
        })
        .collect();
    let mut sim = Sim::new(engines, link);
    let l = sim.engines[1].tcp_listen(5001).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:5001".parse().unwrap())
        .unwrap();
    let data = pattern(1 << 20, 3);
    let (mut sent, mut got, mut s) = (0usize, 0usize, None);
    let mut buf = vec![0u8; 1 << 20];
    let mut advs = Vec::new();
    let mut shift = None;
    let mut next_read = sim.now;
    let mut elapsed = None;
    let (mut growths, mut cap) = (Vec::new(), 0);
    let end = sim.now + limit;
    loop {
        // The applications.
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        while sent < total {
            let off = sent % data.len();
            let n = (total - sent).min(data.len() - off);
            match sim.engines[0].tcp_send(c, &data[off..off + n]) {
                Ok(k) if k > 0 => sent += k,
                _ => break,
            }
        }
        if let Some(s) = s {
            let want = match reader {
                Reader::Prompt => buf.len(),
                Reader::Never => 0,
                Reader::Slow { bytes, every } if sim.now >= next_read => {
                    next_read = sim.now + every;
                    bytes
                }
                Reader::Slow { .. } => 0,
            };
            let mut left = want;
            while left > 0 {
                let k = left.min(buf.len());
                match sim.engines[1].tcp_recv(s, &mut buf[..k]) {
                    Ok(n) if n > 0 => {
                        let at = got % data.len();
                        let whole = data.iter().cycle().skip(at).take(n);
                        assert!(buf[..n].iter().eq(whole), "bytes at {got}");
                        got += n;
                        left -= n;
                    }
                    _ => break,
                }
            }
        }
        if got == total && elapsed.is_none() {
            elapsed = Some(sim.now.saturating_duration_since(Instant::ZERO));
            break;
        }
        // One step of the simulation, as `Sim::poll` but transmitting after
        // each frame delivered, and tapping engine 1's output.
        let now = sim.now;
        let Sim { link, engines, .. } = &mut sim;
        for (port, e) in engines.iter_mut().enumerate() {
            let mut transmit = |e: &mut Engine, link: &mut Link| {
                e.poll_transmit(now, &mut |f, m| {
                    if port == 1 {
                        tap(f, now, &mut shift, &mut advs);
                    }
                    link.send(now, port, f, m);
                });
            };
            while let Some((f, m)) = link.recv(now, port) {
                e.handle_frame(now, &f, &m);
                transmit(e, link);
            }
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            transmit(e, link);
        }
        if let Some(s) = s {
            let now_cap = sim.engines[1].tcp_info(s).unwrap().recv_window_cap;
            if cap > 0 && now_cap > cap {
                growths.push(now);
            }
            cap = now_cap;
        }
        let wake = match reader {
            Reader::Slow { .. } if next_read > sim.now => Some(next_read),
            _ => None,
        };
        match [sim.next_event(), wake].into_iter().flatten().min() {
            Some(t) if t <= end => sim.now = t.max(sim.now),
            _ => break,
        }
    }
    let s = s.expect("accepted");
    Outcome {
        elapsed,
        got,
        advs,
        shift: shift.expect("SYN-ACK seen"),
        info: sim.engines[1].tcp_info(s).unwrap(),
        growths,
        grown: sim.engines[1].counters().tcp_rcvbuf_grown,
        retrans: sim.engines[0].counters().tcp_retrans_segs,
        buffers: sim.engines[1].memory_usage().buffers,
    }
}

/// Records a TCP segment of the receiver's: its acknowledgement and window,
/// scaled by the shift of its SYN-ACK.
fn tap(frame: &[u8], at: Instant, shift: &mut Option<u8>, advs: &mut Vec<Adv>) {
    let Ok(p) = SlicedPacket::from_ethernet(frame) else {
        return;
    };
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        return;
    };
    if !t.ack() || t.rst() {
        return;
    }
    let field = u64::from(t.window_size());
    let wnd = if t.syn() {
        let ws = t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::WindowScale(s)) => Some(s),
            _ => None,
        });
        *shift = Some(ws.unwrap_or(0));
        field
    } else {
        field << shift.expect("SYN-ACK first")
    };
    advs.push(Adv {
        at,
        syn: t.syn(),
        ack: t.acknowledgment_number(),
        wnd,
    });
}

/// The link: [`LATENCY`] each way, no faults.
fn link() -> LinkConfig {
    LinkConfig {
        latency: LATENCY,
        ..LinkConfig::default()
    }
}

/// The first window the receiver offered after its SYN-ACK, as a right edge
/// less the SYN-ACK's acknowledgement (its IRS + 1).
fn first_right(advs: &[Adv]) -> u32 {
    let synack = advs.first().unwrap();
    assert!(synack.syn);
    let first = advs.iter().find(|a| !a.syn).unwrap();
    first.right().wrapping_sub(synack.ack)
}

/// No right edge is left of an earlier one (sequence space arithmetic) by a
/// whole unit of the window scale or more. Less than a unit is the one
/// retraction RFC 7323 section 2.4 allows: a window field counts whole units,
/// so when RCV.NXT moves by a number of bytes that is not a multiple of the
/// unit and the application read nothing, the edge can only be said exactly
/// by advertising more than the buffer holds, or slightly less (this stack's
/// choice; the receiver still takes everything up to the furthest edge it
/// advertised, which the transfers check: no retransmissions on a clean
/// link). A window that shrank would move the edge left by a unit or more.
fn assert_right_edge_monotonic(advs: &[Adv], shift: u8) {
    let unit = 1i64 << shift;
    let mut furthest = advs.first().unwrap().right();
    for a in advs {
        let moved = i64::from(a.right().wrapping_sub(furthest) as i32);
        assert!(moved > -unit, "right edge moved left by {}: {a:?}", -moved);
        if moved > 0 {
            furthest = a.right();
        }
    }
}

fn autotune_on(t: &mut TcpConfig) {
    t.recv_autotune = true;
    t.recv_buffer_initial = INITIAL;
}

#[test]
fn a_prompt_reader_grows_the_window_and_the_transfer_runs_at_the_full_buffers_pace() {
    let total = 8 << 20;
    let limit = Duration::from_secs(30);
    let auto = run(link(), autotune_on, total, Reader::Prompt, limit);
    let small = run(
        link(),
        |t| {
            t.recv_autotune = false;
            t.recv_buffer = INITIAL;
        },
        total,
        Reader::Prompt,
        limit,
    );
    let big = run(
        link(),
        |t| t.recv_autotune = false,
        total,
        Reader::Prompt,
        limit,
    );
    let (ta, ts, tb) = (
        auto.elapsed.unwrap(),
        small.elapsed.unwrap(),
        big.elapsed.unwrap(),
    );
    println!("auto {ta:?}, fixed 64 KiB {ts:?}, fixed 4 MiB {tb:?}");
    // A 64 KiB window over a 20 ms RTT carries 3.2 MB/s: 8 MiB take 2.6 s. The
    // grown window must do several times better, and about as well as the
    // largest buffer from the start (slow start bounds both).
    assert!(ta * 5 < ts, "auto {ta:?} vs fixed 64 KiB {ts:?}");
    assert!(ta < tb + tb / 5, "auto {ta:?} vs fixed 4 MiB {tb:?}");
    // The window started at the initial 64 KiB (the SYN-ACK's unscaled field
    // says 65,535; the first ACK's right edge is 64 KiB past the IRS, less the
    // rounding to the 128-byte scale unit) and grew towards the 4 MiB allowed.
    assert_eq!(auto.advs[0].wnd, 65_535);
    let first = first_right(&auto.advs);
    assert!(
        (INITIAL as u32 - 128..=INITIAL as u32).contains(&first),
        "{first}"
    );
    let most = auto.advs.iter().map(|a| a.wnd).max().unwrap();
    assert!(most >= (MAX / 2) as u64, "largest window {most}");
    assert!(most <= MAX as u64);
    assert!(auto.grown > 0);
    assert_eq!(auto.growths.len() as u64, auto.grown);
    assert!(auto.info.recv_window_cap > INITIAL && auto.info.recv_window_cap <= MAX);
    // The window scale is the one for the 4 MiB the window may grow to.
    assert_eq!(auto.shift, 7);
    assert_right_edge_monotonic(&auto.advs, auto.shift);
    // Nothing the receiver was offered was refused: no retransmissions.
    assert_eq!((auto.retrans, small.retrans, big.retrans), (0, 0, 0));
    // Each growth was announced as it happened: at that instant the receiver
    // sent a segment whose right edge is past every one before.
    for g in &auto.growths {
        let before = auto.advs.iter().filter(|a| a.at < *g);
        let furthest = before
            .map(|a| a.right())
            .max_by_key(|r| r.wrapping_sub(auto.advs[0].ack));
        let at_g = auto.advs.iter().filter(|a| a.at == *g).map(Adv::right);
        let base = auto.advs[0].ack;
        let past = |r: u32| furthest.is_none_or(|f| r.wrapping_sub(base) > f.wrapping_sub(base));
        assert!(at_g.clone().any(past), "growth at {g:?} not announced");
    }
    // The small window did not last: the sender, with 64 KiB per RTT, was
    // offered more than 256 KiB within a few RTTs.
    let t0 = auto.advs[0].at;
    let t_big = auto.advs.iter().find(|a| a.wnd > 256 << 10).unwrap().at;
    assert!(
        t_big.saturating_duration_since(t0) < LATENCY * 2 * 6,
        "window over 256 KiB only at {t_big:?}"
    );
}

#[test]
fn a_reader_that_does_not_read_keeps_the_initial_buffer() {
    let out = run(
        link(),
        autotune_on,
        2 << 20,
        Reader::Never,
        Duration::from_secs(5),
    );
    assert_eq!(out.got, 0);
    assert_eq!(out.info.recv_window_cap, INITIAL);
    // The window was filled (up to what the 128-byte scale unit can say).
    assert!(
        out.info.recv_queue > INITIAL - 128,
        "{}",
        out.info.recv_queue
    );
    assert_eq!(out.grown, 0);
    assert!(out.advs.iter().all(|a| a.wnd <= INITIAL as u64));
    // The storage holds the 64 KiB, not the 4 MiB the window could grow to.
    assert!(out.buffers <= 2 * INITIAL, "{} bytes held", out.buffers);
    assert_right_edge_monotonic(&out.advs, out.shift);
}

#[test]
fn a_reader_slower_than_the_window_does_not_grow_it() {
    // 8 KiB every 100 ms, far below 64 KiB per 20 ms RTT.
    let slow = Reader::Slow {
        bytes: 8 << 10,
        every: Duration::from_millis(100),
    };
    let out = run(link(), autotune_on, 1 << 20, slow, Duration::from_secs(3));
    assert!(out.got >= 200 << 10, "read {}", out.got);
    assert_eq!(out.info.recv_window_cap, INITIAL);
    assert_eq!(out.grown, 0);
    assert_right_edge_monotonic(&out.advs, out.shift);
}

#[test]
fn the_right_edge_never_moves_left_while_the_window_grows() {
    // Reading in bursts while the buffer grows, over a clean link and over
    // one that loses and reorders (out-of-order data, duplicate ACKs, SACK):
    // ACKs that cross growth and reads alike keep the edge or move it right.
    let bursty = Reader::Slow {
        bytes: 600 << 10,
        every: Duration::from_millis(15),
    };
    let lossy = LinkConfig {
        loss: 0.01,
        reorder: 0.02,
        reorder_delay: Duration::from_millis(3),
        seed: 11,
        ..link()
    };
    for (l, reader) in [
        (link(), bursty),
        (lossy.clone(), bursty),
        (lossy, Reader::Prompt),
    ] {
        let out = run(l, autotune_on, 6 << 20, reader, Duration::from_secs(60));
        assert_eq!(out.got, 6 << 20);
        assert!(out.grown > 0);
        assert!(out.advs.len() > 1000, "{}", out.advs.len());
        assert_right_edge_monotonic(&out.advs, out.shift);
    }
}

#[test]
fn autotune_off_is_the_fixed_buffer_from_the_start() {
    for tune in [
        (|t: &mut TcpConfig| t.recv_autotune = false) as fn(&mut TcpConfig),
        // An initial size at or above the maximum is the same thing.
        |t: &mut TcpConfig| t.recv_buffer_initial = MAX,
    ] {
        let out = run(
            link(),
            tune,
            4 << 20,
            Reader::Prompt,
            Duration::from_secs(30),
        );
        assert!(out.elapsed.is_some());
        assert_eq!(out.grown, 0);
        assert_eq!(out.info.recv_window_cap, MAX);
        assert_eq!(out.shift, 7);
        // The first ACK after the SYN-ACK offers the whole 4 MiB.
        let first = first_right(&out.advs);
        assert!((MAX as u32 - 128..=MAX as u32).contains(&first), "{first}");
        assert_right_edge_monotonic(&out.advs, out.shift);
    }
}

#[test]
fn without_timestamps_the_window_measurement_drives_the_growth() {
    // No TSecr to time the round trip by: the time the peer takes to fill a
    // window stands in (and only its minimum counts).
    let no_ts = |t: &mut TcpConfig| {
        autotune_on(t);
        t.timestamps = false;
    };
    let limit = Duration::from_secs(30);
    let auto = run(link(), no_ts, 8 << 20, Reader::Prompt, limit);
    let big = run(
        link(),
        |t| {
            t.timestamps = false;
            t.recv_autotune = false;
        },
        8 << 20,
        Reader::Prompt,
        limit,
    );
    let (ta, tb) = (auto.elapsed.unwrap(), big.elapsed.unwrap());
    println!("no timestamps: auto {ta:?}, fixed 4 MiB {tb:?}");
    assert!(auto.grown > 0);
    assert!(ta < tb + tb / 4, "auto {ta:?} vs fixed 4 MiB {tb:?}");
    // 8 MiB in 64 KiB windows would take over 2.5 s.
    assert!(ta < Duration::from_secs(1), "{ta:?}");
    assert_right_edge_monotonic(&auto.advs, auto.shift);
}

#[test]
fn without_window_scaling_there_is_nothing_to_grow_into() {
    // The window field cannot say more than 65,535 bytes: the 64 KiB buffer
    // is already all of it.
    let out = run(
        link(),
        |t| {
            autotune_on(t);
            t.window_scaling = false;
        },
        2 << 20,
        Reader::Prompt,
        Duration::from_secs(30),
    );
    assert!(out.elapsed.is_some());
    assert_eq!(out.shift, 0);
    assert_eq!(out.grown, 0);
    assert_eq!(out.info.recv_window_cap, INITIAL);
    assert!(out.advs.iter().all(|a| a.wnd <= 65_535));
}
