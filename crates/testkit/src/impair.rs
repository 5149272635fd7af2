//! An impaired path between the Linux kernel and linerate (docs/testing.md:
//! "An impaired path"): this kernel has no `sch_netem`, so the process that owns the TAP
//! impairs the frames itself, as netem would on a real link.
//!
//! * [`Model`]: netem's per-frame decisions from a seed (loss, delay with
//!   jitter, reordering, duplication, corruption of one bit, an optional rate);
//!   [`DelayLine`]: the frames held until due, released in time order.
//! * [`Impaired`]: any [`linerate_nic::Nic`] behind such a link, one line each
//!   way. A kernel super-frame is segmented first (linerate_offload's GSO), so
//!   every impairment applies per wire frame; released frames are coalesced
//!   again by GRO when offloads are on, as a receiving NIC would.
//! * `linerate` (feature `rt`): linerate's engine on an impaired TAP against a
//!   kernel socket in a namespace; [`kernel_to_kernel`]: the reference, a second
//!   kernel in linerate's place with this process relaying between the two
//!   TAPs through the same wrapper. Both move bytes of a seeded pattern, check
//!   SHA-256, and report the wall time and the kernel's `TCP_INFO` ([`tcp_info`]).
//! * [`matrix`]: issue 16's settings and a Markdown table of linerate against
//!   the reference.
//!
//! ```
//! use linerate_testkit::impair::{DelayLine, Impairment, Model};
//! use std::time::Duration;
//!
//! // 10 % loss and 5 ms of delay, seed 7.
//! let cfg = Impairment { loss: 0.1, delay: Duration::from_millis(5), ..Impairment::CLEAN };
//! let mut line = DelayLine::new(Model::new(cfg, 7));
//! for i in 0..1000u64 {
//!     line.offer(i * 1_000, &[0u8; 60]); // one frame per microsecond
//! }
//! // Nothing is due before 5 ms.
//! assert_eq!(line.release(4_000_000, usize::MAX, |_| {}), 0);
//! let released = line.release(10_000_000, usize::MAX, |f| assert_eq!(f.len(), 60));
//! let c = line.counters();
//! assert_eq!(released as u64 + c.lost, 1000);
//! assert!((60..140).contains(&c.lost), "{c:?}");
//! ```

mod line;
#[cfg(target_os = "linux")]
pub mod matrix;
mod model;
mod nic;
#[cfg(target_os = "linux")]
mod tcp_info;
#[cfg(test)]
mod tests;

#[cfg(target_os = "linux")]
mod kernel;
#[cfg(target_os = "linux")]
mod reference;
#[cfg(all(target_os = "linux", feature = "rt"))]
mod run;
#[cfg(target_os = "linux")]
mod setup;

pub use line::DelayLine;
pub use model::{Delivery, ImpairCounters, Impairment, Model, Rng, Verdict};
pub use nic::{Impaired, ImpairedConfig, ImpairedStats};
#[cfg(target_os = "linux")]
pub use reference::kernel_to_kernel;
#[cfg(all(target_os = "linux", feature = "rt"))]
pub use run::linerate;
#[cfg(target_os = "linux")]
pub use setup::{
    Direction, KERNEL_IP, KernelTcp, PEER_IP, PEER_MAC, RunConfig, RunResult, tap_in, tap_in_ring,
};
#[cfg(target_os = "linux")]
pub use tcp_info::{TcpInfo, tcp_info};
