//! One [`Service`] (an engine, or anything else that takes and hands out frames)
//! over one NIC queue, with no thread of its own.
//!
//! [`Driver::poll`] does one round of I/O: it receives what waits on the queue (in
//! batches, up to a budget), feeds the frames to [`Service::handle_frames`], runs
//! due timers, then moves every frame [`Service::poll_transmit_into`] hands out
//! into pooled buffers of the NIC (or, for frames the service already holds, as
//! they are) and transmits them in batches, keeping what the backend has no room
//! for. It returns when to poll next.
//!
//! The engine is the usual service ([`Driver::new`]); a forwarding service (a
//! bridge, a vNIC switch) implements [`Service`] and runs on the same loop with
//! [`Driver::with_service`], its batching, back-pressure and counters.
//! Between polls the caller waits on [`Driver::wait`] (the queue's readiness, up to
//! that deadline) or, in an existing event loop, on [`Driver::readiness`] itself.
//!
//! Everything runs on the caller's thread. Once the pool is warm a round
//! allocates nothing: received buffers go back to their pool when the batch is
//! cleared, transmitted ones when the peer (or the backend) drops them, and the two
//! batches keep their capacity.

use super::RtError;
use linerate_nic::NicCaps;
use linerate_nic::{Batch, DEFAULT_BATCH, Frags, Frame, Nic, NicError, Pool, Readiness};
use linerate_offload::OffloadMeta;
use linerate_toe::Instant;
use linerate_toe::{Engine, TxSink};
use std::time::Duration;

/// Frames the transmit batch may hold while the backend takes none; past that the
/// driver stops taking frames from the engine, which keeps them.
const TX_BACKLOG: usize = 8 * DEFAULT_BATCH;

/// What a [`Driver`] has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverStats {
    /// Calls to [`Driver::poll`] (or rounds of the runtime's queue loop).
    pub polls: u64,
    /// Frames received from the queue and handed to the engine.
    pub rx_frames: u64,
    /// Frames the backend took for transmission.
    pub tx_frames: u64,
    /// Frames the backend refused (oversize, unsupported offload, malformed);
    /// each is dropped and counted in the NIC's `tx_dropped_*` counters too.
    pub tx_refused: u64,
    /// Frames dropped because the link was down ([`NicError::LinkDown`]):
    /// the driver goes on, and frames flow again once the link is up.
    pub tx_link_down: u64,
}

/// What a [`Driver`] drives: something that takes batches of received frames,
/// hands out frames to send, and says when it next needs the time. Time is an
/// argument, as in the engine ([`Instant`], the caller's clock).
pub trait Service {
    /// Takes every frame of `batch`, leaving it empty.
    fn handle_frames(&mut self, now: Instant, batch: &mut Batch);

    /// Hands every frame it has to send now to `sink`: written into buffers the
    /// sink lends ([`TxSink::buffer`]) or, if the service already holds it in a
    /// buffer, as it is ([`TxSink::push_frame`]). What the sink refuses, the
    /// service keeps for the next call.
    fn poll_transmit_into<S: TxSink>(&mut self, now: Instant, sink: &mut S);

    /// When [`Service::handle_timeout`] is next due, if ever.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Runs what is due at `now`.
    fn handle_timeout(&mut self, now: Instant);

    /// Whether the service can hand its frames to a NIC with `caps` (the engine
    /// checks its offloads and its configuration); by default it can.
    fn fits(&self, caps: &NicCaps) -> Result<(), RtError> {
        let _ = caps;
        Ok(())
    }

    /// Whether the service takes scatter-gather frames, chains included
    /// ([`Nic::set_rx_sg`]): the driver asks the NIC for them if so. By
    /// default it does not, and every frame it gets is linear.
    fn takes_chains(&self) -> bool {
        false
    }

    /// A number that changes whenever [`Service::rx_filter`] does; 0 (the
    /// default) while the service wants no NIC filter.
    fn rx_filter_generation(&self) -> u64 {
        0
    }

    /// The receive filter the service wants of the NIC: its unicast address
    /// (returned) and the Ethernet group addresses (into `groups`), for
    /// [`Nic::set_multicast_filter`].
    fn rx_filter(&self, groups: &mut Vec<[u8; 6]>) -> [u8; 6] {
        let _ = groups;
        [0; 6]
    }
}

