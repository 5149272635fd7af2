//! The overlay NIC: [`Tunnel`] builds [`TunnelNic`]s over an underlay.

use crate::config::{ConfigError, VniConfig, VtepConfig};
use crate::counters::TunnelCounters;
use linerate_nic::{Batch, Counters, Nic, NicCaps, NicError, Pool, Readiness, Recorder};
use std::sync::{Arc, Mutex};

/// Builds overlay NICs over an underlay.
#[derive(Debug)]
pub struct Tunnel;

/// The state every VNI of one underlay shares.
pub(crate) struct Vtep {
    pub(crate) underlay: Box<dyn Nic>,
    pub(crate) config: VtepConfig,
    pub(crate) counters: TunnelCounters,
}

/// One VNI's overlay NIC: inner Ethernet frames in and out, carried over the
/// underlay in the VTEP's encapsulation.
///
/// Its [`Nic::counters`] count inner frames (`rx_packets`, `tx_packets`,
/// `tx_dropped_oversize`...); [`TunnelNic::tunnel_counters`] what this VNI
/// refused, [`TunnelNic::vtep_counters`] what the VTEP refused before a VNI
/// was known.
pub struct TunnelNic {
    vtep: Arc<Mutex<Vtep>>,
    index: usize,
    vni: VniConfig,
    caps: NicCaps,
    counters: Counters,
    tcounters: TunnelCounters,
    vcounters: TunnelCounters,
    pool: Pool,
}

impl core::fmt::Debug for TunnelNic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TunnelNic")
            .field("vni", &self.vni)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl Tunnel {
    /// One overlay NIC for `vni` over `underlay` (typically a
    /// [`linerate_nic::Shim`] over a backend).
    pub fn new<N: Nic + 'static>(
        underlay: N,
        vtep: VtepConfig,
        vni: VniConfig,
    ) -> Result<TunnelNic, ConfigError> {
        let mut v = Tunnel::many(underlay, vtep, vec![vni])?;
        v.pop().ok_or(ConfigError::NoVni)
    }

    /// One overlay NIC per VNI of `vnis`, in that order, all over `underlay`
    /// and sharing its queues (see the crate docs).
    pub fn many<N: Nic + 'static>(
        underlay: N,
        vtep: VtepConfig,
        vnis: Vec<VniConfig>,
    ) -> Result<Vec<TunnelNic>, ConfigError> {
        let _ = (underlay, vtep, vnis);
        Err(ConfigError::NoVni)
    }
}

impl TunnelNic {
    /// This VNI's configuration.
    pub fn vni(&self) -> &VniConfig {
        &self.vni
    }

    /// What this VNI refused after its VNI was known.
    pub fn tunnel_counters(&self) -> &TunnelCounters {
        &self.tcounters
    }

    /// What the VTEP refused before a VNI was known (shared by every VNI).
    pub fn vtep_counters(&self) -> &TunnelCounters {
        &self.vcounters
    }

    /// Runs `f` on the underlay (locks it: not for the data path).
    pub fn with_underlay<R>(&self, f: impl FnOnce(&mut dyn Nic) -> R) -> R {
        let mut v = match self.vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(v.underlay.as_mut())
    }

    /// The encapsulation overhead in bytes: outer Ethernet, IP, UDP and tunnel
    /// header (GENEVE options included) or GRE.
    pub fn overhead(&self) -> usize {
        0
    }
}

impl Nic for TunnelNic {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        let _ = (queue, batch, max, self.index);
        Ok(0)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let _ = (queue, batch);
        Ok(0)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        self.with_underlay(|u| u.readiness(queue))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.with_underlay(|u| u.set_recorder(recorder));
    }
}
