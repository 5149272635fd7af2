//! `LINERATE_STATS=file`: at exit, the engines' counters (queue by queue)
//! and each offloaded TCP connection's figures, taken when the program
//! closed it (or at exit, for those still open), written to `file`.
//!
//! On AF_XDP (`nic.xdp`), `steer NAME VALUE` lines say what the steering
//! program sent to the kernel's stack (`passed`) and to linerate (`port`,
//! `flow`, ..., `redirected` in all).
//!
//! The figures come from the queue threads (a round trip per connection),
//! so they are only gathered when the variable is set.

use crate::stack::{self, log};
use linerate_rt::TcpStream;
use linerate_toe::{TcpInfo, TcpState};
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Where the statistics go, read once.
fn path() -> Option<&'static std::path::Path> {
    static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| std::env::var_os("LINERATE_STATS").map(Into::into))
        .as_deref()
}

/// Lines of the connections the program closed.
static CLOSED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// One connection's line.
fn line(fd: i32, s: &TcpStream, i: Option<&TcpInfo>) -> String {
    let mut l = format!("tcp fd {fd} {} -> {}", s.local_addr(), s.peer_addr());
    match i {
        Some(i) => {
            let _ = write!(
                l,
                " state {} mss {} cwnd {} srtt_us {} rto_us {} retransmits {} unacked {} sack {} timestamps {}",
                state_name(i.state),
                i.snd_mss,
                i.cwnd,
                i.srtt.map_or(0, |d| d.as_micros()),
                i.rto.as_micros(),
                i.retransmits,
                i.unacked,
                i.sack,
                i.timestamps,
            );
        }
        None => l.push_str(" state gone"),
    }
    l
}

fn state_name(s: TcpState) -> &'static str {
    match s {
        TcpState::Closed => "CLOSED",
        TcpState::Listen => "LISTEN",
        TcpState::SynSent => "SYN-SENT",
        TcpState::SynReceived => "SYN-RECEIVED",
        TcpState::Established => "ESTABLISHED",
        TcpState::FinWait1 => "FIN-WAIT-1",
        TcpState::FinWait2 => "FIN-WAIT-2",
        TcpState::CloseWait => "CLOSE-WAIT",
        TcpState::Closing => "CLOSING",
        TcpState::LastAck => "LAST-ACK",
        TcpState::TimeWait => "TIME-WAIT",
    }
}

/// The figures of `s`, from its queue thread.
fn info(s: &TcpStream) -> Option<TcpInfo> {
    let h = s.engine_handle();
    let st = stack::stack()?;
    st.handle
        .with_engine_blocking(s.queue(), move |e| e.tcp_info(h))
        .ok()?
        .ok()
}

/// The program closes connection `s` (its last fd, `fd`): keeps its line.
pub(crate) fn closing(fd: i32, s: &TcpStream) {
    if path().is_none() {
        return;
    }
    let l = line(fd, s, info(s).as_ref());
    CLOSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(l);
}

/// Whether `LINERATE_STATS` is set.
pub(crate) fn enabled() -> bool {
    path().is_some()
}

/// The line of connection `s` (fd `fd`), still open at exit.
pub(crate) fn open_line(fd: i32, s: &TcpStream) -> String {
    format!("{} (open at exit)", line(fd, s, info(s).as_ref()))
}

/// The `name: value,` lines of a pretty Debug form, as `prefix name value`.
fn numbers(out: &mut String, prefix: &str, debug: &str) {
    for l in debug.lines() {
        if let Some((name, v)) = l.trim().trim_end_matches(',').split_once(": ")
            && v.bytes().all(|b| b.is_ascii_digit())
        {
            let _ = writeln!(out, "{prefix} {name} {v}");
        }
    }
}

/// At exit, before the runtime stops: writes the file; `open` are the
/// lines of the connections still open ([`open_line`]).
pub(crate) fn write(open: &[String]) {
    let Some(p) = path() else {
        return;
    };
    // A forked child with a runtime of its own writes beside the program's
    // file, with its process id appended.
    let child;
    let p = if crate::sock::generation() > 0 {
        child = std::path::PathBuf::from(format!("{}.{}", p.display(), crate::ffi::sys::pid()));
        child.as_path()
    } else {
        p
    };
    let mut out = String::from("# linerate-preload statistics (LINERATE_STATS)\n");
    if let Some(st) = stack::stack() {
        for q in 0..st.handle.queues() {
            if let Some(qs) = st.handle.stats(q) {
                let _ = writeln!(out, "queue {q} {qs:?}");
            }
            let counters = st
                .handle
                .with_engine_blocking(q, |e| format!("{:#?}", e.counters()));
            if let Ok(c) = counters {
                numbers(&mut out, &format!("queue {q}"), &c);
            }
        }
        #[cfg(feature = "af-xdp")]
        if let Some(steer) = &st.steering {
            // What the steering program sent where: to the kernel's stack
            // (`passed`) or to linerate (by port, 4-tuple, ...).
            match steer.counts() {
                Ok(c) => {
                    numbers(&mut out, "steer", &format!("{c:#?}"));
                    let _ = writeln!(out, "steer redirected {}", c.redirected());
                }
                Err(e) => log(format_args!(
                    "LINERATE_STATS: cannot read the steering counters: {e}"
                )),
            }
            let _ = writeln!(out, "steer refused {}", steer.refused());
        }
    }
    for l in CLOSED.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        let _ = writeln!(out, "{l} (closed)");
    }
    for l in open {
        let _ = writeln!(out, "{l}");
    }
    if let Err(e) = std::fs::write(p, out) {
        log(format_args!(
            "LINERATE_STATS: cannot write {}: {e}",
            p.display()
        ));
    }
}