impl Service for Engine {
    #[inline]
    fn handle_frames(&mut self, now: Instant, batch: &mut Batch) {
        Engine::handle_frames(self, now, batch);
    }

    #[inline]
    fn poll_transmit_into<S: TxSink>(&mut self, now: Instant, sink: &mut S) {
        Engine::poll_transmit_into(self, now, sink);
    }

    #[inline]
    fn poll_timeout(&self) -> Option<Instant> {
        Engine::poll_timeout(self)
    }

    #[inline]
    fn handle_timeout(&mut self, now: Instant) {
        Engine::handle_timeout(self, now);
    }

    /// The engine takes chains: a shim's frag-list GRO then hands up runs
    /// whose payloads the engine reads where they arrived.
    fn takes_chains(&self) -> bool {
        true
    }

    /// Once a socket has joined a multicast group: the engine's MAC and its
    /// groups (`Engine::multicast_filter`).
    fn rx_filter_generation(&self) -> u64 {
        self.multicast_macs_generation()
    }

    fn rx_filter(&self, groups: &mut Vec<[u8; 6]>) -> [u8; 6] {
        groups.clear();
        groups.extend(self.multicast_filter());
        self.config().mac
    }

    fn fits(&self, caps: &NicCaps) -> Result<(), RtError> {
        self.config().validate()?;
        if offloads_fit(self.config(), caps) {
            Ok(())
        } else {
            Err(RtError::Offloads)
        }
    }
}

/// A service behind a `RefCell`: the loop that owns it reaches it without a
/// check (`get_mut`), and lends it by shared reference to code that borrows it
/// for a moment (the runtime's tasks on the queue thread, between the loop's
/// steps).
impl<S: Service> Service for core::cell::RefCell<S> {
    #[inline]
    fn handle_frames(&mut self, now: Instant, batch: &mut Batch) {
        self.get_mut().handle_frames(now, batch);
    }

    #[inline]
    fn poll_transmit_into<T: TxSink>(&mut self, now: Instant, sink: &mut T) {
        self.get_mut().poll_transmit_into(now, sink);
    }

    #[inline]
    fn poll_timeout(&self) -> Option<Instant> {
        // Never borrowed while the loop runs its steps; were it, the loop
        // looks again at its next round.
        self.try_borrow().ok().and_then(|s| s.poll_timeout())
    }

    #[inline]
    fn handle_timeout(&mut self, now: Instant) {
        self.get_mut().handle_timeout(now);
    }

    fn fits(&self, caps: &NicCaps) -> Result<(), RtError> {
        self.try_borrow().map_or(Ok(()), |s| s.fits(caps))
    }

    fn takes_chains(&self) -> bool {
        self.try_borrow().is_ok_and(|s| s.takes_chains())
    }
}

/// One [`Service`] (by default an [`Engine`]) driving one queue of a [`Nic`]. See
/// the [module docs](self).
#[derive(Debug)]
pub struct Driver<N: Nic, S: Service = Engine> {
    engine: S,
    nic: N,
    queue: usize,
    pool: Pool,
    rx: Batch,
    tx: Batch,
    rx_budget: usize,
    stats: DriverStats,
    /// The service's receive filter generation last given to the NIC.
    rx_filter: u64,
}

/// Whether an engine configured like `engine` can hand its frames to a NIC with
/// `caps` as they are: with offloads on, TCP leaves as super-segments with partial
/// checksums, which the backend must segment and complete.
pub(crate) fn offloads_fit(engine: &linerate_toe::Config, caps: &linerate_nic::NicCaps) -> bool {
    let o = &caps.offloads;
    // Any interface's families: TCP over each leaves as super-segments.
    let v4 = engine.all_interfaces().any(|f| f.ipv4.is_some());
    let v6 = engine.all_interfaces().any(|f| f.ipv6.is_some());
    !engine.offloads || (o.tx_csum && (!v4 || o.tso4) && (!v6 || o.tso6))
}

impl<N: Nic> Driver<N, Engine> {
    /// A driver for `engine` on queue `queue` of `nic`.
    ///
    /// Errors: [`RtError::NoQueue`] if the NIC has no such queue;
    /// [`RtError::Offloads`] if the engine emits super-segments or partial
    /// checksums ([`linerate_toe::Config::offloads`]) the NIC cannot finish;
    /// [`RtError::Config`] if the engine's configuration fails
    /// [`linerate_toe::Config::validate`].
    pub fn new(engine: Engine, nic: N, queue: usize) -> Result<Driver<N>, RtError> {
        engine.config().validate()?;
        let queues = nic.queues();
        if queue >= queues {
            return Err(RtError::NoQueue { queue, queues });
        }
        Driver::with_service(engine, nic, queue)
    }

