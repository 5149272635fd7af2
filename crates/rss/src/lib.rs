//! Receive-side scaling in software (being written).
#![deny(unsafe_code)]

pub mod error;
pub mod indirection;
pub mod input;
pub mod key;
pub mod toeplitz;

pub use error::{ConfigError, PortError};
pub use indirection::{IndirectionTable, SharedTable};
pub use input::{
    FlowAddrs, FlowTuple, HashConfig, HashInput, HashLevel, HashTypes, Transport, TunnelHashing,
};
pub use key::RssKey;
pub use toeplitz::{Path, Toeplitz};
