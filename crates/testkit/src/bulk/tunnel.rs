//! The tunnel experiment of the vendor papers: the same TCP bulk traffic with and
//! without a VXLAN, GENEVE or NVGRE tunnel, with the offloads in hardware, in
//! software, or off; one way or both ways at once.
//!
//! * **hw**: memory ports with every offload, tunnel TSO/LRO included: the
//!   engine's 64 KiB super-segments are encapsulated whole and cross the wire
//!   whole, as between NICs with tunnel offloads.
//! * **sw**: plain ports (MTU 1500, no offload) under the software shim: the
//!   underlay shim segments the encapsulated super-segments (tunnel GSO,
//!   checksums completed) and coalesces them again (tunnel GRO) on receive.
//! * **off**: no offload anywhere: the engine sends MSS-sized segments with full
//!   checksums, each encapsulated on its own.
//!
//! Without a tunnel the same three modes are the report's `hw`, `sw` and `off`
//! stacks. GENEVE carries two option TLVs (12 bytes). Every byte received is
//! checked, as in [`super::transfer`].

use super::{BulkError, Calls, Host, Measurement, Source, WireCount, linerate_over, shared_source};
use linerate_nic::memory::{self, PairConfig};
use linerate_nic::{Counter, Nic, NicCaps, Shim, ShimConfig};
use linerate_tunnel::{Encap, GeneveOpt, NextHop, Tunnel, TunnelNic, VniConfig, VtepConfig};
use std::net::IpAddr;

/// The encapsulation of a tunnel cell, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tunnelled {
    /// No tunnel: the engines on the ports themselves.
    No,
    /// VXLAN (RFC 7348).
    Vxlan,
    /// GENEVE (RFC 8926) with two option TLVs.
    Geneve,
    /// NVGRE (RFC 7637).
    Nvgre,
}

impl Tunnelled {
    /// Every kind, no tunnel first.
    pub const ALL: [Tunnelled; 4] = [
        Tunnelled::No,
        Tunnelled::Vxlan,
        Tunnelled::Geneve,
        Tunnelled::Nvgre,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Tunnelled::No => "plain",
            Tunnelled::Vxlan => "vxlan",
            Tunnelled::Geneve => "geneve",
            Tunnelled::Nvgre => "nvgre",
        }
    }

    fn encap(self) -> Option<Encap> {
        match self {
            Tunnelled::No => None,
            Tunnelled::Vxlan => Some(Encap::Vxlan),
            Tunnelled::Geneve => Some(Encap::Geneve {
                options: vec![
                    GeneveOpt {
                        class: 0x0102,
                        kind: 0x80,
                        data: vec![0, 0, 0, 1],
                    },
                    GeneveOpt {
                        class: 0x0103,
                        kind: 0x01,
                        data: vec![0; 4],
                    },
                ],
                known_critical: vec![(0x0102, 0x80)],
            }),
            Tunnelled::Nvgre => Some(Encap::Nvgre),
        }
    }
}

/// Where the offloads are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Offload {
    /// In the (memory) hardware: super-frames cross whole.
    Hw,
    /// In software, by the shim over plain ports.
    Sw,
    /// Nowhere: MSS-sized segments, checksums in the engine.
    Off,
}

impl Offload {
    /// Every mode.
    pub const ALL: [Offload; 3] = [Offload::Hw, Offload::Sw, Offload::Off];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Offload::Hw => "hw",
            Offload::Sw => "sw",
            Offload::Off => "off",
        }
    }
}

/// Frames sent as the underlay's top layer counts them (a super-frame once).
impl WireCount for TunnelNic {
    fn wire_frames(&self) -> u64 {
        self.with_underlay(|u| u.counters().total(Counter::TxPackets))
    }
}

/// Frames sent as the port's top layer counts them (a super-frame once).
impl WireCount for Box<dyn Nic> {
    fn wire_frames(&self) -> u64 {
        self.counters().total(Counter::TxPackets)
    }
}

const MAC: [[u8; 6]; 2] = [[2, 0, 0, 0, 0x10, 1], [2, 0, 0, 0, 0x10, 2]];
const UNDERLAY: [[u8; 4]; 2] = [[192, 0, 2, 1], [192, 0, 2, 2]];

/// Two ports of a memory pair, behind whatever the mode puts on them.
type Ports = (Box<dyn Nic>, Box<dyn Nic>);

