//! Flow steering: the receive queue of a frame or flow (RSS) and the transmit
//! queue of a flow (TSS), so that a connection stays on one core both ways.
//!
//! Receive (Microsoft RSS): hash the frame's headers ([`HashConfig`]) with the
//! prepared key ([`Toeplitz`]), index the indirection table with the hash's low
//! bits ([`SharedTable`]). Frames that cannot be hashed (not IP, or their type is
//! disabled) go to the default queue, as a NIC sends them to its default queue.
//!
//! Transmit (TSS, as in Linux XPS driven by the receive queue, or mTCP and F-Stack's
//! shared-nothing cores): the transmit queue of a flow is the queue RSS gives the
//! flow's *reverse* direction, i.e. the queue its replies arrive on. With a
//! symmetric key ([`crate::RssKey::SYMMETRIC`]) the reverse hash equals the forward
//! one; with any other key the reverse tuple is hashed explicitly. Either way
//! [`Steering::tx_queue`] of a flow equals [`Steering::rx_queue`] of its reverse.

use linerate_offload::RssHash;
use linerate_wire::layout::Layout;

use crate::error::ConfigError;
use crate::flow::FlowTuple;
use crate::indirection::{IndirectionTable, SharedTable};
use crate::input::{HashConfig, HashInput};
use crate::key::RssKey;
use crate::toeplitz::Toeplitz;

/// Hash, configuration and indirection table together: what a NIC's RSS block is.
///
/// Shared between threads (`Arc<Steering>`): hashing takes `&self`, and the table
/// can be replaced while other threads steer.
///
/// ```
/// use linerate_rss::{FlowTuple, HashConfig, IndirectionTable, RssKey, Steering};
/// use std::net::Ipv4Addr;
/// let s = Steering::new(&RssKey::MICROSOFT, IndirectionTable::new(8).unwrap(), HashConfig::default());
/// let out = FlowTuple::tcp4(Ipv4Addr::new(10, 0, 0, 1), 40000, Ipv4Addr::new(10, 0, 0, 2), 443);
/// // The flow is transmitted on the queue its replies are received on.
/// assert_eq!(s.tx_queue(&out), s.rx_queue(&out.reversed()));
/// ```
#[derive(Debug)]
pub struct Steering {
    hasher: Toeplitz,
    config: HashConfig,
    table: SharedTable,
    default_queue: u16,
}

impl Steering {
    /// Steering with `key` prepared on the best path for this CPU, `table` (whose
    /// queue count becomes the number of queues), and `config`. Unhashable frames go
    /// to queue 0.
    pub fn new(key: &RssKey, table: IndirectionTable, config: HashConfig) -> Steering {
        Steering::with_hasher(Toeplitz::new(key), table, config)
    }

    /// Steering with an already prepared hasher.
    pub fn with_hasher(hasher: Toeplitz, table: IndirectionTable, config: HashConfig) -> Steering {
        Steering {
            hasher,
            config,
            table: SharedTable::new(table),
            default_queue: 0,
        }
    }

    /// Sends unhashable frames to `queue` instead of 0.
    pub fn with_default_queue(mut self, queue: u16) -> Result<Steering, ConfigError> {
        let queues = self.queues();
        if queue >= queues {
            return Err(ConfigError::QueueOutOfRange { queue, queues });
        }
        self.default_queue = queue;
        Ok(self)
    }

    /// The prepared hasher.
    pub fn hasher(&self) -> &Toeplitz {
        &self.hasher
    }

    /// What is hashed.
    pub fn config(&self) -> &HashConfig {
        &self.config
    }

    /// The indirection table in use (replace it with [`SharedTable::store`]).
    pub fn table(&self) -> &SharedTable {
        &self.table
    }

    /// The number of queues.
    pub fn queues(&self) -> u16 {
        self.table.queues()
    }

    /// The queue unhashable frames go to.
    pub fn default_queue(&self) -> u16 {
        self.default_queue
    }

    /// The hash of a frame's input.
    #[inline]
    pub fn hash_input(&self, input: &HashInput) -> RssHash {
        RssHash {
            value: self.hasher.hash(input),
            kind: input.kind(),
        }
    }

