//! A linerate engine facing the Linux kernel over a TAP (docs/testing.md: "Linux
//! TCP against the engine"):
//! the TAP (with a `virtio_net_hdr`) is moved into a network namespace this
//! host creates, the kernel gets [`KERNEL_IP`]/24 on it, and the engine runs at
//! [`OUR_IP`] on this side, driven by the runtime's [`Driver`] (the production
//! loop: batches received into `handle_frames`, timers, frames transmitted in
//! batches of pooled buffers) from [`TapHost::pump`] on the caller's thread,
//! which waits on the TAP's descriptor for a moment when a round did nothing. Kernel sockets run on threads that have
//! entered the namespace ([`Netns::spawn`]). The namespace and the TAP go away
//! when the host drops, also when a test fails.
//!
//! Used by the kernel interop tests (`tests/system_toe_tap_udp.rs`,
//! `tests/system_rt_tap.rs` and others) and the linerate-versus-kernel
//! benchmark (`benches/tcp_kernel.rs`). Root only.

use crate::netns::{self, Netns};
use linerate_nic::tap::Tap;
use linerate_nic::{Counter, Nic};
use linerate_rt::Driver;
use linerate_toe::{Config, Engine, Instant, ListenerHandle, SocketHandle};
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The engine's MAC address.
pub const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x02];
/// The kernel's address on the TAP.
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The engine's address.
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// A TAP named after `prefix` (at most 4 characters) with the kernel's TSO and
/// checksum offloads on or off, moved into a new namespace where the kernel has
/// [`KERNEL_IP`]/24 on it, up. The caller drives the TAP (an engine at
/// [`OUR_IP`]); both go away when dropped.
pub fn tap_in_namespace(prefix: &str, offloads: bool) -> io::Result<(Tap, Netns)> {
    tap_in_namespace_ring(prefix, offloads, None)
}

/// [`tap_in_namespace`] with the TAP batched through an io_uring of depth
/// `ring` (`TapConfig::io_uring`) if given.
pub fn tap_in_namespace_ring(
    prefix: &str,
    offloads: bool,
    ring: Option<u32>,
) -> io::Result<(Tap, Netns)> {
    if !netns::is_root() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a TAP host needs root",
        ));
    }
    let ns = Netns::new(prefix)?;
    let tap = crate::impair::tap_in_ring(&ns, offloads, KERNEL_IP, ring)?;
    Ok((tap, ns))
}

/// An engine over a TAP whose other side is the kernel in a namespace.
pub struct TapHost {
    driver: Driver<Tap>,
    /// The namespace the kernel side lives in.
    pub ns: Netns,
    epoch: std::time::Instant,
}

impl TapHost {
    /// A TAP named after `prefix` (at most 4 characters) with the kernel's TSO
    /// and checksum offloads on or off, moved into a new namespace, and an
    /// engine with the same offload setting and 4 MiB socket buffers.
    pub fn new(prefix: &str, offloads: bool) -> io::Result<TapHost> {
        TapHost::with_config(prefix, offloads, |_| {})
    }

    /// [`TapHost::new`] with the engine's configuration changed by `tune`.
    pub fn with_config(
        prefix: &str,
        offloads: bool,
        tune: impl FnOnce(&mut Config),
    ) -> io::Result<TapHost> {
        let (tap, ns) = tap_in_namespace(prefix, offloads)?;
        let mut cfg = Config::new(OUR_MAC).with_ipv4(OUR_IP, 24);
        cfg.offloads = offloads;
        cfg.tcp.send_buffer = 4 << 20;
        cfg.tcp.recv_buffer = 4 << 20;
        tune(&mut cfg);
        let engine = Engine::new(cfg, 0x5eed);
        let driver = Driver::new(engine, tap, 0).map_err(io::Error::other)?;
        Ok(TapHost {
            driver,
            ns,
            epoch: std::time::Instant::now(),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.driver.engine()
    }

    /// The engine, mutable (for socket calls between pumps).
    pub fn engine_mut(&mut self) -> &mut Engine {
        self.driver.engine_mut()
    }

    /// The TAP.
    pub fn tap(&self) -> &Tap {
        self.driver.nic()
    }

    /// Super-frames (GSO) received from the kernel so far.
    pub fn rx_gso(&self) -> u64 {
        self.tap().counters().total(Counter::RxGsoPackets)
    }

    /// Super-frames (GSO) sent to the kernel so far.
    pub fn tx_gso(&self) -> u64 {
        self.tap().counters().total(Counter::TxGsoPackets)
    }

    /// The engine's clock: time since the host was made.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// One round of the driver; if it moved no frame, waits up to `wait` (or the
    /// engine's next timer, if sooner) for the TAP to have frames.
    pub fn pump(&mut self, wait: Duration) -> io::Result<()> {
        let before = self.driver.stats();
        let now = self.now();
        let next = self.driver.poll(now).map_err(io::Error::other)?;
        let after = self.driver.stats();
        if after.rx_frames != before.rx_frames || after.tx_frames != before.tx_frames {
            return Ok(());
        }
        self.driver
            .wait(self.now(), next, wait)
            .map_err(io::Error::other)?;
        Ok(())
    }

    /// Pumps until `done` or `limit` passes (a `TimedOut` error naming `what`).
    pub fn pump_until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&mut TapHost) -> bool,
    ) -> io::Result<()> {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            if std::time::Instant::now() >= end {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("timed out: {what}"),
                ));
            }
            self.pump(Duration::from_millis(2))?;
        }
        Ok(())
    }

    /// Pumps until a connection is accepted on `l` (10 s at most).
    pub fn accept(&mut self, l: ListenerHandle) -> io::Result<SocketHandle> {
        let mut s = None;
        self.pump_until(Duration::from_secs(10), "accept", |h| {
            s = h.engine_mut().tcp_accept(l).ok();
            s.is_some()
        })?;
        s.ok_or_else(|| io::Error::other("accept"))
    }
}