    /// The engine (for socket calls between polls).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, mutable (for socket calls between polls).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Hands a frame that did not come from this queue to the engine.
    pub fn inject(&mut self, now: Instant, frame: &[u8], meta: &OffloadMeta) {
        self.engine.handle_frame(now, frame, meta);
    }
}

impl<N: Nic, S: Service> Driver<N, S> {
    /// A driver for any `service` on queue `queue` of `nic`.
    ///
    /// Errors: [`RtError::NoQueue`] if the NIC has no such queue; what
    /// [`Service::fits`] says of the NIC's capabilities.
    pub fn with_service(service: S, nic: N, queue: usize) -> Result<Driver<N, S>, RtError> {
        let queues = nic.queues();
        if queue >= queues {
            return Err(RtError::NoQueue { queue, queues });
        }
        service.fits(nic.caps())?;
        let mut nic = nic;
        if service.takes_chains() {
            nic.set_rx_sg(true);
        }
        let engine = service;
        let pool = nic.pool().clone();
        Ok(Driver {
            engine,
            nic,
            queue,
            pool,
            rx: Batch::new(),
            tx: Batch::new(),
            rx_budget: 4 * DEFAULT_BATCH,
            stats: DriverStats::default(),
            rx_filter: 0,
        })
    }

    /// Frames received per [`Driver::poll`] at most (default 256); more waiting
    /// makes `poll` ask to be called again at once.
    pub fn set_rx_budget(&mut self, frames: usize) {
        self.rx_budget = frames.max(1);
    }

    /// The service.
    pub fn service(&self) -> &S {
        &self.engine
    }

    /// The service, mutable.
    pub fn service_mut(&mut self) -> &mut S {
        &mut self.engine
    }

