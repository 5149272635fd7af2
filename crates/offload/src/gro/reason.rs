//! Why a run was flushed, a packet refused, or a packet put in a flow of its own;
//! and the counters that record it, named like `ethtool -S` statistics.

use core::fmt;

macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why GRO did not merge a packet into a run, or ended a run.
        ///
        /// One value serves three counter families of [`GroCounters`]:
        /// `flushed_<name>` (a held run was delivered for this reason),
        /// `refused_<name>` (a packet was delivered on its own, never held) and
        /// `split_<name>` (a packet matched a held run's hash but one layer said it
        /// belongs to another flow, so it was not merged into that run).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum FlushReason {
            $($(#[$doc])* $variant,)*
        }

        impl FlushReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [FlushReason] = &[$(FlushReason::$variant,)*];

            /// The reason's name in counter names (`flushed_<name>`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(FlushReason::$variant => $name,)*
                }
            }
        }
    };
}

reasons! {
    // Runs ended without a packet of their own flow.
    /// [`Gro::flush_all`](super::Gro::flush_all): the end of a batch (Linux
    /// `napi_gro_flush` at the end of a NAPI poll).
    BatchEnd => "batch_end",
    /// [`Gro::flush_older_than`](super::Gro::flush_older_than): the run's first
    /// segment is older than the configured age.
    Age => "age",
    /// The flow's hash bucket was full: its oldest run was delivered to make room
    /// (Linux `gro_flush_oldest`, `MAX_GRO_SKBS`).
    TableFull => "table_full",

    // A packet that cannot be held at all (refused), flushing its flow's run first.
    /// The frame's headers could not be parsed (or its layout does not fit it).
    Unparsed => "unparsed",
    /// Not TCP (or UDP with UDP GRO on) over IPv4/IPv6, or a tunnel payload that is
    /// not Ethernet.
    Unsupported => "unsupported",
    /// UDP datagram while UDP GRO is off.
    UdpOff => "udp_off",
    /// The frame already carries a GSO record (it was coalesced before).
    AlreadyGso => "already_gso",
    /// An IP or UDP length field is not the real length (Ethernet padding, or a
    /// malformed header) (`inet_gro_receive`, `ipv6_gro_receive`).
    Length => "length",
    /// IPv4 options present (IHL is not 5).
    IpOptions => "ip_options",
    /// An IP fragment (MF, a fragment offset, the reserved flag, or an IPv6
    /// fragment header).
    Fragment => "fragment",
    /// The IPv4 header checksum is wrong.
    IpCsum => "ip_csum",
    /// The TCP or UDP checksum (computed here because the meta did not say it was
    /// verified) is wrong.
    CsumBad => "csum_bad",
    /// The meta says `Partial`, but not for the innermost transport checksum.
    CsumPartial => "csum_partial",
    /// A non-zero outer UDP checksum of a tunnel is wrong.
    OuterCsumBad => "outer_csum_bad",
    /// The GRE checksum is wrong.
    GreCsum => "gre_csum",
    /// GRE flags other than K and C (S, R, reserved bits or a version), or, as a
    /// split, GRE flags that differ from the run's.
    GreFlags => "gre_flags",
    /// GENEVE version is not 0.
    GeneveVersion => "geneve_version",
    /// GENEVE O bit (a control message) set.
    GeneveOam => "geneve_oam",
    /// A TCP segment without payload (pure ACK) never merges.
    PureAck => "pure_ack",
    /// SYN set.
    Syn => "syn",
    /// RST set.
    Rst => "rst",
    /// URG set.
    Urg => "urg",
    /// UDP GRO: a zero UDP checksum (GRO needs one, for symmetry with GSO).
    UdpCsumZero => "udp_csum_zero",

    // A packet of the run's flow that cannot join it: the run is flushed and the
    // packet starts a new one (if it can).
    /// IPv4 TTL differs.
    Ttl => "ttl",
    /// IPv4 TOS differs.
    Tos => "tos",
    /// IPv4 DF differs.
    Df => "df",
    /// IPv4 ID neither the run's fixed ID nor the first segment's ID plus the number
    /// of segments held (or a fixed ID without DF).
    IpId => "ip_id",
    /// IPv6 traffic class differs.
    TrafficClass => "traffic_class",
    /// IPv6 hop limit differs.
    HopLimit => "hop_limit",
    /// TCP acknowledgement number differs.
    Ack => "ack",
    /// TCP window differs.
    Window => "window",
    /// TCP flags other than CWR, FIN and PSH differ (for example ECE).
    TcpFlags => "tcp_flags",
    /// TCP options (or the data offset) differ: a timestamp that moved, a SACK.
    TcpOptions => "tcp_options",
    /// TCP sequence number is not the run's next (loss or reordering).
    SeqGap => "seq_gap",
    /// Payload larger than the run's segment size (the first segment's payload).
    OverMss => "over_mss",
    /// CWR set: such a segment can only start a run.
    Cwr => "cwr",
    /// The merged IP packet would exceed the configured size (64 KiB).
    Size => "size",
    /// The run holds the configured maximum number of segments.
    Segs => "segs",

    // Merged, then the run is flushed at once (or, alone, not held).
    /// PSH set: merged, flags ORed into the run's head, then flushed.
    Psh => "psh",
    /// FIN set: merged, flags ORed into the run's head, then flushed.
    Fin => "fin",
    /// A payload shorter than the run's segment size ends the run (merged, then
    /// flushed).
    Short => "short",

    // Different flows although the hash matched (splits).
    /// Addresses, ports or protocol differ (a hash collision).
    Tuple => "tuple",
    /// An Ethernet header (MACs, VLAN tags, EtherType) differs.
    L2 => "l2",
    /// IPv6 flow label differs.
    FlowLabel => "flow_label",
    /// IPv6 next header or extension headers differ.
    Ipv6Ext => "ipv6_ext",
    /// VXLAN VNI, GENEVE VNI or NVGRE VSID differs.
    Vni => "vni",
    /// VXLAN flags word differs.
    TunnelFlags => "tunnel_flags",
    /// GENEVE header (options, C bit, protocol) differs.
    GeneveOptions => "geneve_options",
    /// GRE key differs (NVGRE: VSID or FlowID).
    GreKey => "gre_key",
    /// Outer UDP checksum zero in one and non-zero in the other.
    OuterCsum => "outer_csum",
}

