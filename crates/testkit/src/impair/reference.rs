//! The reference: a second kernel where linerate was, this process relaying
//! frames between the two TAPs through the same impaired wrapper.

use super::kernel;
use super::nic::{Impaired, ImpairedConfig, ImpairedStats};
use super::setup::{
    Direction, KERNEL_IP, PEER_IP, RunConfig, RunResult, check_deadline, joined, tap_in,
};
use crate::netns::Netns;
use crate::relay::Relay;
use linerate_nic::Nic;
use linerate_nic::pcap::PcapRecorder;
use std::io;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;

/// `super::linerate` (feature `rt`) with a kernel socket in its own namespace and TAP in
/// place of linerate's engine: the kernel facing linerate ("K", at
/// [`KERNEL_IP`], with `cfg.kernel`'s options) is wrapped exactly as in the
/// linerate run, so the same frames of K meet the same draws. Root only.
pub fn kernel_to_kernel(cfg: &RunConfig) -> io::Result<RunResult> {
    let ns_k = Netns::new("lrk")?;
    let ns_l = Netns::new("lrl")?;
    cfg.kernel.apply(&ns_k)?;
    let tap_k = tap_in(&ns_k, cfg.offloads, KERNEL_IP)?;
    let tap_l = tap_in(&ns_l, cfg.offloads, PEER_IP)?;
    let a = Impaired::new(
        tap_k,
        ImpairedConfig {
            inbound: cfg.impairment,
            outbound: cfg.impairment,
            seed: cfg.seed,
            coalesce: cfg.offloads,
        },
    );
    let mut a = a;
    // What the kernel facing the impairment sends and gets, for a look with
    // tshark (the linerate run's LINERATE_IMPAIR_PCAP records the same TAP).
    let pcap = match std::env::var_os("LINERATE_IMPAIR_PCAP_K") {
        Some(path) => {
            let r = Arc::new(PcapRecorder::create(path)?);
            a.set_recorder(Some(r.clone()));
            Some(r)
        }
        None => None,
    };
    let mut relay = Relay::new(a, tap_l);
    let end = std::time::Instant::now() + cfg.limit;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (send_ns, recv_ns, at) = match cfg.direction {
        Direction::KernelToLinerate => (&ns_k, &ns_l, SocketAddrV4::new(PEER_IP, 5001)),
        Direction::LinerateToKernel => (&ns_l, &ns_k, SocketAddrV4::new(KERNEL_IP, 5002)),
    };
    let receiver = kernel::receiver(recv_ns, at, ready_tx, cfg.limit)?;
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| io::Error::other("the kernel's receiver did not listen"))?;
    let sender = kernel::sender(send_ns, at, cfg.seed, cfg.len, cfg.limit)?;
    while !(sender.is_finished() && receiver.is_finished()) {
        check_deadline(end, "kernel to kernel")?;
        let wait = relay
            .a
            .time_to_next()
            .map_or(Duration::from_millis(2), |d| {
                d.min(Duration::from_millis(2))
            });
        relay.pump(wait)?;
    }
    if let Some(r) = pcap {
        r.flush()?;
    }
    let sent = joined(sender)?;
    if std::env::var_os("LINERATE_IMPAIR_DEBUG").is_some() {
        eprintln!("kernel sender: {:?}", sent.info);
        kernel::print_recovery_counters(send_ns);
    }
    let rec = joined(receiver)?;
    kernel::check(rec.len, &rec.digest, cfg.seed, cfg.len)?;
    let secs = rec.end.saturating_duration_since(sent.start).as_secs_f64();
    let k = match cfg.direction {
        Direction::KernelToLinerate => sent.info,
        Direction::LinerateToKernel => rec.info,
    };
    Ok(RunResult {
        secs,
        sender_retrans: u64::from(sent.info.total_retrans),
        kernel: k,
        from_kernel: relay.a.inbound(),
        to_kernel: relay.a.outbound(),
        stats: ImpairedStats {
            refused: relay.a.stats().refused + relay.refused,
            ..relay.a.stats()
        },
    })
}
