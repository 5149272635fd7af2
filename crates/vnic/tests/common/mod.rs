//! Helpers for the vNIC tests: a partition over one end of a memory pair, the other
//! end standing for the wire; frames built and parsed with etherparse.

#![allow(dead_code)]

use etherparse::{PacketBuilder, SlicedPacket, VlanId};
use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_vnic::{Partition, PartitionConfig, SwitchMode};

/// A partition in `mode` over a memory port, the wire's far end, and the clock.
pub fn setup(mode: SwitchMode, caps: NicCaps) -> (Partition<MemNic>, MemNic, Clock) {
    let clock = Clock::manual();
    let (port, wire) = memory::pair(PairConfig {
        clock: clock.clone(),
        ..PairConfig::new(caps, caps)
    });
    let part = Partition::new(
        port,
        PartitionConfig {
            mode,
            clock: clock.clone(),
            ..PartitionConfig::default()
        },
    );
    (part, wire, clock)
}

/// A UDP/IPv4 frame from `src` to `dst`, tagged with `vlan` if given, carrying
/// `id` (4 bytes) then `extra` zero bytes as payload.
pub fn udp_frame(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>, id: u32, extra: usize) -> Vec<u8> {
    udp_frame_ip(src, dst, vlan, [10, 0, 0, 1], id, extra)
}

/// As [`udp_frame`] from IPv4 source `ip`.
pub fn udp_frame_ip(
    src: [u8; 6],
    dst: [u8; 6],
    vlan: Option<u16>,
    ip: [u8; 4],
    id: u32,
    extra: usize,
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src, dst);
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(4 + extra, 0);
    let mut out = Vec::new();
    match vlan {
        Some(v) => b
            .single_vlan(VlanId::try_new(v).expect("vid"))
            .ipv4(ip, [10, 0, 0, 99], 64)
            .udp(1000, 2000)
            .write(&mut out, &payload),
        None => b
            .ipv4(ip, [10, 0, 0, 99], 64)
            .udp(1000, 2000)
            .write(&mut out, &payload),
    }
    .expect("build");
    out
}

/// The VLAN ID of a frame's outer tag (etherparse's reading), and its UDP payload's id.
pub fn parse(frame: &[u8]) -> (Option<u16>, Option<u32>) {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    let vid = p.vlan().map(|v| match v.to_header() {
        etherparse::VlanHeader::Single(h) => h.vlan_id.value(),
        etherparse::VlanHeader::Double(h) => h.outer.vlan_id.value(),
    });
    let id = match p.transport {
        Some(etherparse::TransportSlice::Udp(u)) => u
            .payload()
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4"))),
        _ => None,
    };
    (vid, id)
}

/// Sends `frame` from the wire's far end.
pub fn from_wire(wire: &mut MemNic, frame: &[u8]) {
    let mut b = Batch::new();
    b.push(Frame::plain(wire.pool().alloc_from(frame)));
    wire.transmit(0, &mut b).expect("wire transmit");
}

/// Sends `frame` from `nic`; returns how many it took.
pub fn send<N: Nic>(nic: &mut N, frame: &[u8]) -> usize {
    let mut b = Batch::new();
    b.push(Frame::plain(nic.pool().alloc_from(frame)));
    nic.transmit(0, &mut b).expect("transmit")
}

/// Every frame waiting on every queue of `nic`, as bytes.
pub fn drain<N: Nic>(nic: &mut N) -> Vec<Vec<u8>> {
    let mut b = Batch::new();
    for q in 0..nic.queues() {
        while nic.receive(q, &mut b, 1024).expect("receive") > 0 {}
    }
    b.iter().map(|f| f.bytes().to_vec()).collect()
}
