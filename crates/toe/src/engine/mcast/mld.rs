//! MLD messages: `linerate_wire::mcast::mld` (shared with the tunnel
//! endpoint's group membership).

pub(crate) use linerate_wire::mcast::mld::*;
