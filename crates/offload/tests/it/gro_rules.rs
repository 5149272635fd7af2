//! One test per Linux GRO rule of REFERENCE.md ("GRO (coalescing)") for IP and TCP:
//! a segment that must not merge, what GRO delivers, and the counter that says why.
//! Tunnel and UDP GRO rules are in `gro_tunnel_rules.rs`.

use crate::gro_util;

use gro_util::*;
use linerate_offload::gro::{FlushReason, Gro, GroConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{Ipv4Options, TcpOptionElement};
use linerate_wire::layout;

fn gro() -> Gro {
    Gro::new(GroConfig::default())
}

/// Two segments where the second is `second` (built from the first's seq + 1000):
/// returns the delivered frames; asserts nothing merged.
fn no_merge(second: Vec<u8>) -> (Gro, Delivered) {
    let first = frame(v4(100), tcp(1), 1000);
    let mut g = gro();
    let out = run(&mut g, &[first.clone(), second.clone()]);
    assert_eq!(out.len(), 2, "{}", g.counters());
    assert_eq!(out[0].0, first, "the first is delivered unchanged");
    assert_eq!(out[1].0, second, "the second is delivered unchanged");
    assert!(out.iter().all(|(_, m)| m.gso.is_none()));
    assert_eq!(g.counters().merged, 0);
    assert_balanced(&g);
    (g, out)
}

#[test]
#[allow(clippy::unwrap_used)]
fn ipv6_extension_headers_merge_when_equal_and_split_when_not() {
    use linerate_wire::etherparse::{IpNumber, Ipv6Extensions, Ipv6RawExtHeader};
    let with_hbh = |opt: u8| {
        let Ip::V6(h, _) = v6() else { unreachable!() };
        let exts = Ipv6Extensions {
            hop_by_hop_options: Some(
                Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, opt, 0, 0, 0]).unwrap(),
            ),
            ..Default::default()
        };
        Ip::V6(h, Box::new(exts))
    };
    let train: Vec<_> = (0..3)
        .map(|i| frame(with_hbh(0), tcp(1 + i * 1000), 1000))
        .collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [3]);
    assert_eq!(resegment(&out[0].0, &out[0].1), train);
    let mut g = gro();
    let out = run(
        &mut g,
        &[train[0].clone(), frame(with_hbh(9), tcp(1001), 1000)],
    );
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::Ipv6Ext), 1);
}

#[test]
fn ip_options_refuse_the_segment() {
    let mut ip = v4(101);
    if let Ip::V4(h) = &mut ip {
        h.options = Ipv4Options::from([1, 1, 1, 1]); // four NOPs
    }
    let (g, _) = no_merge(frame(ip, tcp(1001), 1000));
    assert_eq!(g.counters().refused(FlushReason::IpOptions), 1);
    assert_eq!(
        g.counters().flushed(FlushReason::IpOptions),
        1,
        "the run went first"
    );
}

#[test]
fn a_fragment_is_refused() {
    let mut ip = v4(101);
    if let Ip::V4(h) = &mut ip {
        h.dont_fragment = false;
        h.more_fragments = true;
    }
    let (g, _) = no_merge(frame(ip, tcp(1001), 1000));
    assert_eq!(g.counters().refused(FlushReason::Fragment), 1);
}

#[test]
fn ttl_difference_flushes() {
    let mut ip = v4(101);
    if let Ip::V4(h) = &mut ip {
        h.time_to_live = 63;
    }
    let (g, _) = no_merge(frame(ip, tcp(1001), 1000));
    assert_eq!(g.counters().flushed(FlushReason::Ttl), 1);
    assert_eq!(g.counters().held, 2, "the segment starts a new run");
}

#[test]
fn tos_difference_flushes() {
    let (g, _) = no_merge(frame(with_dscp(v4(101), 10), tcp(1001), 1000));
    assert_eq!(g.counters().flushed(FlushReason::Tos), 1);
}

#[test]
fn df_difference_flushes() {
    let mut ip = v4(101);
    if let Ip::V4(h) = &mut ip {
        h.dont_fragment = false;
    }
    let (g, _) = no_merge(frame(ip, tcp(1001), 1000));
    assert_eq!(g.counters().flushed(FlushReason::Df), 1);
}

