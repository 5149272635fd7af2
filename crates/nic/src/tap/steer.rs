//! Deterministic queue selection for a multi-queue TAP shared by several
//! processes (a program and its forked children, each with a linerate
//! runtime on a queue of its own).
//!
//! Left alone, the kernel picks the queue of every frame it sends into a
//! multi-queue TAP by a flow hash, learning from what user space wrote on
//! which queue and forgetting after a few seconds: ARP replies, SYNs for a
//! listener and the replies to an idle connection land on whichever queue the
//! hash says, and the engine there does not know the connection. A steering
//! program (`TUNSETSTEERINGEBPF`: a `BPF_PROG_TYPE_SOCKET_FILTER` program
//! whose return value, modulo the number of queues, is the queue) replaces
//! that hash. [`TapSteering::attach`] loads linerate's, written here as raw
//! BPF instructions and loaded with `bpf(2)` (no clang, no libbpf):
//!
//! * an IPv4 or IPv6 TCP or UDP frame goes to the queue its destination
//!   (local) port is claimed for in the `ports` map, keyed by
//!   `protocol << 16 | port`;
//! * everything else goes to queue 0: ARP, ICMP, IPv4 fragments, IPv6 with
//!   extension headers, and every port nobody claimed;
//! * every ARP frame's sender (IPv4 address and Ethernet address) is written
//!   into the `neighbors` map first, so a process whose ARP replies went to
//!   queue 0 finds its next hops there ([`NeighborSource`]).
//!
//! Each process claims its ports with its own queue index ([`Claims`], with a
//! [`TapSteering::for_queue`] per process); the maps are shared by
//! descriptors, so a forked child that inherits them shares them. A claim is
//! one entry per port: a port one process holds cannot be claimed by another
//! (an active open then picks another source port; a listen fails with
//! `EADDRINUSE`). Claims count per process: a listener and its accepted
//! connections share the listener's entry, released with the last of them.
//! [`TapSteering::reap`] removes every entry of a queue whose process is gone
//! without releasing them (killed).
//!
//! Queue indices are the kernel's: the order in which queues were attached,
//! and when a queue detaches, the last one takes its index. The indices
//! claimed here stay right only while no queue but the last detaches: the
//! caller keeps every queue attached (linerate-preload keeps them open in the
//! parent for the life of the program).

use super::Tap;
use crate::claims::{ClaimError, Claims, L4, Table};
use crate::error::NicError;
use crate::neigh::NeighborSource;
use crate::sys;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

/// `TUNSETSTEERINGEBPF`: `_IOR('T', 224, int)`.
const TUNSETSTEERINGEBPF: libc::Ioctl = 0x8004_54e0 as libc::Ioctl;

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_NOEXIST: u64 = 1;
/// Entries allocated as they are added: a full table would take megabytes.
const BPF_F_NO_PREALLOC: u32 = 1;

/// Entries of the ports map: every TCP and UDP port.
pub const PORTS_CAPACITY: u32 = 2 * 65_536;
/// Entries of the neighbours map (least recently used ones make room).
pub const NEIGHBORS_CAPACITY: u32 = 1024;

/// The key of a port: `protocol << 16 | port`, as the program builds it.
fn port_key(l4: L4, port: u16) -> [u8; 4] {
    ((u32::from(l4.number()) << 16) | u32::from(port)).to_ne_bytes()
}

struct Maps {
    ports: OwnedFd,
    neighbors: OwnedFd,
    /// Kept so the program outlives a TAP it was detached from and
    /// attached to again; the TAP holds its own reference.
    _prog: OwnedFd,
}

/// The steering program of a TAP and one process's claims in its maps, for
/// one queue index ([`TapSteering::queue`]).
pub struct TapSteering {
    maps: Arc<Maps>,
    queue: u32,
    /// This process's claims: key to count.
    held: Mutex<HashMap<[u8; 4], u32>>,
}

impl core::fmt::Debug for TapSteering {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TapSteering")
            .field("queue", &self.queue)
            .field("ports", &self.maps.ports.as_raw_fd())
            .finish_non_exhaustive()
    }
}

