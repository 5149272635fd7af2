//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the test that replays
//! their corpus (`tests/fuzz_corpus.rs`). Each takes arbitrary bytes, must not panic
//! on them, and asserts the invariants that hold whenever parsing succeeds: offsets
//! inside the frame, and emit-then-parse giving back what was parsed.
//!
//! Not a public API: hidden from the docs, and allowed to panic (that is how a fuzzer
//! reports a broken invariant).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::icmp::{ndp, v4 as icmpv4, v6 as icmpv6};
use crate::layout::{self, Config, Headers};
use crate::{arp, ethernet, geneve, gre, ipv4, ipv6, tcp, udp, vxlan};

fn check_headers(h: &Headers, len: usize) {
    assert!(h.l2 <= h.l3_offset && h.l3_offset <= h.l4_offset && h.l4_offset <= h.payload);
    assert!(usize::from(h.payload) <= len);
}

/// The layout parser, with the default tunnel ports and with tunnels off.
pub fn layout(data: &[u8]) {
    for cfg in [Config::DEFAULT, Config::PLAIN] {
        let Ok(l) = cfg.parse(data) else { continue };
        check_headers(&l.outer, data.len());
        if let Some(inner) = l.inner {
            check_headers(&inner, data.len());
            let t = l.tunnel.expect("inner headers only behind a tunnel");
            assert_eq!(
                usize::from(inner.l2),
                usize::from(t.offset) + usize::from(t.len)
            );
            assert!(inner.l3_end() <= l.outer.l3_end());
        }
        assert!(l.header_len() <= data.len());
    }
    let _ = layout::parse(data);
}

/// The VXLAN codec: parse, emit, parse again.
pub fn vxlan(data: &[u8]) {
    let Ok(p) = vxlan::Packet::new_checked(data) else {
        return;
    };
    let Ok(r) = vxlan::Repr::parse(&p) else {
        return;
    };
    let mut buf = [0u8; vxlan::HEADER_LEN];
    let n = r.emit(&mut buf).expect("a parsed header emits");
    let again = vxlan::Repr::parse(&vxlan::Packet::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(again, r);
}

/// The GRE / NVGRE codec: parse, checksum check, emit, parse again.
pub fn nvgre(data: &[u8]) {
    let Ok(p) = gre::Packet::new_checked(data) else {
        return;
    };
    let _ = p.verify_checksum();
    let _ = (p.vsid(), p.flow_id(), p.payload().len());
    let Ok(r) = gre::Repr::parse(&p) else { return };
    let mut buf = [0u8; gre::MAX_HEADER_LEN];
    let n = r.emit(&mut buf).expect("a parsed header emits");
    assert_eq!(n, p.header_len());
    let again = gre::Repr::parse(&gre::Packet::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(again, r);
}

/// The GENEVE codec: options walked, parse, emit, parse again.
pub fn geneve(data: &[u8]) {
    let Ok(p) = geneve::Packet::new_checked(data) else {
        return;
    };
    for o in p.option_iter().flatten() {
        assert!(o.data.len() % 4 == 0);
    }
    let Ok(r) = geneve::Repr::parse(&p) else {
        return;
    };
    let _ = r.has_unknown_critical(|class, _| class == 0x0102);
    let mut buf = [0u8; geneve::MAX_HEADER_LEN];
    let Ok(n) = r.emit(&mut buf) else { return };
    assert_eq!(n, p.header_len());
    let again = geneve::Repr::parse(&geneve::Packet::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(again, r);
}

/// Every standard-header view on the same bytes: `new_checked`, then every accessor
/// that reads variable-length parts (options, payloads, invoking packets, NDP and TCP
/// option iterators, the IPv6 extension walk), which must not read out of bounds.
pub fn views(data: &[u8]) {
    if let Ok(p) = ethernet::Packet::new_checked(data) {
        let _ = (p.header(), p.payload().len(), ethernet::walk_vlans(data));
    }
    if let Ok(p) = arp::Packet::new_checked(data) {
        let _ = p.header();
    }
    if let Ok(p) = ipv4::Packet::new_checked(data) {
        let _ = (
            p.header(),
            p.options().len(),
            p.payload().len(),
            p.verify_checksum(),
        );
    }
    if let Ok(p) = ipv6::Packet::new_checked(data) {
        let _ = (p.header(), ipv6::ext::walk(p.next_header(), p.payload()));
    }
    if let Ok(p) = tcp::Packet::new_checked(data) {
        let _ = (p.header(), p.payload().len(), p.verify_checksum(0));
        assert!(p.options_iter().count() <= p.options().len());
        let _ = tcp::parse_syn_options(p.options());
    }
    if let Ok(p) = udp::Packet::new_checked(data) {
        let _ = (p.header(), p.payload().len(), p.verify_checksum(0, true));
    }
    if let Ok(p) = icmpv4::Packet::new_checked(data) {
        let _ = (
            p.header(),
            p.data().len(),
            p.invoking_packet(),
            p.next_hop_mtu(),
        );
        let _ = p.verify_checksum();
    }
    if let Ok(p) = icmpv6::Packet::new_checked(data) {
        let _ = (p.header(), p.data().len(), p.invoking_packet(), p.mtu());
        let _ = p.verify_checksum(&[0; 16], &[0; 16]);
    }
    if let Ok(p) = ndp::Neighbor::new_checked(data) {
        let _ = (p.target_addr(), p.source_lladdr(), p.target_lladdr());
        assert!(p.options_iter().count() <= p.options().len());
    }
}

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target by name, for the corpus replay test.
pub const TARGETS: &[(&str, Target)] = &[
    ("layout", layout),
    ("vxlan", vxlan),
    ("nvgre", nvgre),
    ("geneve", geneve),
    ("views", views),
];