impl fmt::Display for FlushReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const N: usize = FlushReason::ALL.len();

/// GRO statistics, in the spirit of `ethtool -S`.
///
/// Every packet given to [`Gro::receive`](super::Gro::receive) is counted in
/// `received` and ends in exactly one of: `merged` (appended to a held run),
/// `held` (started a run), or a `refused_<reason>` counter (delivered on its own).
/// Every run ends in exactly one `flushed_<reason>` counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroCounters {
    /// Packets given to GRO.
    pub received: u64,
    /// Packets appended to a held run.
    pub merged: u64,
    /// Packets that started a run.
    pub held: u64,
    /// Frames delivered (runs of any size, and refused packets).
    pub delivered: u64,
    /// Delivered frames that hold more than one segment.
    pub coalesced: u64,
    /// Packets whose checksums GRO verified in software (their meta said
    /// [`Checksum::None`](crate::Checksum::None), or verified fewer levels than
    /// they have) and found good; they leave GRO marked
    /// [`Checksum::Verified`](crate::Checksum::Verified).
    pub csum_verified: u64,
    flushed: [u64; N],
    refused: [u64; N],
    split: [u64; N],
}

impl Default for GroCounters {
    fn default() -> Self {
        GroCounters {
            received: 0,
            merged: 0,
            held: 0,
            delivered: 0,
            coalesced: 0,
            csum_verified: 0,
            flushed: [0; N],
            refused: [0; N],
            split: [0; N],
        }
    }
}

impl GroCounters {
    /// Runs delivered because of `r`.
    pub fn flushed(&self, r: FlushReason) -> u64 {
        self.flushed.get(r as usize).copied().unwrap_or(0)
    }

    /// Packets delivered on their own, never held, because of `r`.
    pub fn refused(&self, r: FlushReason) -> u64 {
        self.refused.get(r as usize).copied().unwrap_or(0)
    }

    /// Packets kept apart from a held run with the same hash because of `r`.
    pub fn split(&self, r: FlushReason) -> u64 {
        self.split.get(r as usize).copied().unwrap_or(0)
    }

    /// Sum of all `flushed_*` counters: runs delivered.
    pub fn flushed_total(&self) -> u64 {
        self.flushed.iter().sum()
    }

    /// Sum of all `refused_*` counters: packets delivered on their own.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }

    /// Every counter with its `ethtool -S` style name (`gro_received`,
    /// `gro_flushed_seq_gap`, `gro_refused_ip_options`, `gro_split_vni`, ...),
    /// zeros included, in a stable order.
    pub fn named(&self) -> Vec<(String, u64)> {
        let mut v = vec![
            ("gro_received".to_owned(), self.received),
            ("gro_merged".to_owned(), self.merged),
            ("gro_held".to_owned(), self.held),
            ("gro_delivered".to_owned(), self.delivered),
            ("gro_coalesced".to_owned(), self.coalesced),
            ("gro_csum_verified".to_owned(), self.csum_verified),
        ];
        for (family, values) in [
            ("flushed", &self.flushed),
            ("refused", &self.refused),
            ("split", &self.split),
        ] {
            for (r, &n) in FlushReason::ALL.iter().zip(values.iter()) {
                v.push((format!("gro_{family}_{}", r.name()), n));
            }
        }
        v
    }

    pub(super) fn flush(&mut self, r: FlushReason) {
        if let Some(c) = self.flushed.get_mut(r as usize) {
            *c += 1;
        }
    }

    pub(super) fn refuse(&mut self, r: FlushReason) {
        if let Some(c) = self.refused.get_mut(r as usize) {
            *c += 1;
        }
    }

    pub(super) fn split_off(&mut self, r: FlushReason) {
        if let Some(c) = self.split.get_mut(r as usize) {
            *c += 1;
        }
    }
}

impl fmt::Display for GroCounters {
    /// The non-zero counters, one `name: value` per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, n) in self.named() {
            if n != 0 {
                writeln!(f, "{name}: {n}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_indexable() {
        let mut names: Vec<_> = FlushReason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FlushReason::ALL.len());
        for (i, r) in FlushReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }

    #[test]
    fn counters_are_named() {
        let mut c = GroCounters::default();
        c.flush(FlushReason::SeqGap);
        c.refuse(FlushReason::IpOptions);
        c.split_off(FlushReason::Vni);
        assert_eq!(c.flushed(FlushReason::SeqGap), 1);
        assert_eq!(c.flushed_total(), 1);
        assert_eq!(c.refused_total(), 1);
        let named = c.named();
        assert!(named.contains(&("gro_flushed_seq_gap".to_owned(), 1)));
        assert!(named.contains(&("gro_refused_ip_options".to_owned(), 1)));
        assert!(named.contains(&("gro_split_vni".to_owned(), 1)));
        assert_eq!(named.len(), 6 + 3 * FlushReason::ALL.len());
        assert_eq!(
            c.to_string(),
            "gro_flushed_seq_gap: 1\ngro_refused_ip_options: 1\ngro_split_vni: 1\n"
        );
    }
}
