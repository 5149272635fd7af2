//! A VTEP appliance's pieces: its configuration ([`config`]), the
//! [`Vtep`] that builds and runs the bridge domains of a config over an
//! underlay and local ports ([`endpoint`]), the sharing of one underlay
//! by several encapsulations ([`split`]), and its changes at run time: the
//! difference between two configurations ([`diff`](mod@diff)) and the control socket's
//! protocol ([`control`]).

pub mod config;
pub mod control;
pub mod diff;
pub mod endpoint;
pub mod split;

pub use config::{EndpointConfig, VtepConfigError, parse};
pub use diff::{Edit, diff};
pub use endpoint::{
    EditError, Learning, Sample, Scope, Vtep, VtepError, overlay_mtu, underlay_mac,
};
