//! Several NICs presented as one: the uplinks of an engine with more than one
//! interface (`linerate_toe::Config::interfaces`), driven by one runtime queue
//! thread as if they were one NIC.
//!
//! [`Ports`] holds one [`Nic`] per interface, each with the MAC of the
//! engine's interface on it. On receive, each frame is tagged with the index
//! of the port it came from ([`crate::PacketBuf::port`]), which the engine
//! takes as the arrival interface. On transmit, each frame goes out of the
//! port whose MAC is its Ethernet source address: the engine writes its
//! output interface's MAC there, and the interfaces' MACs are distinct (a
//! configuration with two alike is refused), so no tag needs to travel out
//! with the frame and a one-interface engine's transmit path carries nothing
//! new. A frame whose source is none of the ports' goes out of port 0.
//!
//! Receive takes from the ports in turn, starting one further each call, so
//! a busy port cannot starve the others. Transmit sends runs of consecutive
//! frames for one port as one batch, in order: a port that takes only part
//! of its run stops the call, and the rest stays at the front of the batch
//! (the [`Nic`] contract).
//!
//! Readiness: over descriptor-based ports (TAP, AF_XDP), one epoll
//! descriptor per queue that polls readable when any port's does; over
//! memory ports (a [`crate::Notify`] each), port 0's notify, so a waiter
//! wakes late for the others (poll them with a short timeout, or use
//! [`crate::wait_any`] over [`Ports::port`]'s readiness).
//!
//! [`Nic::counters`] is port 0's; each port's own are in [`Ports::port`].

use crate::buf::Pool;
use crate::caps::NicCaps;
use crate::counters::Counters;
use crate::error::NicError;
use crate::frame::Batch;
use crate::nic::Nic;
use crate::notify::Readiness;
use crate::pcap::Recorder;
use std::sync::Arc;

/// Several NICs as one (see the [module docs](self)).
#[derive(Debug)]
pub struct Ports<N: Nic> {
    ports: Vec<(N, [u8; 6])>,
    caps: NicCaps,
    /// The port receive starts from next.
    next: usize,
    /// Frames of one port's run, on their way to it (reused).
    run: Batch,
    /// Per queue, the epoll descriptor over the ports' descriptors.
    #[cfg(target_os = "linux")]
    epoll: Vec<Option<std::os::fd::OwnedFd>>,
}

impl<N: Nic> Ports<N> {
    /// The ports, in interface order: `(nic, mac)` where `mac` is the
    /// engine's interface MAC on that NIC.
    ///
    /// The capabilities are port 0's, with the offloads every port has and
    /// the fewest queues and smallest MTU of any.
    ///
    /// Errors: [`NicError::Io`] (as `InvalidInput`) for no ports or two with
    /// one MAC, and what creating the epoll descriptors returns.
    pub fn new(ports: Vec<(N, [u8; 6])>) -> Result<Ports<N>, NicError> {
        let invalid = |msg: &str| {
            NicError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                msg.to_string(),
            ))
        };
        let Some((first, _)) = ports.first() else {
            return Err(invalid("Ports::new: no ports"));
        };
        for (i, (_, a)) in ports.iter().enumerate() {
            if ports.iter().skip(i + 1).any(|(_, b)| a == b) {
                return Err(invalid("Ports::new: two ports with one MAC"));
            }
        }
        let mut caps = *first.caps();
        for (n, _) in &ports {
            let c = n.caps();
            caps.queues = caps.queues.min(c.queues);
            caps.mtu = caps.mtu.min(c.mtu);
            caps.max_gso_size = caps.max_gso_size.min(c.max_gso_size);
            caps.max_gso_segs = caps.max_gso_segs.min(c.max_gso_segs);
            caps.offloads = caps.offloads.intersect(c.offloads);
        }
        let mut p = Ports {
            ports,
            caps,
            next: 0,
            run: Batch::new(),
            #[cfg(target_os = "linux")]
            epoll: Vec::new(),
        };
        #[cfg(target_os = "linux")]
        {
            for q in 0..usize::from(p.caps.queues) {
                let ep = p.epoll_for(q)?;
                p.epoll.push(ep);
            }
        }
        Ok(p)
    }

    /// An epoll descriptor over queue `q`'s descriptors, if every port has one.
    #[cfg(target_os = "linux")]
    fn epoll_for(&self, q: usize) -> Result<Option<std::os::fd::OwnedFd>, NicError> {
        let mut fds = Vec::new();
        for (n, _) in &self.ports {
            match n.readiness(q)? {
                Readiness::Fd(fd) => fds.push(fd),
                Readiness::Notify(_) => return Ok(None),
            }
        }
        let ep = crate::sys::epoll_create().map_err(NicError::Io)?;
        for fd in fds {
            crate::sys::epoll_add(&ep, fd).map_err(NicError::Io)?;
        }
        Ok(Some(ep))
    }

    /// Port `i`'s NIC.
    pub fn port(&self, i: usize) -> Option<&N> {
        self.ports.get(i).map(|(n, _)| n)
    }

    /// Port `i`'s NIC, mutable.
    pub fn port_mut(&mut self, i: usize) -> Option<&mut N> {
        self.ports.get_mut(i).map(|(n, _)| n)
    }

    /// How many ports.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// True if there are none (never, once built).
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// The port a frame with Ethernet source `src` leaves by (0 if none has
    /// that MAC).
    #[inline]
    fn port_of(&self, frame: &[u8]) -> usize {
        let Some(src) = frame.get(6..12) else {
            return 0;
        };
        self.ports
            .iter()
            .position(|(_, mac)| mac.as_slice() == src)
            .unwrap_or(0)
    }
}

