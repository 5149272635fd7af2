//! dnsmasq's DHCP replies (testdata/, see its README) parsed, every field
//! compared with what tshark dissected from the same capture
//! (testdata/tshark.csv): the expected values come from tshark, not from
//! this crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_dhcp::message::{FLAG_BROADCAST, OP_REPLY, OP_REQUEST};
use linerate_dhcp::{Message, MessageType};
use std::net::Ipv4Addr;

fn bytes(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// tshark's row of frame `n` (1-based), by column name.
fn tshark(n: usize) -> impl Fn(&str) -> String {
    let p = format!("{}/testdata/tshark.csv", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(p).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let row: Vec<String> = lines
        .nth(n - 1)
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    move |col: &str| {
        let i = head.iter().position(|h| h == col).unwrap();
        row.get(i).cloned().unwrap_or_default()
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn secs(s: &str) -> Option<u32> {
    Some(s.parse().unwrap())
}

fn xid(s: &str) -> u32 {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

const MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0x00, 0x00, 0x38];

#[test]
fn offer_as_tshark_reads_it() {
    let t = tshark(2);
    let m = Message::parse(&bytes("offer")).unwrap();
    assert_eq!(m.op, OP_REPLY);
    assert_eq!(m.kind(), Some(MessageType::Offer));
    assert_eq!(t("dhcp.option.dhcp"), "2");
    assert_eq!(m.xid, xid(&t("dhcp.id")));
    assert_eq!(m.flags & FLAG_BROADCAST != 0, t("dhcp.flags.bc") == "1");
    assert_eq!(m.chaddr[..6], MAC);
    assert_eq!(m.yiaddr, ip(&t("dhcp.ip.your")));
    let o = &m.options;
    assert_eq!(o.server_id, Some(ip(&t("dhcp.option.dhcp_server_id"))));
    assert_eq!(o.lease_time, secs(&t("dhcp.option.ip_address_lease_time")));
    assert_eq!(o.renewal_time, secs(&t("dhcp.option.renewal_time_value")));
    assert_eq!(
        o.rebinding_time,
        secs(&t("dhcp.option.rebinding_time_value"))
    );
    assert_eq!(o.subnet_mask, Some(ip(&t("dhcp.option.subnet_mask"))));
    assert_eq!(m.prefix_len(), Some(24));
    assert_eq!(o.routers, [ip(&t("dhcp.option.router"))]);
    assert_eq!(o.dns_servers, [ip(&t("dhcp.option.domain_name_server"))]);
    assert_eq!(
        o.interface_mtu,
        Some(t("dhcp.option.interface_mtu").parse().unwrap())
    );
}

#[test]
fn ack_as_tshark_reads_it() {
    let t = tshark(4);
    let m = Message::parse(&bytes("ack")).unwrap();
    assert_eq!(m.kind(), Some(MessageType::Ack));
    assert_eq!(t("dhcp.option.dhcp"), "5");
    assert_eq!(m.xid, xid(&t("dhcp.id")));
    assert_eq!(m.yiaddr, ip(&t("dhcp.ip.your")));
    assert_eq!(
        m.options.server_id,
        Some(ip(&t("dhcp.option.dhcp_server_id")))
    );
    assert_eq!(
        m.options.lease_time,
        secs(&t("dhcp.option.ip_address_lease_time"))
    );
    assert_eq!(
        m.options.renewal_time,
        secs(&t("dhcp.option.renewal_time_value"))
    );
}

#[test]
fn nak_as_tshark_reads_it() {
    let t = tshark(6);
    let m = Message::parse(&bytes("nak")).unwrap();
    assert_eq!(m.kind(), Some(MessageType::Nak));
    assert_eq!(t("dhcp.option.dhcp"), "6");
    assert_eq!(m.xid, xid(&t("dhcp.id")));
    assert_eq!(m.yiaddr, Ipv4Addr::UNSPECIFIED);
    assert_eq!(
        m.options.server_id,
        Some(ip(&t("dhcp.option.dhcp_server_id")))
    );
    assert_eq!(
        m.options.message.as_deref(),
        Some(t("dhcp.option.message").as_bytes())
    );
}

/// The requests capture.py wrote (with struct, from the RFCs) parse too,
/// and what this crate writes for the same values parses to the same.
#[test]
fn requests_written_elsewhere_parse() {
    for (name, frame, kind) in [
        ("offer.request", 1, MessageType::Discover),
        ("ack.request", 3, MessageType::Request),
        ("nak.request", 5, MessageType::Request),
    ] {
        let t = tshark(frame);
        let m = Message::parse(&bytes(name)).unwrap();
        assert_eq!(m.op, OP_REQUEST);
        assert_eq!(m.kind(), Some(kind));
        assert_eq!(m.xid, xid(&t("dhcp.id")));
        assert_eq!(
            m.options.client_id.as_deref(),
            Some(&[1, 2, 0x4c, 0x52, 0, 0, 0x38][..])
        );
        assert_eq!(Message::parse(&m.emit()).unwrap(), m);
    }
}

/// Every truncation of a real reply is refused with an error or parsed,
/// never a panic.
#[test]
fn truncations_never_panic() {
    for name in ["offer", "ack", "nak"] {
        let b = bytes(name);
        for n in 0..b.len() {
            let _ = Message::parse(&b[..n]);
        }
    }
}
