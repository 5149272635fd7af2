//! Counters, named after the MIB objects `netstat -s` prints (RFC 4293 for IP and
//! ICMP, RFC 4022 for TCP), plus the reasons frames were dropped.

/// Everything the engine counts. Each field only ever increases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Frames handed to the engine.
    pub rx_frames: u64,
    /// Of those, TCP segments taken with their payload as a chain of
    /// fragments (frag-list GRO), not gathered first (`Engine::handle_frames`).
    pub rx_chained: u64,
    /// Frames the engine emitted.
    pub tx_frames: u64,
    /// Of those, TCP super-segments sent as their headers plus references to
    /// the send buffer, the payload not copied (a sink that takes
    /// scatter-gather frames, `TxSink::takes_frags`).
    pub tcp_out_by_ref: u64,
    /// Frames dropped: bad or truncated Ethernet header.
    pub rx_bad_ethernet: u64,
    /// Frames dropped: not for our MAC, broadcast or a group we listen to.
    pub rx_other_host: u64,
    /// Frames dropped: an EtherType we do not speak.
    pub rx_unknown_ethertype: u64,
    /// ARP packets received.
    pub arp_in: u64,
    /// ARP packets dropped as malformed.
    pub arp_errors: u64,
    /// ARP requests sent.
    pub arp_requests_out: u64,
    /// ARP replies sent.
    pub arp_replies_out: u64,
    /// Gratuitous ARP announcements of our address sent
    /// (`Config::announcements`).
    pub arp_announcements_out: u64,
    /// ARP packets from another MAC whose sender protocol address is ours
    /// (RFC 5227 section 2.4's conflict): counted and otherwise ignored; the
    /// address is not defended.
    pub arp_conflicts: u64,
    /// Neighbour resolutions that gave up (ARP or NDP).
    pub neighbor_failures: u64,
    /// Frames dropped because their neighbour could not be resolved or the queue was full.
    pub neighbor_drops: u64,
    /// New neighbour addresses refused because the table was full
    /// (`Config::neighbor_max`, none expired).
    pub neighbor_table_full: u64,
    /// Datagrams dropped by a blackhole route (`Config::routes`).
    pub route_blackhole_drops: u64,
    /// Datagrams dropped because an unreachable route, or no route, covers
    /// their destination (a connection's segments after the table changed
    /// under it; new connections and UDP sends are refused instead).
    pub route_unreachable_drops: u64,
    /// ipInReceives: IP datagrams received.
    pub ip_in_receives: u64,
    /// ipInHdrErrors: bad version, length, header checksum.
    pub ip_in_hdr_errors: u64,
    /// ipInAddrErrors: not addressed to us.
    pub ip_in_addr_errors: u64,
    /// ipInUnknownProtos: no handler for the protocol.
    pub ip_in_unknown_protos: u64,
    /// Fragments dropped unreassembled because reassembly is off
    /// (`Config::fragments`).
    pub ip_in_fragments_dropped: u64,
    /// ipReasmReqds: fragments received that needed reassembly.
    pub ip_reasm_reqds: u64,
    /// ipReasmOKs: datagrams reassembled.
    pub ip_reasm_oks: u64,
    /// ipReasmFails: failures of reassembly (a datagram timed out, evicted,
    /// overlapping, inconsistent or over a bound; a fragment refused), as
    /// Linux counts them: not a count of fragments discarded.
    pub ip_reasm_fails: u64,
    /// ReasmTimeout (Linux): datagrams whose reassembly timed out.
    pub ip_reasm_timeout: u64,
    /// ReasmOverlaps (Linux): datagrams dropped whole because two of their
    /// fragments overlapped (RFC 5722, and the same for IPv4).
    pub ip_reasm_overlaps: u64,
    /// Fragments that repeated one already held exactly (same offset and
    /// length): ignored, as RFC 8200 section 4.5 allows and Linux does.
    pub ip_reasm_duplicates: u64,
    /// Fragments refused for their length: not a multiple of 8 on a fragment
    /// with more to follow, or empty.
    pub ip_reasm_bad_length: u64,
    /// Fragments refused because the datagram would pass 65,535 bytes.
    pub ip_reasm_too_long: u64,
    /// Datagrams dropped because a fragment reached past the end a last
    /// fragment had set, or a second last fragment disagreed on the end.
    pub ip_reasm_past_end: u64,
    /// Datagrams dropped for having more fragments than
    /// `FragConfig::max_fragments`.
    pub ip_reasm_too_many: u64,
    /// Datagrams dropped to keep the reassembly memory within
    /// `FragConfig::high_thresh` (the oldest first).
    pub ip_reasm_evicted: u64,
    /// Datagrams dropped because their source held its whole share
    /// (`FragConfig::per_source`).
    pub ip_reasm_source_limit: u64,
    /// Fragments that belonged to a datagram already dropped for overlapping
    /// fragments (RFC 5722: the fragments not yet received are discarded too).
    pub ip_reasm_after_overlap: u64,
    /// IPv6 first fragments without the whole header chain up to the
    /// upper-layer header (RFC 7112): dropped.
    pub ip_reasm_incomplete_chain: u64,
    /// ipFragOKs: datagrams fragmented on output.
    pub ip_frag_oks: u64,
    /// ipFragCreates: fragments made on output.
    pub ip_frag_creates: u64,
    /// ICMP time exceeded messages sent (reassembly timeouts).
    pub icmp_out_time_excds: u64,
    /// ICMP parameter problem messages sent (IPv6 fragments refused, RFC 8200
    /// section 4.5 and RFC 7112).
    pub icmp_out_parm_probs: u64,
    /// ipInDelivers: datagrams handed to ICMP or TCP.
    pub ip_in_delivers: u64,
    /// ipOutRequests: datagrams sent (a super-segment counts once).
    pub ip_out_requests: u64,
    /// icmpInMsgs.
    pub icmp_in_msgs: u64,
    /// icmpInErrors: bad checksum or length.
    pub icmp_in_errors: u64,
    /// icmpOutMsgs.
    pub icmp_out_msgs: u64,
    /// icmpInEchos.
    pub icmp_in_echos: u64,
    /// icmpOutEchoReps.
    pub icmp_out_echo_reps: u64,
    /// NDP neighbour solicitations received for one of our addresses.
    pub ndp_in_solicits: u64,
    /// NDP neighbour advertisements received.
    pub ndp_in_adverts: u64,
    /// NDP messages dropped (hop limit not 255, malformed).
    pub ndp_errors: u64,
    /// Unsolicited neighbour advertisements of our IPv6 address sent at start
    /// (RFC 4861 section 7.2.6; `Config::announcements`).
    pub ndp_unsolicited_adverts_out: u64,
    /// tcpActiveOpens.
    pub tcp_active_opens: u64,
    /// tcpPassiveOpens.
    pub tcp_passive_opens: u64,
    /// tcpAttemptFails.
    pub tcp_attempt_fails: u64,
    /// tcpEstabResets.
    pub tcp_estab_resets: u64,
    /// tcpInSegs (a coalesced super-segment counts as the segments it holds).
    pub tcp_in_segs: u64,
    /// tcpOutSegs (a super-segment counts as the segments it will become).
    pub tcp_out_segs: u64,
    /// tcpRetransSegs.
    pub tcp_retrans_segs: u64,
    /// tcpInErrs: bad checksum, bad header.
    pub tcp_in_errs: u64,
    /// tcpInCsumErrors (also counted in `tcp_in_errs`).
    pub tcp_in_csum_errors: u64,
    /// tcpOutRsts.
    pub tcp_out_rsts: u64,
    /// Segments dropped by the sequence or PAWS checks (an ACK may have been sent).
    pub tcp_out_of_window: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub tcp_challenge_acks: u64,
    /// Retransmission timeouts.
    pub tcp_timeouts: u64,
    /// Fast retransmits (entries into loss recovery).
    pub tcp_fast_retransmits: u64,
    /// Zero-window probes sent.
    pub tcp_window_probes: u64,
    /// SYNs (or cookie ACKs) dropped because the listen queues were full.
    pub tcp_listen_drops: u64,
    /// SYN cookies sent (Linux's SyncookiesSent).
    pub tcp_syncookies_sent: u64,
    /// Returning ACKs whose cookie validated: connections made from a cookie
    /// (SyncookiesRecv).
    pub tcp_syncookies_recv: u64,
    /// ACKs to a listener that recently sent cookies whose cookie did not
    /// validate (SyncookiesFailed); answered with RST.
    pub tcp_syncookies_failed: u64,
    /// udpNoPorts: UDP datagrams to a port no socket is bound to.
    pub udp_no_ports: u64,
    /// udpInDatagrams: UDP datagrams delivered to a socket's receive queue (a GRO
    /// super-datagram counts as the datagrams it holds).
    pub udp_in_datagrams: u64,
    /// udpInErrors: UDP datagrams dropped for a bad header, a bad checksum or a
    /// full receive queue.
    pub udp_in_errors: u64,
    /// UdpInCsumErrors (also counted in `udp_in_errors`).
    pub udp_in_csum_errors: u64,
    /// UdpRcvbufErrors: datagrams dropped because the socket's receive queue was
    /// full (also counted in `udp_in_errors`).
    pub udp_rcvbuf_errors: u64,
    /// udpOutDatagrams: UDP datagrams sent (a USO super-datagram counts as the
    /// datagrams it becomes).
    pub udp_out_datagrams: u64,
    /// UdpSndbufErrors: sends refused because the socket's send queue was full.
    pub udp_sndbuf_errors: u64,
    /// icmpOutDestUnreachs: destination unreachable messages sent (port
    /// unreachable for UDP to a closed port).
    pub icmp_out_dest_unreachs: u64,
    /// ICMP errors not sent because the rate limit's tokens ran out (Linux's
    /// IcmpOutRateLimitGlobal).
    pub icmp_out_rate_limited: u64,
    /// icmpInDestUnreachs (fragmentation needed included).
    pub icmp_in_dest_unreachs: u64,
    /// ICMPv6 packet too big messages received.
    pub icmp_in_pkt_too_bigs: u64,
    /// ICMP errors that quoted no connection or socket of ours, or a TCP sequence
    /// number outside SND.UNA..SND.MAX (RFC 5927 section 4.1), ignored.
    pub icmp_in_ignored: u64,
    /// Path MTU decreases taken from fragmentation needed / packet too big.
    pub pmtu_updates: u64,
    /// TCP connections in SYN-SENT failed by an ICMP hard error (port or
    /// protocol unreachable, RFC 1122 section 4.2.3.9).
    pub tcp_icmp_refused: u64,
    /// TCP keep-alive probes sent (Linux's TCPKeepAlive).
    pub tcp_keepalive_probes: u64,
    /// Connections that failed because keep-alive probes went unanswered.
    pub tcp_keepalive_timeouts: u64,
    /// Challenge ACKs not sent because the per-engine limit was reached
    /// (RFC 5961 section 7; Linux's TCPChallengeACK counts the sent ones).
    pub tcp_challenge_acks_suppressed: u64,
    /// Out-of-order segments dropped because the engine's out-of-order budget
    /// (`TcpConfig::ofo_total`) was spent, or because their connection already
    /// holds as many disjoint out-of-order ranges as it tracks (a fixed
    /// number per connection).
    pub tcp_ofo_dropped: u64,
    /// In-order segments whose payload the receive buffer kept in its frame
    /// instead of copying (`Engine::handle_frames`, `tcp::recvbuf`).
    pub tcp_rx_adopted: u64,
    /// Segments taken by header prediction: in-order data the receive fast
    /// path placed without the general ACK processing (`Conn::on_predicted`;
    /// Linux's `TCPHPHits`).
    pub tcp_hp_hits: u64,
    /// Receive buffers grown by auto-tuning (`TcpConfig::recv_autotune`), each
    /// growth once.
    pub tcp_rcvbuf_grown: u64,
    /// Tail loss probes sent (RFC 8985 section 7; Linux's TCPLossProbes).
    pub tcp_tlp_probes: u64,
    /// Connections that negotiated ECN (RFC 3168).
    pub tcp_ecn_negotiated: u64,
    /// CE-marked data segments received on ECN connections.
    pub tcp_ecn_ce_in: u64,
    /// Congestion window reductions on ECE (at most one per window of data).
    pub tcp_ecn_reductions: u64,
    /// Segments RACK found lost (RFC 8985 section 6), retransmissions included.
    pub tcp_rack_lost: u64,
    /// RTT samples not taken because the timestamp echo of an ACK for
    /// retransmitted data was older than the retransmission (the original's).
    pub tcp_rtt_spurious_skipped: u64,
    /// Congestion responses (a fast retransmission or a timeout) undone as
    /// needless, by D-SACK or by a timestamp echo (`tcp::undo`; Linux's
    /// TCPFullUndo, TCPDSACKUndo and TCPLossUndo together).
    pub tcp_undos: u64,
    /// IGMP, MLD and multicast delivery (`engine::mcast`).
    pub mcast: crate::engine::McastCounters,
}