impl TapSteering {
    /// Loads the steering program with empty maps and attaches it to `tap`'s
    /// interface (replacing the kernel's flow hash, and any program attached
    /// before); claims made through the result are for `tap`'s first queue.
    /// Needs `CAP_NET_ADMIN` and `CAP_BPF` (root).
    pub fn attach(tap: &Tap) -> Result<TapSteering, NicError> {
        let fd = tap.fds.first().ok_or(NicError::NoQueue {
            queue: 0,
            queues: 0,
        })?;
        let ports = sys::bpf_map_create(BPF_MAP_TYPE_HASH, 4, 4, PORTS_CAPACITY, BPF_F_NO_PREALLOC)
            .map_err(|e| bpf_error("creating the steering ports map", e))?;
        let neighbors = sys::bpf_map_create(BPF_MAP_TYPE_LRU_HASH, 4, 8, NEIGHBORS_CAPACITY, 0)
            .map_err(|e| bpf_error("creating the steering neighbours map", e))?;
        let insns = program(ports.as_raw_fd(), neighbors.as_raw_fd());
        let mut log = vec![0u8; 16 * 1024];
        let prog = sys::bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, &insns, c"GPL", &mut log)
            .map_err(|e| {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(log.get(..end).unwrap_or_default());
                bpf_error(
                    "loading the steering program",
                    io::Error::new(e.kind(), format!("{e}: {}", text.trim())),
                )
            })?;
        let mut pfd: libc::c_int = prog.as_raw_fd();
        sys::ioctl_ptr(fd, TUNSETSTEERINGEBPF, &mut pfd)
            .map_err(|e| bpf_error("attaching the steering program (TUNSETSTEERINGEBPF)", e))?;
        Ok(TapSteering {
            maps: Arc::new(Maps {
                ports,
                neighbors,
                _prog: prog,
            }),
            queue: u32::try_from(tap.base).unwrap_or(0),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Claims on the same maps for queue `queue` of the interface, held
    /// apart from this one's (for another process: a forked child).
    pub fn for_queue(&self, queue: u32) -> TapSteering {
        TapSteering {
            maps: Arc::clone(&self.maps),
            queue,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The queue index this one claims for.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The queue frames to `port` go to, if it is claimed.
    pub fn lookup(&self, l4: L4, port: u16) -> Option<u32> {
        let mut v = [0u8; 4];
        match sys::bpf_map_lookup(&self.maps.ports, &port_key(l4, port), &mut v) {
            Ok(true) => Some(u32::from_ne_bytes(v)),
            _ => None,
        }
    }

    /// Removes every claim for `queue` (those of a process that is gone
    /// without releasing them); the number removed.
    pub fn reap(&self, queue: u32) -> usize {
        let mut stale = Vec::new();
        let mut key = [0u8; 4];
        let mut prev: Option<[u8; 4]> = None;
        // A walk of at most the map's size (entries deleted meanwhile by
        // another process can restart it: bounded all the same).
        for _ in 0..PORTS_CAPACITY {
            match sys::bpf_map_next_key(&self.maps.ports, prev.as_ref().map(|k| &k[..]), &mut key) {
                Ok(true) => {}
                _ => break,
            }
            let mut v = [0u8; 4];
            if let Ok(true) = sys::bpf_map_lookup(&self.maps.ports, &key, &mut v)
                && u32::from_ne_bytes(v) == queue
            {
                stale.push(key);
            }
            prev = Some(key);
        }
        stale
            .iter()
            .filter(|k| matches!(sys::bpf_map_delete(&self.maps.ports, &k[..]), Ok(true)))
            .count()
    }

    /// Releases every claim this one holds (a runtime that stopped without
    /// releasing some).
    pub fn release_all(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, _) in held.drain() {
            let _ = sys::bpf_map_delete(&self.maps.ports, &key);
        }
    }

    fn claim(&self, l4: L4, port: u16) -> Result<(), ClaimError> {
        let key = port_key(l4, port);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&key) {
            *n += 1;
            return Ok(());
        }
        match sys::bpf_map_update(
            &self.maps.ports,
            &key,
            &self.queue.to_ne_bytes(),
            BPF_NOEXIST,
        ) {
            Ok(()) => {
                held.insert(key, 1);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Err(ClaimError::InUse {
                l4,
                local: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            }),
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => Err(ClaimError::Full {
                table: Table::Ports,
                capacity: PORTS_CAPACITY,
            }),
            Err(e) => Err(ClaimError::Io(e)),
        }
    }

    fn release(&self, l4: L4, port: u16) {
        let key = port_key(l4, port);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(n) = held.get_mut(&key) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            held.remove(&key);
            let _ = sys::bpf_map_delete(&self.maps.ports, &key);
        }
    }
}

fn bpf_error(what: &'static str, error: io::Error) -> NicError {
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => NicError::PermissionDenied { what, error },
        _ => NicError::Io(io::Error::new(error.kind(), format!("{what}: {error}"))),
    }
}

impl Claims for TapSteering {
    fn claim_port(&self, l4: L4, port: u16) -> Result<(), ClaimError> {
        self.claim(l4, port)
    }
    fn release_port(&self, l4: L4, port: u16) {
        self.release(l4, port);
    }
    /// A connection is steered by its local port: claiming it claims the
    /// port (shared with a listener of this process on it; refused when
    /// another process holds the port).
    fn claim_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr) -> Result<(), ClaimError> {
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(ClaimError::Family);
        }
        self.claim(l4, local.port())
    }
    fn release_flow(&self, l4: L4, local: SocketAddr, _remote: SocketAddr) {
        self.release(l4, local.port());
    }
}