#[test]
fn ip_id_neither_incrementing_nor_fixed_flushes() {
    let (g, _) = no_merge(frame(v4(102), tcp(1001), 1000));
    assert_eq!(g.counters().flushed(FlushReason::IpId), 1);
}

#[test]
fn ip_id_incrementing_is_decided_at_the_second_segment() {
    // 100, 101 makes the run incrementing; then 101 again does not fit.
    let train = vec![
        frame(v4(100), tcp(1), 1000),
        frame(v4(101), tcp(1001), 1000),
        frame(v4(101), tcp(2001), 1000),
    ];
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [2, 1]);
    assert_eq!(g.counters().flushed(FlushReason::IpId), 1);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn fixed_ip_id_with_df_merges_as_fixed_id() {
    let train: Vec<_> = (0..4)
        .map(|i| frame(v4(7), tcp(1 + i * 1000), 1000))
        .collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [4]);
    assert!(out[0].1.gso.unwrap().fixed_id);
    assert_eq!(resegment(&out[0].0, &out[0].1), train);
}

#[test]
fn fixed_ip_id_without_df_flushes() {
    let ip = |id| {
        let mut ip = v4(id);
        if let Ip::V4(h) = &mut ip {
            h.dont_fragment = false;
        }
        ip
    };
    let mut g = gro();
    let out = run(
        &mut g,
        &[frame(ip(7), tcp(1), 1000), frame(ip(7), tcp(1001), 1000)],
    );
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().flushed(FlushReason::IpId), 1);
}

#[test]
fn ack_difference_flushes() {
    let mut t = tcp(1001);
    t.acknowledgment_number = 2;
    let (g, _) = no_merge(frame(v4(101), t, 1000));
    assert_eq!(g.counters().flushed(FlushReason::Ack), 1);
}

#[test]
fn window_difference_flushes() {
    let mut t = tcp(1001);
    t.window_size = 1000;
    let (g, _) = no_merge(frame(v4(101), t, 1000));
    assert_eq!(g.counters().flushed(FlushReason::Window), 1);
}

#[test]
fn ece_difference_flushes() {
    let mut t = tcp(1001);
    t.ece = true;
    let (g, _) = no_merge(frame(v4(101), t, 1000));
    assert_eq!(g.counters().flushed(FlushReason::TcpFlags), 1);
}

#[allow(clippy::unwrap_used)] // a test helper: a panic is a failed test
fn with_ts(
    mut t: linerate_wire::etherparse::TcpHeader,
    ts: u32,
) -> linerate_wire::etherparse::TcpHeader {
    t.set_options(&[
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::Timestamp(ts, 9),
    ])
    .unwrap();
    t
}

#[test]
fn equal_timestamps_merge_and_a_changed_one_flushes() {
    let train = vec![
        frame(v4(100), with_ts(tcp(1), 5), 1000),
        frame(v4(101), with_ts(tcp(1001), 5), 1000),
        frame(v4(102), with_ts(tcp(2001), 6), 1000),
    ];
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [2, 1]);
    assert_eq!(g.counters().flushed(FlushReason::TcpOptions), 1);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn options_appearing_flush() {
    let (g, _) = no_merge(frame(v4(101), with_ts(tcp(1001), 5), 1000));
    assert_eq!(g.counters().flushed(FlushReason::TcpOptions), 1);
}

#[test]
fn a_sequence_gap_flushes() {
    let (g, _) = no_merge(frame(v4(101), tcp(2001), 1000));
    assert_eq!(g.counters().flushed(FlushReason::SeqGap), 1);
}

#[test]
fn reordering_flushes_rather_than_merging_across() {
    let t = train_v4(4, 1000);
    let fed = vec![t[0].clone(), t[2].clone(), t[1].clone(), t[3].clone()];
    let mut g = gro();
    let out = run(&mut g, &fed);
    assert_eq!(
        resegment_all(&out),
        fed,
        "delivered in arrival order, nothing lost"
    );
    assert!(g.counters().flushed(FlushReason::SeqGap) >= 2);
}

#[test]
fn payload_over_mss_flushes() {
    let first = frame(v4(100), tcp(1), 500);
    let second = frame(v4(101), tcp(501), 1000);
    let mut g = gro();
    let out = run(&mut g, &[first.clone(), second.clone()]);
    assert_eq!(
        out.iter().map(|o| o.0.clone()).collect::<Vec<_>>(),
        [first, second]
    );
    assert_eq!(g.counters().flushed(FlushReason::OverMss), 1);
}