    /// The NIC.
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// The NIC, mutable.
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.nic
    }

    /// The queue this driver serves.
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// What the driver has done so far.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The service and the NIC back.
    pub fn into_parts(self) -> (S, N) {
        (self.engine, self.nic)
    }

    /// What to wait on for the queue to have frames.
    pub fn readiness(&self) -> Result<Readiness, NicError> {
        self.nic.readiness(self.queue)
    }

    /// One round: receive (up to the budget), timers, transmit. Returns when to
    /// call again: `Some(now)` if frames are still waiting or the backend had no
    /// room, else the engine's next timer, `None` if it has none (then only new
    /// frames or socket calls make work).
    ///
    /// Frames the backend refuses are dropped and counted
    /// ([`DriverStats::tx_refused`]); errors of the queue itself (an I/O error, no
    /// such queue) are returned.
    pub fn poll(&mut self, now: Instant) -> Result<Option<Instant>, NicError> {
        let more = self.receive(now)?;
        self.handle_timeouts(now);
        self.transmit(now)?;
        Ok(self.next_deadline(now, more))
    }

    /// Gives the NIC the service's receive filter (a NIC without one says
    /// so and hands up everything, which the service filters itself).
    #[cold]
    fn sync_rx_filter(&mut self) {
        self.rx_filter = self.engine.rx_filter_generation();
        let mut groups = Vec::new();
        let mac = self.engine.rx_filter(&mut groups);
        // A NIC that cannot filter, or fails to, passes every frame: the
        // engine's own filter still applies.
        let _ = self.nic.set_multicast_filter(mac, &groups);
    }

    /// When to poll again after a round that left `more` frames waiting.
    pub(crate) fn next_deadline(&self, now: Instant, more: bool) -> Option<Instant> {
        if more || !self.tx.is_empty() {
            Some(now)
        } else {
            self.engine.poll_timeout()
        }
    }

    /// Receives up to the budget and hands every frame to the engine; returns
    /// true if the budget ran out (frames may still wait).
    pub fn receive(&mut self, now: Instant) -> Result<bool, NicError> {
        self.receive_with(now, &mut |_, _| {})
    }

    /// [`Driver::receive`], also showing `neighbor` every ARP and IPv6 neighbour
    /// discovery frame (which RSS puts on one queue while every engine of the host
    /// needs it).
    pub(crate) fn receive_with(
        &mut self,
        now: Instant,
        neighbor: &mut impl FnMut(&[u8], &OffloadMeta),
    ) -> Result<bool, NicError> {
        self.stats.polls += 1;
        let mut budget = self.rx_budget;
        while budget > 0 {
            let want = budget.min(DEFAULT_BATCH);
            self.rx.clear();
            let n = self.nic.receive(self.queue, &mut self.rx, want)?;
            for f in self.rx.iter() {
                let bytes = f.bytes();
                if is_neighbor_frame(bytes) {
                    neighbor(bytes, &f.meta);
                }
            }
            self.engine.handle_frames(now, &mut self.rx);
            self.stats.rx_frames += n as u64;
            budget = budget.saturating_sub(n);
            if n < want {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs the engine's timers if one is due.
    pub fn handle_timeouts(&mut self, now: Instant) {
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
    }

    /// Transmits every frame the engine has due now (and any the backend had no
    /// room for before); returns how many the backend took.
    pub fn transmit(&mut self, now: Instant) -> Result<usize, NicError> {
        if self.engine.rx_filter_generation() != self.rx_filter {
            self.sync_rx_filter();
        }
        let before = self.stats.tx_frames;
        let Driver {
            engine,
            nic,
            queue,
            pool,
            tx,
            stats,
            ..
        } = self;
        let err = flush(nic, *queue, tx, stats).err();
        let mut sink = DriverSink {
            nic,
            queue: *queue,
            pool,
            tx,
            stats,
            err,
            open: false,
        };
        engine.poll_transmit_into(now, &mut sink);
        sink.abandon_open();
        let DriverSink {
            nic,
            tx,
            stats,
            mut err,
            ..
        } = sink;
        if err.is_none() {
            err = flush(nic, *queue, tx, stats).err();
        }
        match err {
            Some(e) => Err(e),
            None => Ok((self.stats.tx_frames - before) as usize),
        }
    }

    /// Blocks until the queue may have frames, `deadline` passes, or `max` passes,
    /// whichever is first; `Ok(true)` if the queue signalled.
    pub fn wait(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        max: Duration,
    ) -> Result<bool, NicError> {
        let timeout = deadline.map_or(max, |d| d.saturating_duration_since(now).min(max));
        if timeout.is_zero() {
            return Ok(false);
        }
        Ok(self.readiness()?.wait(timeout)?)
    }
}

/// Transmits the batch until it is empty or the backend takes nothing more.
fn flush<N: Nic>(
    nic: &mut N,
    queue: usize,
    tx: &mut Batch,
    stats: &mut DriverStats,
) -> Result<(), NicError> {
    while !tx.is_empty() {
        match nic.transmit(queue, tx) {
            Ok(0) => return Ok(()),
            Ok(n) => stats.tx_frames += n as u64,
            Err(e @ (NicError::Io(_) | NicError::NoQueue { .. })) => return Err(e),
            // Dropped (the backend took it out of the batch); the rest are
            // tried, and dropped the same way while the link stays down.
            Err(NicError::LinkDown) => stats.tx_link_down += 1,
            // The refused frame is gone from the batch; go on with the rest.
            Err(_) => stats.tx_refused += 1,
        }
    }
    Ok(())
}

/// The driver's [`TxSink`]: the engine writes each frame into a buffer of the NIC's
/// pool, batches go to the backend as they fill; once the backend has taken none
/// of [`TX_BACKLOG`] frames the sink refuses more and the engine keeps them.
struct DriverSink<'a, N> {
    nic: &'a mut N,
    queue: usize,
    pool: &'a Pool,
    tx: &'a mut Batch,
    stats: &'a mut DriverStats,
    err: Option<NicError>,
    /// The batch's last frame was lent ([`TxSink::buffer`]) and not committed:
    /// frames are made in the batch where they stay (`Batch::push_pooled`; one
    /// built on the stack and pushed is copied by loads that stall on store
    /// forwarding), so a lent frame is in `tx` before it is a frame.
    open: bool,
}

impl<N: Nic> TxSink for DriverSink<'_, N> {
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        let f = if self.open {
            self.tx.last_mut()?
        } else {
            if self.tx.len() >= TX_BACKLOG {
                return None;
            }
            let f = self.tx.push_pooled(self.pool)?;
            self.open = true;
            f
        };
        f.buf.clear();
        Some(f.buf.append(len))
    }

    fn commit(&mut self, meta: &OffloadMeta) {
        if let Some(f) = self.close() {
            f.meta = *meta;
            self.flush_if_full();
        }
    }

    fn takes_frags(&self) -> bool {
        self.nic.tx_sg()
    }

    fn commit_frags(&mut self, meta: &OffloadMeta, frags: Frags) {
        if let Some(f) = self.close() {
            f.meta = *meta;
            f.frags = frags;
            self.flush_if_full();
        }
    }

    fn push_frame(&mut self, frame: Frame) -> Result<(), Frame> {
        self.abandon_open();
        if self.tx.len() >= TX_BACKLOG {
            return Err(frame);
        }
        self.tx.push(frame);
        self.flush_if_full();
        Ok(())
    }
}