impl NeighborSource for TapSteering {
    /// The Ethernet address the last ARP frame from `ip` into the TAP gave
    /// (IPv4 only: neighbour advertisements are not recorded).
    fn neighbor(&self, ip: IpAddr) -> Option<[u8; 6]> {
        let IpAddr::V4(v4) = ip else {
            return None;
        };
        let mut v = [0u8; 8];
        match sys::bpf_map_lookup(&self.maps.neighbors, &u32::from(v4).to_ne_bytes(), &mut v) {
            Ok(true) => {
                let n = u64::from_ne_bytes(v).to_be_bytes();
                let mut mac = [0u8; 6];
                mac.copy_from_slice(n.get(2..).unwrap_or(&[0; 6]));
                Some(mac)
            }
            _ => None,
        }
    }
}

// ---- the program ----

/// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R10: u8 = 10;

// Instruction classes, sizes, modes and operations (linux/bpf_common.h, bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const STX: u8 = 0x03;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const ABS: u8 = 0x20;
const IND: u8 = 0x40;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const OR: u8 = 0x40;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const MOV: u8 = 0xb0;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JSET: u8 = 0x40;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// `BPF_PSEUDO_MAP_FD`: a 64-bit immediate that is a map's descriptor.
const PSEUDO_MAP_FD: u8 = 1;
const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_MAP_UPDATE_ELEM: i32 = 2;

/// Jump targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    V4,
    V4Ports,
    V6,
    V6Ports,
    Arp,
    Lookup,
    Default,
}

/// A tiny assembler: instructions in their 8-byte form, jumps to labels
/// patched at the end.
struct Asm {
    insns: Vec<[u8; 8]>,
    labels: Vec<(Label, usize)>,
    jumps: Vec<(usize, Label)>,
}

fn encode(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | (dst & 0x0f)
    } else {
        (dst << 4) | (src & 0x0f)
    };
    let o = off.to_ne_bytes();
    let i = imm.to_ne_bytes();
    [code, regs, o[0], o[1], i[0], i[1], i[2], i[3]]
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(encode(code, dst, src, off, imm));
    }
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.insns.len()));
    }
    fn jump(&mut self, code: u8, dst: u8, imm: i32, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.op(JMP | code | K, dst, 0, 0, imm);
    }
    /// `dst = ld_imm64 map fd`: two slots.
    fn map_fd(&mut self, dst: u8, fd: i32) {
        self.op(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, fd);
        self.op(0, 0, 0, 0, 0);
    }
    fn finish(mut self) -> Vec<[u8; 8]> {
        for &(at, to) in &self.jumps {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map_or(at + 1, |&(_, i)| i);
            let off = i16::try_from(target as isize - at as isize - 1).unwrap_or(0);
            if let Some(insn) = self.insns.get_mut(at) {
                let o = off.to_ne_bytes();
                insn[2] = o[0];
                insn[3] = o[1];
            }
        }
        self.insns
    }
}