#[test]
fn a_pure_ack_never_merges() {
    let ack = frame(v4(101), tcp(1001), 0);
    let (g, _) = no_merge(ack.clone());
    assert_eq!(g.counters().refused(FlushReason::PureAck), 1);
    assert_eq!(g.counters().flushed(FlushReason::PureAck), 1);
    // Alone, too.
    let mut g = gro();
    let out = run(&mut g, &[ack.clone(), ack.clone()]);
    assert_eq!(out.len(), 2);
    assert_eq!(g.counters().refused(FlushReason::PureAck), 2);
}

#[test]
fn cwr_can_only_start_a_run() {
    let mut t = tcp(1001);
    t.cwr = true;
    let (g, _) = no_merge(frame(v4(101), t, 1000));
    assert_eq!(g.counters().flushed(FlushReason::Cwr), 1);
    assert_eq!(g.counters().held, 2, "the CWR segment starts a run");
}

#[test]
fn a_run_started_by_cwr_is_marked_ecn() {
    let mut first = tcp(1);
    first.cwr = true;
    let train = vec![
        frame(v4(100), first, 1000),
        frame(v4(101), tcp(1001), 1000),
        frame(v4(102), tcp(2001), 1000),
    ];
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [3]);
    assert!(out[0].1.gso.unwrap().ecn);
    assert_eq!(resegment(&out[0].0, &out[0].1), train);
}

fn flagged_last(
    set: impl Fn(&mut linerate_wire::etherparse::TcpHeader),
) -> (Gro, Delivered, Vec<Vec<u8>>) {
    let mut last = tcp(2001);
    set(&mut last);
    let train = vec![
        frame(v4(100), tcp(1), 1000),
        frame(v4(101), tcp(1001), 1000),
        frame(v4(102), last, 1000),
        frame(v4(103), tcp(3001), 1000),
    ];
    let mut g = gro();
    let out = run(&mut g, &train);
    (g, out, train)
}

#[test]
fn fin_is_merged_then_flushed() {
    let (g, out, train) = flagged_last(|t| t.fin = true);
    assert_eq!(segs(&out), [3, 1]);
    let (f, m) = &out[0];
    let l = layout::parse(f).unwrap();
    assert_eq!(
        f[usize::from(l.outer.l4_offset) + 13] & 0x01,
        0x01,
        "FIN ORed into the head"
    );
    assert_eq!(g.counters().flushed(FlushReason::Fin), 1);
    assert_eq!(resegment(f, m), train[..3]);
}