impl<N: Nic> Nic for Ports<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        let n = self.ports.len();
        let start = self.next % n.max(1);
        self.next = start + 1;
        let mut got = 0;
        for k in 0..n {
            let i = (start + k) % n;
            let Some((nic, _)) = self.ports.get_mut(i) else {
                continue;
            };
            if got >= max {
                break;
            }
            let before = batch.len();
            got += nic.receive(queue, batch, max - got)?;
            for f in batch.iter_mut().skip(before) {
                f.buf.set_port(i);
            }
        }
        Ok(got)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let mut sent = 0;
        while let Some(first) = batch.first() {
            let port = self.port_of(first.bytes());
            let run = batch
                .iter()
                .position(|f| self.port_of(f.bytes()) != port)
                .unwrap_or(batch.len());
            self.run.clear();
            self.run.extend(batch.drain(..run));
            let res = match self.ports.get_mut(port) {
                Some((nic, _)) => nic.transmit(queue, &mut self.run),
                None => Ok(0),
            };
            let taken = run - self.run.len();
            sent += taken;
            // What the port did not take goes back to the front, in order.
            let rest = self.run.len();
            if rest > 0 {
                batch.splice(0..0, self.run.drain(..));
            }
            res?;
            if rest > 0 {
                break;
            }
        }
        Ok(sent)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        #[cfg(target_os = "linux")]
        if let Some(Some(ep)) = self.epoll.get(queue) {
            use std::os::fd::AsRawFd;
            return Ok(Readiness::Fd(ep.as_raw_fd()));
        }
        match self.ports.first() {
            Some((nic, _)) => nic.readiness(queue),
            None => Err(NicError::NoQueue { queue, queues: 0 }),
        }
    }

    #[allow(clippy::indexing_slicing)] // never empty: `Ports::new` checks
    fn counters(&self) -> &Counters {
        self.ports[0].0.counters()
    }

    /// Port 0's: every port's backend takes buffers of any pool.
    #[allow(clippy::indexing_slicing)] // never empty: `Ports::new` checks
    fn pool(&self) -> &Pool {
        self.ports[0].0.pool()
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        for (nic, _) in &mut self.ports {
            nic.set_recorder(recorder.clone());
        }
    }

    fn tx_sg(&self) -> bool {
        self.ports.iter().all(|(n, _)| n.tx_sg())
    }

    fn set_rx_sg(&mut self, on: bool) -> bool {
        let mut all = true;
        for (nic, _) in &mut self.ports {
            all &= nic.set_rx_sg(on);
        }
        all
    }

    /// Each port filters for its own MAC (not `unicast`, which is interface
    /// 0's) and the groups; true only if every port filters.
    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        let off = unicast == [0; 6] && groups.is_empty();
        let mut all = true;
        for (nic, mac) in &mut self.ports {
            let own = if off { [0; 6] } else { *mac };
            all &= nic.set_multicast_filter(own, groups)?;
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::{Frame, MemNic};

    const M0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
    const M1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];

    fn frame(pool: &Pool, src: [u8; 6], tag: u8) -> Frame {
        let f = [[0xff; 6].as_slice(), &src, &[0x88, 0xb5], &[tag; 46]].concat();
        Frame::plain(pool.alloc_from(&f))
    }

    /// Each frame leaves by the port its source MAC names, in order; what
    /// comes in is tagged with its port.
    #[test]
    fn frames_go_out_by_their_source_mac_and_come_in_tagged() {
        let (a0, mut b0) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        let (a1, mut b1) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        let mut p = Ports::new(vec![(a0, M0), (a1, M1)]).unwrap();
        let pool = p.pool().clone();
        let mut batch: Batch = [
            frame(&pool, M1, 1),
            frame(&pool, M0, 2),
            frame(&pool, M1, 3),
            frame(&pool, M1, 4),
            frame(&pool, [2, 9, 9, 9, 9, 9], 5),
        ]
        .into_iter()
        .collect();
        assert_eq!(p.transmit(0, &mut batch).unwrap(), 5);
        assert!(batch.is_empty());
        let mut got = Batch::new();
        b0.receive(0, &mut got, 64).unwrap();
        let tags: Vec<u8> = got.iter().map(|f| f.bytes()[14]).collect();
        assert_eq!(tags, [2, 5], "port 0: its own and the unknown source");
        got.clear();
        b1.receive(0, &mut got, 64).unwrap();
        let tags: Vec<u8> = got.iter().map(|f| f.bytes()[14]).collect();
        assert_eq!(tags, [1, 3, 4]);

        got.clear();
        let mut one = Batch::new();
        one.push(frame(b1.pool(), [2, 0, 0, 0, 0, 0x21], 7));
        b1.transmit(0, &mut one).unwrap();
        one.push(frame(b0.pool(), [2, 0, 0, 0, 0, 0x20], 8));
        b0.transmit(0, &mut one).unwrap();
        assert_eq!(p.receive(0, &mut got, 64).unwrap(), 2);
        let mut seen: Vec<(u8, usize)> =
            got.iter().map(|f| (f.bytes()[14], f.buf.port())).collect();
        seen.sort_unstable();
        assert_eq!(seen, [(7, 1), (8, 0)]);
        // A buffer back from the pool is port 0 again.
        got.clear();
        assert_eq!(p.pool().alloc().port(), 0);
    }

    #[test]
    fn ports_with_one_mac_or_none_are_refused() {
        let (a0, _b0) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        let (a1, _b1) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        assert!(Ports::new(vec![(a0, M0), (a1, M0)]).is_err());
        assert!(Ports::<MemNic>::new(Vec::new()).is_err());
    }
}
