//! IGMP messages: `linerate_wire::mcast::igmp` (shared with the tunnel
//! endpoint's group membership).

pub(crate) use linerate_wire::mcast::igmp::*;