impl<N: Nic> DriverSink<'_, N> {
    /// The frame lent, now committed: the batch's last.
    #[inline]
    fn close(&mut self) -> Option<&mut Frame> {
        if !core::mem::take(&mut self.open) {
            return None;
        }
        self.tx.last_mut()
    }

    /// Takes a frame lent and not committed out of the batch: it is not a frame.
    fn abandon_open(&mut self) {
        if core::mem::take(&mut self.open) {
            self.tx.pop();
        }
    }

    /// Sends the batch once a batch is full.
    #[inline]
    fn flush_if_full(&mut self) {
        if self.tx.len() >= DEFAULT_BATCH
            && self.err.is_none()
            && let Err(e) = flush(self.nic, self.queue, self.tx, self.stats)
        {
            self.err = Some(e);
        }
    }
}

/// ARP, or ICMPv6 router/neighbour discovery (types 133 to 137) in an IPv6 packet
/// without extension headers, which NDP packets do not carry; or a DHCP
/// reply (UDP from port 67 to 68 in an IPv4 datagram without options), for
/// queue 0's DHCP client (`crate::netconf`).
pub(crate) fn is_neighbor_frame(frame: &[u8]) -> bool {
    match frame.get(12..14) {
        Some([0x08, 0x06]) => true,
        Some([0x08, 0x00]) => {
            frame.get(14) == Some(&0x45)
                && frame.get(14 + 9) == Some(&17)
                && frame.get(34..38) == Some(&[0, 67, 0, 68])
        }
        Some([0x86, 0xdd]) => {
            frame.get(14 + 6) == Some(&58)
                && frame.get(14 + 40).is_some_and(|t| (133..=137).contains(t))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use linerate_nic::memory;

    /// The sink makes each frame in the batch when its buffer is lent: only
    /// committed frames reach the wire, each with the bytes written last; a
    /// buffer lent again replaces the one before, and one never committed is
    /// taken out before the batch goes.
    #[test]
    fn only_committed_frames_are_sent() {
        let (mut a, mut b) =
            memory::pair(memory::PairConfig::new(NicCaps::plain(), NicCaps::plain()));
        let pool = a.pool().clone();
        let (mut tx, mut stats) = (Batch::new(), DriverStats::default());
        let meta = OffloadMeta::plain();
        let frame = |byte: u8| vec![byte; 60];
        {
            let mut sink = DriverSink {
                nic: &mut a,
                queue: 0,
                pool: &pool,
                tx: &mut tx,
                stats: &mut stats,
                err: None,
                open: false,
            };
            sink.buffer(60).unwrap().copy_from_slice(&frame(b'a'));
            sink.commit(&meta);
            sink.buffer(60).unwrap().copy_from_slice(&frame(b'x'));
            sink.buffer(60).unwrap().copy_from_slice(&frame(b'b'));
            sink.commit(&meta);
            sink.buffer(60).unwrap().copy_from_slice(&frame(b'y'));
            sink.push_frame(Frame::plain(pool.alloc_from(&frame(b'c'))))
                .unwrap();
            sink.buffer(60).unwrap().copy_from_slice(&frame(b'z'));
            sink.abandon_open();
        }
        flush(&mut a, 0, &mut tx, &mut stats).unwrap();
        let mut got = Batch::new();
        b.receive(0, &mut got, 64).unwrap();
        let bytes: Vec<Vec<u8>> = got.iter().map(|f| f.bytes().to_vec()).collect();
        assert_eq!(bytes, [frame(b'a'), frame(b'b'), frame(b'c')]);
        assert_eq!(stats.tx_frames, 3);
    }
}
