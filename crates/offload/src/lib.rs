//! Offloads in software: the [`OffloadMeta`] vocabulary, checksum completion and
//! verification, GSO/TSO/USO segmentation and GRO/LRO coalescing, plain and through
//! VXLAN, GENEVE and NVGRE.
#![deny(unsafe_code)]

pub mod meta;
pub use meta::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta, RssHash, RssHashType};

pub mod csum;
pub mod gro;
pub mod gso;
#[cfg(feature = "harness")]
#[doc(hidden)]
pub mod harness;
pub mod virtio;

pub use csum::{CsumError, Verdict, complete, prepare_partial, verify};
pub use gro::{ChainSink, FlushReason, Gro, GroConfig, GroCounters, NoChain};
pub use gso::{CsumMode, GsoError, SegmentBuf, Segmenter, ZeroCopyBuf};
pub use virtio::VirtioNetHdr;
