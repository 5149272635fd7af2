//! The pieces of a VTEP appliance that are not the data path: its configuration.

pub mod config;
