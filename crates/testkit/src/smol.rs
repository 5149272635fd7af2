//! smoltcp on a linerate NIC: [`SmolPort`] implements smoltcp's `phy::Device` over
//! any [`Nic`] (a memory port, the software-offload shim, a TAP), so smoltcp's
//! `Interface` and sockets can be the peer of, or the baseline for, linerate on the
//! same link.
//!
//! Frames are received in batches and handed to smoltcp one at a time; frames
//! smoltcp sends are gathered in a batch and given to the NIC by
//! [`SmolPort::flush`] (and whenever the batch is full). smoltcp computes and
//! verifies every checksum itself: the port reports no checksum offload.

use linerate_nic::{Batch, DEFAULT_BATCH, Frame, Nic, NicError, PacketBuf, Pool};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};

/// A smoltcp `phy::Device` over queue 0 of a linerate [`Nic`].
#[derive(Debug)]
pub struct SmolPort<N: Nic> {
    nic: N,
    /// Received frames not yet given to smoltcp, last first.
    rx: Batch,
    /// Frames smoltcp sent, not yet given to the NIC.
    tx: Batch,
    /// The first error a transmit or receive met, kept for [`SmolPort::take_error`]
    /// (smoltcp's device interface cannot report one).
    error: Option<NicError>,
}

impl<N: Nic> SmolPort<N> {
    /// smoltcp's device over `nic`.
    pub fn new(nic: N) -> SmolPort<N> {
        SmolPort {
            nic,
            rx: Batch::new(),
            tx: Batch::new(),
            error: None,
        }
    }

    /// The NIC.
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// The NIC, mutably.
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.nic
    }

    /// Hands the frames smoltcp sent to the NIC. Frames the NIC cannot take now stay
    /// queued for the next flush; returns how many are still waiting.
    pub fn flush(&mut self) -> usize {
        if !self.tx.is_empty()
            && let Err(e) = self.nic.transmit(0, &mut self.tx)
        {
            self.error.get_or_insert(e);
        }
        self.tx.len()
    }

    /// Frames received or sent since the port was made are fine unless this returns
    /// the first error the NIC reported.
    pub fn take_error(&mut self) -> Option<NicError> {
        self.error.take()
    }

    fn refill(&mut self) {
        if self.rx.is_empty() {
            match self.nic.receive(0, &mut self.rx, DEFAULT_BATCH) {
                Ok(_) => self.rx.reverse(),
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
        }
    }
}

/// A received frame, owned until smoltcp has read it.
#[derive(Debug)]
pub struct SmolRx(Frame);

/// Room for one frame smoltcp sends.
#[derive(Debug)]
pub struct SmolTx<'a> {
    tx: &'a mut Batch,
    pool: &'a Pool,
}

impl RxToken for SmolRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0.bytes())
    }
}

impl TxToken for SmolTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf: PacketBuf = self.pool.alloc();
        let r = f(buf.append(len));
        self.tx.push(Frame::plain(buf));
        r
    }
}

impl<N: Nic> Device for SmolPort<N> {
    type RxToken<'b>
        = SmolRx
    where
        Self: 'b;
    type TxToken<'b>
        = SmolTx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _timestamp: smoltcp::time::Instant) -> Option<(SmolRx, SmolTx<'_>)> {
        self.refill();
        let frame = self.rx.pop()?;
        if self.tx.len() >= DEFAULT_BATCH {
            self.flush();
        }
        Some((
            SmolRx(frame),
            SmolTx {
                tx: &mut self.tx,
                pool: self.nic.pool(),
            },
        ))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<SmolTx<'_>> {
        if self.tx.len() >= DEFAULT_BATCH {
            self.flush();
        }
        Some(SmolTx {
            tx: &mut self.tx,
            pool: self.nic.pool(),
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // smoltcp's MTU for Ethernet counts the 14-byte header.
        caps.max_transmission_unit =
            usize::from(self.nic.caps().mtu) + linerate_nic::ETH_HEADER_LEN;
        caps
    }
}
