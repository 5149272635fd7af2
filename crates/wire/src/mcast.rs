//! IGMP (RFC 3376, RFC 2236, RFC 1112) and MLD (RFC 3810, RFC 2710)
//! messages: queries decoded, reports and leaves encoded into whole Ethernet
//! frames ([`igmp`], [`mld`]). One protocol over two families: the types
//! here are shared. The host state machines that decide what to send are
//! their users' (the engine's sockets, the tunnel endpoint's groups).

use std::net::IpAddr;
use std::time::Duration;

pub mod igmp;
pub mod mld;

/// Record types of a version 3 report (RFC 3376 section 4.2.12, RFC 3810
/// section 5.2.12: the same numbers).
pub mod record {
    /// MODE_IS_INCLUDE (current state).
    pub const IS_IN: u8 = 1;
    /// MODE_IS_EXCLUDE (current state).
    pub const IS_EX: u8 = 2;
    /// CHANGE_TO_INCLUDE_MODE (filter mode change).
    pub const TO_IN: u8 = 3;
    /// CHANGE_TO_EXCLUDE_MODE (filter mode change).
    pub const TO_EX: u8 = 4;
    /// ALLOW_NEW_SOURCES (source list change).
    pub const ALLOW: u8 = 5;
    /// BLOCK_OLD_SOURCES (source list change).
    pub const BLOCK: u8 = 6;
}

/// Max Response Time IGMPv1 queries imply (RFC 2236 section 4: 100 tenths).
pub const V1_MAX_RESP: Duration = Duration::from_secs(10);

/// The querier version a host answers as (RFC 3376 section 7.2.1, RFC 3810
/// section 8.2.1). MLDv1 is [`Compat::V2`]'s place for IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Compat {
    /// IGMPv1 (an IGMPv1 querier is present).
    V1,
    /// IGMPv2, or MLDv1 (such a querier is present).
    V2,
    /// IGMPv3 or MLDv2.
    V3,
}

/// A query, decoded ([`igmp::decode`], [`mld::decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The version of the query itself.
    pub version: Compat,
    /// The group asked about; `None` for a general query.
    pub group: Option<IpAddr>,
    /// The sources asked about (a group-and-source-specific query).
    pub sources: Vec<IpAddr>,
    /// Max Resp Time, decoded.
    pub max_resp: Duration,
    /// Querier's Robustness Variable (0: none given).
    pub qrv: u8,
    /// Querier's Query Interval, decoded (zero: none given).
    pub qqi: Duration,
}

/// A message for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A version 3 report holding these records (type, group, sources).
    Report(Vec<(u8, IpAddr, Vec<IpAddr>)>),
    /// An IGMPv1 membership report for a group.
    V1Report(IpAddr),
    /// An IGMPv2 membership report or MLDv1 listener report for a group.
    V2Report(IpAddr),
    /// An IGMPv2 leave group or MLDv1 listener done for a group.
    Leave(IpAddr),
}
