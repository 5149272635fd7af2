//! Test support for linerate, shared by tests, examples, benchmarks and fuzz seeds.
//!
//! * [`catalog`]: one frame of every kind linerate-wire knows, each with what an
//!   independent dissector (tshark) must read from it.
//! * [`pcap`]: write and read classic pcap files (Ethernet link type).
//! * [`tshark`]: run tshark with checksum validation on and read its field output.
//! * [`netns`]: network namespaces, veth pairs and commands inside them, each a guard
//!   that removes what it made when dropped, also when a test fails.
//! * [`smol`]: smoltcp's `phy::Device` over a linerate NIC port.
//! * [`bulk`]: one-way TCP bulk transfers between two linerate engines (offloads on
//!   or off) or two smoltcp stacks over a memory link, measured in wall and CPU
//!   time ([`cpu`]): the cells of the offload report and the `tcp` benchmark.
//! * `tap` (feature `rt`): a linerate engine facing the Linux kernel over a TAP in a namespace
//!   (root only): the kernel interop tests and the kernel benchmark.
//! * [`vxlan`]: the kernel's own VXLAN device in a namespace, over a TAP whose
//!   other end is linerate's underlay (root only).
//! * [`relay`]: this process as the wire between two NICs (two TAPs: two kernels).
//! * [`stream`]: seeded bulk data and its SHA-256, for transfers with kernel sockets.
//! * [`ping`]: ICMP echo from the kernel's stack over a raw socket (root only).
//! * [`impair`]: an impaired path (loss, delay, reordering, duplication,
//!   corruption, as netem) between the kernel and linerate over a TAP, the
//!   kernel-to-kernel reference through the same impairment, issue 16's matrix.
//! * [`tunnel_pcap`]: a tunnel underlay capture checked frame by frame by tshark.
#![deny(unsafe_code)]

pub mod bulk;
pub mod capture;
pub mod catalog;
pub mod cpu;
pub mod impair;
pub mod netns;
pub mod pcap;
#[cfg(target_os = "linux")]
pub mod ping;
#[cfg(target_os = "linux")]
pub mod relay;
pub mod smol;
pub mod stream;
#[cfg(all(target_os = "linux", feature = "rt"))]
pub mod tap;
pub mod tshark;
pub mod tunnel_pcap;
#[cfg(target_os = "linux")]
pub mod vxlan;