/// The two underlay ports: with every offload (hw), plain under the software
/// shim (sw), or plain and bare (off: nothing between the engine or the tunnel
/// and the wire, as the TCP table's `off` stack).
fn ports(mode: Offload) -> Result<Ports, BulkError> {
    let caps = match mode {
        Offload::Hw => NicCaps::full(),
        _ => NicCaps::plain(),
    };
    let (a, b) = memory::pair(PairConfig::new(caps, caps));
    Ok(match mode {
        Offload::Off => (Box::new(a), Box::new(b)),
        _ => (
            Box::new(Shim::new(a, ShimConfig::all())?),
            Box::new(Shim::new(b, ShimConfig::all())?),
        ),
    })
}

fn tunnel(
    port: Box<dyn Nic>,
    encap: Encap,
    me: usize,
    mode: Offload,
) -> Result<TunnelNic, BulkError> {
    let peer = 1 - me;
    let mut vtep = VtepConfig::new(encap, MAC[me], IpAddr::from(UNDERLAY[me]));
    vtep.offloads = mode != Offload::Off;
    let vni = VniConfig {
        next_hop: NextHop::Static(MAC[peer]),
        ..VniConfig::new(42, IpAddr::from(UNDERLAY[peer]))
    };
    Tunnel::new(port, vtep, vni).map_err(|e| BulkError::Socket(format!("tunnel: {e}")))
}

/// Moves `total` bytes in `write`-byte writes through `kind` with the offloads
/// in `mode`; with `both_ways`, `total` each way at once (the measurement counts
/// the bytes of both directions).
pub fn transfer_tunnel(
    kind: Tunnelled,
    mode: Offload,
    write: usize,
    total: u64,
    both_ways: bool,
) -> Result<Measurement, BulkError> {
    if write == 0 || write > super::MAX_CHUNK {
        return Err(BulkError::WriteSize(write));
    }
    let source = shared_source();
    let (a, b) = ports(mode)?;
    let engine_offloads = mode != Offload::Off;
    match kind.encap() {
        None => over(
            Host::new(1, engine_offloads, a),
            Host::new(2, engine_offloads, b),
            write,
            total,
            source,
            both_ways,
        ),
        Some(encap) => over(
            Host::new(1, engine_offloads, tunnel(a, encap.clone(), 0, mode)?),
            Host::new(2, engine_offloads, tunnel(b, encap, 1, mode)?),
            write,
            total,
            source,
            both_ways,
        ),
    }
}

fn over<N: Nic + WireCount>(
    a: Host<N>,
    b: Host<N>,
    write: usize,
    total: u64,
    source: &Source,
    both_ways: bool,
) -> Result<Measurement, BulkError> {
    if both_ways {
        super::both_ways(a, b, write, total, source)
    } else {
        linerate_over(a, b, write, total, source, Calls::Copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_mode_moves_every_byte_both_ways() {
        for kind in Tunnelled::ALL {
            for mode in Offload::ALL {
                for both in [false, true] {
                    let m = transfer_tunnel(kind, mode, 16 * 1024, 1 << 20, both)
                        .unwrap_or_else(|e| panic!("{kind:?} {mode:?} both {both}: {e}"));
                    let want = if both { 2 << 20 } else { 1 << 20 };
                    assert_eq!(m.bytes, want, "{kind:?} {mode:?} both {both}");
                    assert!(m.wire_frames > 0);
                    // With offloads the super-segments go by reference, through
                    // the tunnels too, and arrive as chains; without, neither.
                    let offloads = mode != Offload::Off;
                    assert_eq!(m.by_ref > 0, offloads, "{kind:?} {mode:?} both {both}");
                    assert_eq!(m.chained > 0, offloads, "{kind:?} {mode:?} both {both}");
                }
            }
        }
    }

    #[test]
    fn super_frames_cross_whole_only_in_hardware() {
        // Frames the engines see per wire frame: > 1 where GRO or LRO merged.
        let hw = transfer_tunnel(Tunnelled::Vxlan, Offload::Hw, 65536, 4 << 20, false).unwrap();
        let off = transfer_tunnel(Tunnelled::Vxlan, Offload::Off, 65536, 4 << 20, false).unwrap();
        assert!(
            hw.wire_frames * 10 < off.wire_frames,
            "{} vs {}",
            hw.wire_frames,
            off.wire_frames
        );
    }
}