    /// The hash input of `frame` from `layout`, or, when `layout` is `None`, read
    /// from its bytes ([`HashConfig::frame_input`]: the same input a parse with the
    /// configured tunnel ports gives); `None` if the frame does not parse, is not
    /// IP, or its hash type is disabled.
    #[inline]
    pub fn frame_input(&self, frame: &[u8], layout: Option<&Layout>) -> Option<HashInput> {
        match layout {
            Some(l) => self.config.input(frame, l),
            None => self.config.frame_input(frame),
        }
    }

    /// The receive hash of `frame` (see [`Steering::frame_input`]).
    #[inline]
    pub fn hash_frame(&self, frame: &[u8], layout: Option<&Layout>) -> Option<RssHash> {
        self.frame_input(frame, layout).map(|i| self.hash_input(&i))
    }

    /// The queue for a hash, or the default queue for none.
    #[inline]
    pub fn queue_of(&self, hash: Option<u32>) -> u16 {
        hash.map_or(self.default_queue, |h| self.table.queue(h))
    }

    /// The receive queue of a received frame.
    pub fn rx_queue_of_frame(&self, frame: &[u8], layout: Option<&Layout>) -> u16 {
        self.queue_of(self.hash_frame(frame, layout).map(|h| h.value))
    }

    /// The transmit queue of a frame being sent: the receive queue of its replies.
    pub fn tx_queue_of_frame(&self, frame: &[u8], layout: Option<&Layout>) -> u16 {
        let reply = self.frame_input(frame, layout).map(|i| i.swapped());
        self.queue_of(reply.map(|i| self.hasher.hash(&i)))
    }

    /// The receive hash of a flow as received.
    pub fn hash_flow(&self, flow: &FlowTuple) -> Option<RssHash> {
        flow.input(self.config.types).map(|i| self.hash_input(&i))
    }

    /// The receive queue of packets of `flow` (as received: source is the peer).
    pub fn rx_queue(&self, flow: &FlowTuple) -> u16 {
        self.queue_of(self.hash_flow(flow).map(|h| h.value))
    }

    /// The transmit queue of packets of `flow` (as sent: source is this host):
    /// the receive queue of `flow.reversed()`.
    pub fn tx_queue(&self, flow: &FlowTuple) -> u16 {
        self.rx_queue(&flow.reversed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::HashTypes;
    use std::net::Ipv4Addr;

    fn flow(i: u32) -> FlowTuple {
        FlowTuple::tcp4(
            Ipv4Addr::from(0x0a00_0001 + i),
            40000 + i as u16,
            Ipv4Addr::new(192, 0, 2, 1),
            443,
        )
    }

    #[test]
    fn tss_is_rss_of_reverse_for_any_key() {
        for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
            let s = Steering::new(
                &key,
                IndirectionTable::new(8).unwrap(),
                HashConfig::default(),
            );
            for i in 0..1000 {
                let f = flow(i);
                assert_eq!(s.tx_queue(&f), s.rx_queue(&f.reversed()));
                if key.is_symmetric() {
                    assert_eq!(s.tx_queue(&f), s.rx_queue(&f));
                }
            }
        }
    }

    #[test]
    fn microsoft_key_needs_the_explicit_reverse() {
        let s = Steering::new(
            &RssKey::MICROSOFT,
            IndirectionTable::new(8).unwrap(),
            HashConfig::default(),
        );
        let differ = (0..1000)
            .filter(|&i| s.rx_queue(&flow(i)) != s.tx_queue(&flow(i)))
            .count();
        assert!(differ > 500, "{differ}");
    }

    #[test]
    fn unhashable_goes_to_default_queue() {
        let config = HashConfig {
            types: HashTypes::NONE,
            ..HashConfig::default()
        };
        let s = Steering::new(
            &RssKey::MICROSOFT,
            IndirectionTable::new(4).unwrap(),
            config,
        )
        .with_default_queue(3)
        .unwrap();
        assert_eq!(s.rx_queue(&flow(1)), 3);
        assert_eq!(s.rx_queue_of_frame(&[0u8; 10], None), 3);
        assert!(
            Steering::new(
                &RssKey::MICROSOFT,
                IndirectionTable::new(4).unwrap(),
                config
            )
            .with_default_queue(4)
            .is_err()
        );
    }
}