/// The steering program over the two maps (see the module's docs). Loads
/// from the frame use `LD_ABS`/`LD_IND` (offsets from the Ethernet header;
/// a load past the frame's end ends the program with 0: queue 0).
fn program(ports: i32, neighbors: i32) -> Vec<[u8; 8]> {
    use Label::*;
    let mut a = Asm {
        insns: Vec::with_capacity(64),
        labels: Vec::new(),
        jumps: Vec::new(),
    };
    a.op(ALU64 | MOV | X, R6, R1, 0, 0);
    a.op(LD | H | ABS, 0, 0, 0, 12); // ethertype
    a.jump(JEQ, R0, 0x0800, V4);
    a.jump(JEQ, R0, 0x86dd, V6);
    a.jump(JEQ, R0, 0x0806, Arp);
    a.jump(JA, 0, 0, Default);

    a.label(V4);
    a.op(LD | B | ABS, 0, 0, 0, 14); // version, IHL
    a.op(ALU64 | AND | K, R0, 0, 0, 0x0f);
    a.op(ALU64 | LSH | K, R0, 0, 0, 2);
    a.op(ALU64 | MOV | X, R7, R0, 0, 0); // header length
    a.op(LD | H | ABS, 0, 0, 0, 20); // flags, fragment offset
    a.jump(JSET, R0, 0x3fff, Default); // a fragment: no ports in most
    a.op(LD | B | ABS, 0, 0, 0, 23); // protocol
    a.op(ALU64 | MOV | X, R8, R0, 0, 0);
    a.jump(JEQ, R8, 6, V4Ports);
    a.jump(JEQ, R8, 17, V4Ports);
    a.jump(JA, 0, 0, Default);
    a.label(V4Ports);
    a.op(LD | H | IND, 0, R7, 0, 14 + 2); // destination port
    a.jump(JA, 0, 0, Lookup);

    a.label(V6);
    a.op(LD | B | ABS, 0, 0, 0, 14 + 6); // next header
    a.op(ALU64 | MOV | X, R8, R0, 0, 0);
    a.jump(JEQ, R8, 6, V6Ports);
    a.jump(JEQ, R8, 17, V6Ports);
    a.jump(JA, 0, 0, Default);
    a.label(V6Ports);
    a.op(LD | H | ABS, 0, 0, 0, 14 + 40 + 2);

    a.label(Lookup);
    a.op(ALU64 | LSH | K, R8, 0, 0, 16);
    a.op(ALU64 | OR | X, R0, R8, 0, 0); // protocol << 16 | port
    a.op(STX | W | MEM, R10, R0, -4, 0);
    a.map_fd(R1, ports);
    a.op(ALU64 | MOV | X, R2, R10, 0, 0);
    a.op(ALU64 | ADD | K, R2, 0, 0, -4);
    a.op(JMP | CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
    a.jump(JEQ, R0, 0, Default);
    a.op(LDX | W | MEM, R0, R0, 0, 0);
    a.op(JMP | EXIT, 0, 0, 0, 0);

    a.label(Arp);
    a.op(LD | W | ABS, 0, 0, 0, 14 + 14); // sender protocol address
    a.jump(JEQ, R0, 0, Default); // a probe (RFC 5227): no sender yet
    a.op(STX | W | MEM, R10, R0, -4, 0);
    a.op(LD | W | ABS, 0, 0, 0, 14 + 8); // sender hardware address, 4 bytes
    a.op(ALU64 | MOV | X, R7, R0, 0, 0);
    a.op(LD | H | ABS, 0, 0, 0, 14 + 12); // and its last 2
    a.op(ALU64 | LSH | K, R7, 0, 0, 16);
    a.op(ALU64 | OR | X, R7, R0, 0, 0);
    a.op(STX | DW | MEM, R10, R7, -16, 0);
    a.map_fd(R1, neighbors);
    a.op(ALU64 | MOV | X, R2, R10, 0, 0);
    a.op(ALU64 | ADD | K, R2, 0, 0, -4);
    a.op(ALU64 | MOV | X, R3, R10, 0, 0);
    a.op(ALU64 | ADD | K, R3, 0, 0, -16);
    a.op(ALU64 | MOV | K, R4, 0, 0, 0); // BPF_ANY
    a.op(JMP | CALL, 0, 0, 0, FN_MAP_UPDATE_ELEM);

    a.label(Default);
    a.op(ALU64 | MOV | K, R0, 0, 0, 0);
    a.op(JMP | EXIT, 0, 0, 0, 0);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = program(3, 4);
        // The first jump (ethertype 0x0800) lands on the IPv4 branch's first
        // load (LD_ABS B 14).
        let j = p[2];
        let off = i16::from_ne_bytes([j[2], j[3]]);
        let target = p[(3 + off) as usize];
        assert_eq!(target[0], LD | B | ABS);
        assert_eq!(
            i32::from_ne_bytes([target[4], target[5], target[6], target[7]]),
            14
        );
        // Ends with `r0 = 0; exit`.
        assert_eq!(p[p.len() - 1][0], JMP | EXIT);
        assert!(p.len() < 80);
    }

    #[test]
    fn keys_match_the_program() {
        assert_eq!(u32::from_ne_bytes(port_key(L4::Tcp, 80)), 6 << 16 | 80);
        assert_eq!(u32::from_ne_bytes(port_key(L4::Udp, 53)), 17 << 16 | 53);
    }
}
