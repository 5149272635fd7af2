//! A VTEP appliance's pieces: its configuration ([`config`]), the
//! [`Vtep`] that builds and runs the bridge domains of a config over an
//! underlay and local ports ([`endpoint`]), and the sharing of one underlay
//! by several encapsulations ([`split`]).

pub mod config;
pub mod endpoint;
pub mod split;

pub use config::{EndpointConfig, VtepConfigError, parse};
pub use endpoint::{Learning, Vtep, VtepError, overlay_mtu, underlay_mac};