#[test]
fn psh_is_merged_then_flushed() {
    let (g, out, train) = flagged_last(|t| t.psh = true);
    assert_eq!(segs(&out), [3, 1]);
    assert_eq!(g.counters().flushed(FlushReason::Psh), 1);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn psh_alone_is_not_held() {
    let mut t = tcp(1);
    t.psh = true;
    let f = frame(v4(100), t, 1000);
    let mut g = gro();
    let out = run(&mut g, std::slice::from_ref(&f));
    assert_eq!(out[0].0, f);
    assert_eq!(g.counters().refused(FlushReason::Psh), 1);
    assert_eq!(g.counters().held, 0);
}

#[test]
fn urg_rst_syn_are_refused_and_end_the_run() {
    type Set = fn(&mut linerate_wire::etherparse::TcpHeader);
    let cases: [(Set, FlushReason); 3] = [
        (|t| t.urg = true, FlushReason::Urg),
        (|t| t.rst = true, FlushReason::Rst),
        (|t| t.syn = true, FlushReason::Syn),
    ];
    for (set, reason) in cases {
        let mut t = tcp(1001);
        set(&mut t);
        let (g, _) = no_merge(frame(v4(101), t, 1000));
        assert_eq!(g.counters().refused(reason), 1, "{reason}");
        assert_eq!(g.counters().flushed(reason), 1, "{reason}");
    }
}

#[test]
fn a_short_segment_ends_the_run() {
    let train = vec![
        frame(v4(100), tcp(1), 1000),
        frame(v4(101), tcp(1001), 1000),
        frame(v4(102), tcp(2001), 500),
        frame(v4(103), tcp(2501), 1000),
    ];
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [3, 1]);
    assert_eq!(g.counters().flushed(FlushReason::Short), 1);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn the_merged_packet_stays_below_64k() {
    let train = train_v4(50, 1448);
    let mut g = gro();
    let out = run(&mut g, &train);
    // 20 + 20 + 45 * 1448 = 65200; one more segment would pass 65535.
    assert_eq!(segs(&out), [45, 5]);
    assert_eq!(g.counters().flushed(FlushReason::Size), 1);
    assert!(out[0].0.len() - 14 <= 65535);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn max_len_is_configurable() {
    let cfg = GroConfig {
        max_len: 20 + 20 + 3000,
        ..GroConfig::default()
    };
    let mut g = Gro::new(cfg);
    let out = run(&mut g, &train_v4(7, 1000));
    assert_eq!(segs(&out), [3, 3, 1]);
    assert_eq!(g.counters().flushed(FlushReason::Size), 2);
}

#[test]
fn a_run_holds_at_most_max_segs() {
    let train = train_v4(70, 100);
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [64, 6]);
    assert_eq!(g.counters().flushed(FlushReason::Segs), 1);
    assert_eq!(resegment_all(&out), train);
}

#[test]
fn a_full_table_delivers_the_oldest_run() {
    let cfg = GroConfig {
        max_flows: 2,
        ..GroConfig::default()
    };
    let mut g = Gro::new(cfg);
    assert_eq!(g.capacity(), 2);
    let seg = |port: u16, i: u32| {
        let mut t = tcp(1 + i * 1000);
        t.source_port = port;
        frame(v4(100 + i as u16), t, 1000)
    };
    // Three flows, two segments each, interleaved: the third evicts the first.
    let fed = vec![
        seg(1, 0),
        seg(2, 0),
        seg(3, 0),
        seg(1, 1),
        seg(2, 1),
        seg(3, 1),
    ];
    let out = run(&mut g, &fed);
    assert!(
        g.counters().flushed(FlushReason::TableFull) >= 1,
        "{}",
        g.counters()
    );
    let mut got = resegment_all(&out);
    let mut want = fed.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every segment delivered once");
    assert_balanced(&g);
}

#[test]
fn padding_is_refused() {
    let mut padded = frame(v4(101), tcp(1001), 1000);
    padded.extend_from_slice(&[0; 4]);
    let (g, _) = no_merge(padded);
    assert_eq!(g.counters().refused(FlushReason::Length), 1);
}

#[test]
fn a_bad_ip_header_checksum_is_refused() {
    let mut f = frame(v4(101), tcp(1001), 1000);
    f[14 + 10] ^= 1;
    let (g, _) = no_merge(f);
    assert_eq!(g.counters().refused(FlushReason::IpCsum), 1);
}

#[test]
fn a_different_mac_header_is_another_flow() {
    let first = frame(v4(100), tcp(1), 1000);
    let tagged = FrameBuilder::new(v4(101), L4::Tcp(tcp(1001)))
        .vlan(5)
        .build(&payload(0, 1001, 1000));
    let mut g = gro();
    let out = run(&mut g, &[first, tagged]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::L2), 1);
    assert_eq!(g.counters().held, 2);
}

#[test]
fn ipv6_traffic_class_and_hop_limit_flush_and_flow_label_splits() {
    let first = frame(v6(), tcp(1), 1000);
    let mut tc = v6();
    if let Ip::V6(h, _) = &mut tc {
        h.traffic_class = 4;
    }
    let mut hl = v6();
    if let Ip::V6(h, _) = &mut hl {
        h.hop_limit = 3;
    }
    for (ip, reason) in [(tc, FlushReason::TrafficClass), (hl, FlushReason::HopLimit)] {
        let mut g = gro();
        let out = run(&mut g, &[first.clone(), frame(ip, tcp(1001), 1000)]);
        assert_eq!(segs(&out), [1, 1]);
        assert_eq!(g.counters().flushed(reason), 1, "{reason}");
    }
    let mut g = gro();
    let fed = [
        first.clone(),
        frame(with_flow_label(v6(), 9), tcp(1001), 1000),
        frame(v6(), tcp(1001), 1000),
    ];
    let out = run(&mut g, &fed);
    assert_eq!(
        segs(&out),
        [2, 1],
        "the flow-labelled segment is another flow"
    );
    assert_eq!(g.counters().split(FlushReason::FlowLabel), 1);
}
