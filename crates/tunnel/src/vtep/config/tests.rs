//! One test per rule: each bad file is refused with a message naming the field.

use super::*;

const UNDERLAY: &str = r#"
[underlay]
tap = "ul0"
address = "10.0.0.2/24"
"#;

fn with_vni(vni: &str) -> String {
    format!("{UNDERLAY}\n[[vni]]\n{vni}")
}

/// The problems of a refused file, as "field: problem: fix" lines.
fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(VtepConfigError::Invalid(ps)) => ps.iter().map(ToString::to_string).collect(),
        Err(VtepConfigError::Syntax(m)) => vec![m],
    }
}

fn refused(text: &str, field: &str, words: &str) {
    let ps = problems(text);
    assert!(
        ps.iter()
            .any(|p| p.starts_with(&format!("{field}:")) && p.contains(words)),
        "wanted {field}: ...{words}..., got {ps:#?}"
    );
}

#[test]
fn the_example_config_is_accepted() {
    let c = parse(
        r#"
        [underlay]
        tap = "vtep-ul0"
        address = "2001:db8::2/64"
        gateway = "2001:db8::1"
        mac = "02:00:00:00:00:02"
        mtu = 9000
        queues = 2

        [fdb]
        ageing_secs = 60
        max_per_vni = 100
        max_total = 1000

        [[vni]]
        id = 42
        encap = "vxlan"
        port = 8472
        flood = ["2001:db8::1", "2001:db8::3"]
        ports = ["vm0", "vm1"]
        suppress_arp = true
        static = [{ mac = "02:00:00:00:01:01", remote = "2001:db8::3" }]
        neighbor = [{ ip = "192.168.42.1", mac = "02:00:00:00:01:01" }]

        [[vni]]
        id = 43
        encap = "geneve"
        geneve_option = [{ class = 0x0102, type = 0x80, data = "0000000a" }, { class = 0x0103, type = 1 }]

        [[vni]]
        id = 44
        encap = "nvgre"
        "#
    ).unwrap();
    assert_eq!(c.underlay.queues, 2);
    assert_eq!(c.underlay.mac, Some([2, 0, 0, 0, 0, 2]));
    assert_eq!(c.fdb.ageing, Duration::from_secs(60));
    assert_eq!(c.vnis[0].encap, EncapSpec::Vxlan { port: 8472 });
    assert_eq!(c.vnis[0].flood.len(), 2);
    assert_eq!(
        c.vnis[1].encap,
        EncapSpec::Geneve {
            port: GENEVE_PORT,
            options: vec![
                GeneveOpt {
                    class: 0x0102,
                    kind: 0x80,
                    data: vec![0, 0, 0, 10]
                },
                GeneveOpt {
                    class: 0x0103,
                    kind: 1,
                    data: vec![]
                }
            ]
        }
    );
    assert_eq!(c.vnis[2].encap, EncapSpec::Nvgre);
}

#[test]
fn syntax_errors_and_unknown_fields_name_the_place() {
    let e = parse(&with_vni("id = 1\nencap = \"vxlan\"\nprot = 4789")).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("prot") && m.contains("unknown field"), "{m}");
    let m = parse(&with_vni("id = 1\nencap = \"gre\""))
        .unwrap_err()
        .to_string();
    assert!(m.contains("vxlan") && m.contains("nvgre"), "{m}");
    let m = parse("[underlay]\ntap = \"x\"").unwrap_err().to_string();
    assert!(m.contains("address"), "{m}");
}

#[test]
fn vni_out_of_range() {
    refused(
        &with_vni("id = 16777216\nencap = \"vxlan\""),
        "vni[0].id",
        "24 bits",
    );
}

#[test]
fn vni_twice() {
    let text = format!(
        "{UNDERLAY}\n[[vni]]\nid = 5\nencap = \"vxlan\"\n[[vni]]\nid = 5\nencap = \"nvgre\""
    );
    refused(&text, "vni[1].id", "configured twice");
}

#[test]
fn no_vni() {
    refused(UNDERLAY, "vni", "no VNI");
}

#[test]
fn port_zero_or_too_big() {
    refused(
        &with_vni("id = 1\nencap = \"vxlan\"\nport = 0"),
        "vni[0].port",
        "not a port",
    );
    refused(
        &with_vni("id = 1\nencap = \"geneve\"\nport = 70000"),
        "vni[0].port",
        "not a port",
    );
}

#[test]
fn port_on_nvgre() {
    refused(
        &with_vni("id = 1\nencap = \"nvgre\"\nport = 4789"),
        "vni[0].port",
        "GRE, not UDP",
    );
}

#[test]
fn geneve_options_elsewhere() {
    let opt = "geneve_option = [{ class = 1, type = 1 }]";
    refused(
        &with_vni(&format!("id = 1\nencap = \"vxlan\"\n{opt}")),
        "vni[0].geneve_option",
        "VXLAN",
    );
    refused(
        &with_vni(&format!("id = 1\nencap = \"nvgre\"\n{opt}")),
        "vni[0].geneve_option",
        "NVGRE",
    );
}

#[test]
fn geneve_option_fields() {
    let v = |o: &str| {
        with_vni(&format!(
            "id = 1\nencap = \"geneve\"\ngeneve_option = [{o}]"
        ))
    };
    refused(
        &v("{ class = 65536, type = 1 }"),
        "vni[0].geneve_option[0].class",
        "16 bits",
    );
    refused(
        &v("{ class = 1, type = 256 }"),
        "vni[0].geneve_option[0].type",
        "8 bits",
    );
    refused(
        &v("{ class = 1, type = 1, data = \"abc\" }"),
        "vni[0].geneve_option[0].data",
        "hex",
    );
    refused(
        &v("{ class = 1, type = 1, data = \"0102\" }"),
        "vni[0].geneve_option[0].data",
        "multiple of 4",
    );
    let big = format!("{{ class = 1, type = 1, data = \"{}\" }}", "00".repeat(124));
    refused(
        &v(&[big.as_str(), big.as_str(), big.as_str()].join(", ")),
        "vni[0].geneve_option",
        "252 bytes",
    );
}

#[test]
fn flood_addresses() {
    let v = |f: &str| with_vni(&format!("id = 1\nencap = \"vxlan\"\nflood = [{f}]"));
    refused(&v("\"10.0.0.300\""), "vni[0].flood[0]", "not an IP address");
    refused(&v("\"239.1.1.1\""), "vni[0].flood[0]", "not a remote VTEP");
    refused(&v("\"2001:db8::1\""), "vni[0].flood[0]", "address family");
    refused(&v("\"10.0.0.1\", \"10.0.0.1\""), "vni[0].flood[1]", "twice");
}

#[test]
fn port_names() {
    let v = |p: &str| with_vni(&format!("id = 1\nencap = \"vxlan\"\nports = [{p}]"));
    refused(&v("\"a-name-far-too-long\""), "vni[0].ports[0]", "bytes");
    refused(
        &v("\"a/b\""),
        "vni[0].ports[0]",
        "not a valid interface name",
    );
    refused(&v("\"ul0\""), "vni[0].ports[0]", "used twice");
    let text = format!(
        "{UNDERLAY}\n[[vni]]\nid = 1\nencap = \"vxlan\"\nports = [\"p\"]\n[[vni]]\nid = 2\nencap = \"vxlan\"\nports = [\"p\"]"
    );
    refused(&text, "vni[1].ports[0]", "used twice");
}

#[test]
fn static_entries() {
    let v = |s: &str| with_vni(&format!("id = 1\nencap = \"vxlan\"\nstatic = [{s}]"));
    refused(
        &v("{ mac = \"01:00:5e:00:00:01\", remote = \"10.0.0.1\" }"),
        "vni[0].static[0].mac",
        "unicast",
    );
    refused(
        &v("{ mac = \"02:00:00:00:01\", remote = \"10.0.0.1\" }"),
        "vni[0].static[0].mac",
        "not a MAC",
    );
    refused(
        &v("{ mac = \"02:00:00:00:00:01\", remote = \"fd00::1\" }"),
        "vni[0].static[0].remote",
        "address family",
    );
}

#[test]
fn neighbours_need_suppression() {
    let n = "neighbor = [{ ip = \"192.168.0.1\", mac = \"02:00:00:00:00:01\" }]";
    refused(
        &with_vni(&format!("id = 1\nencap = \"vxlan\"\n{n}")),
        "vni[0].neighbor",
        "suppress_arp = true",
    );
}

#[test]
fn underlay_device() {
    refused(
        "[underlay]\naddress = \"10.0.0.2/24\"\n[[vni]]\nid = 1\nencap = \"nvgre\"",
        "underlay",
        "no device",
    );
    refused(
        "[underlay]\ntap = \"a\"\nxdp = \"b\"\naddress = \"10.0.0.2/24\"\n[[vni]]\nid = 1\nencap = \"nvgre\"",
        "underlay",
        "both tap and xdp",
    );
}

#[test]
fn underlay_address_and_gateway() {
    let u = |a: &str, extra: &str| {
        format!(
            "[underlay]\ntap = \"t\"\naddress = \"{a}\"\n{extra}\n[[vni]]\nid = 1\nencap = \"nvgre\""
        )
    };
    refused(&u("10.0.0.2", ""), "underlay.address", "no prefix length");
    refused(&u("10.0.0.2/33", ""), "underlay.address", "prefix length");
    refused(
        &u("224.0.0.1/24", ""),
        "underlay.address",
        "cannot be a VTEP",
    );
    refused(
        &u("10.0.0.2/24", "gateway = \"10.0.1.1\""),
        "underlay.gateway",
        "is not in 10.0.0.2/24",
    );
    refused(
        &u("10.0.0.2/24", "mac = \"ff:ff:ff:ff:ff:ff\""),
        "underlay.mac",
        "unicast",
    );
    refused(
        &u("10.0.0.2/24", "mtu = 100"),
        "underlay.mtu",
        "576 to 65535",
    );
    refused(
        &u("fd00::2/64", "mtu = 1000"),
        "underlay.mtu",
        "1280 to 65535",
    );
    refused(
        &u("10.0.0.2/24", "queues = 0"),
        "underlay.queues",
        "1 to 64",
    );
}

#[test]
fn fdb_bounds() {
    let f = |t: &str| format!("{UNDERLAY}\n[fdb]\n{t}\n[[vni]]\nid = 1\nencap = \"nvgre\"");
    refused(&f("ageing_secs = 0"), "fdb.ageing_secs", "positive");
    refused(&f("max_total = 0"), "fdb", "at least 1");
    refused(
        &f("max_per_vni = 10\nmax_total = 5"),
        "fdb.max_per_vni",
        "at most max_total",
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let ps = problems(&format!(
        "{UNDERLAY}\n[fdb]\nageing_secs = 0\n[[vni]]\nid = 99999999\nencap = \"nvgre\"\nport = 1"
    ));
    assert_eq!(ps.len(), 3, "{ps:#?}");
}

#[test]
fn macs_parse_in_both_spellings() {
    assert_eq!(
        parse_mac("02:AB:cd:00:00:01"),
        Some([2, 0xab, 0xcd, 0, 0, 1])
    );
    assert_eq!(
        parse_mac("02-ab-cd-00-00-01"),
        Some([2, 0xab, 0xcd, 0, 0, 1])
    );
    assert_eq!(parse_mac("02:ab:cd:00:00:01:02"), None);
    assert_eq!(parse_mac("2:ab:cd:00:00:01"), None);
}

#[test]
fn outer_header_options_as_linux_names_them() {
    let c = parse(&with_vni(
        r#"id = 1
        encap = "vxlan"
        flood = ["10.0.0.1"]
        ttl = 9
        tos = 184
        df = "inherit"
        srcport = [40000, 40009]
        udpcsum = true"#,
    ))
    .unwrap();
    let o = &c.vnis[0].outer;
    assert_eq!(o.ttl, 9);
    assert_eq!(o.dscp, Dscp::Fixed(46), "TOS 184 is DSCP 46 (EF)");
    assert_eq!(o.df, Df::Inherit);
    assert_eq!(o.src_ports, 40000..=40009);
    assert!(o.udp_csum && !o.udp6_zero_csum);
    // Defaults: Linux's but DF, which a VTEP that answers its hosts' oversize
    // packets keeps set.
    let d = parse(&with_vni(
        "id = 1\nencap = \"vxlan\"\nflood = [\"10.0.0.1\"]",
    ))
    .unwrap();
    assert_eq!(d.vnis[0].outer, OuterSpec::default());
    assert_eq!((d.vnis[0].outer.ttl, d.vnis[0].outer.df), (64, Df::Set));
    let inherit = parse(&with_vni(
        "id = 1\nencap = \"vxlan\"\nflood = [\"10.0.0.1\"]\ntos = \"inherit\"\ndf = \"unset\"",
    ))
    .unwrap();
    assert_eq!(inherit.vnis[0].outer.dscp, Dscp::Inherit);
    assert_eq!(inherit.vnis[0].outer.df, Df::Unset);
}

#[test]
fn outer_header_options_out_of_range() {
    let vni = |extra: &str| with_vni(&format!("id = 1\nencap = \"vxlan\"\n{extra}"));
    refused(&vni("ttl = 0"), "vni[0].ttl", "use 1 to 255");
    refused(&vni("ttl = 256"), "vni[0].ttl", "use 1 to 255");
    refused(&vni("tos = 256"), "vni[0].tos", "0 to 255");
    refused(&vni("tos = \"fast\""), "vni[0].tos", "inherit");
    refused(&vni("df = \"maybe\""), "vni[0].df", "unset");
    refused(&vni("srcport = [5, 4]"), "vni[0].srcport", "MIN <= MAX");
    refused(&vni("srcport = [1]"), "vni[0].srcport", "[MIN, MAX]");
    refused(&vni("srcport = [1, 70000]"), "vni[0].srcport", "65535");
    refused(
        &vni("udp6zerocsumtx = true"),
        "vni[0].udp6zerocsumtx",
        "both",
    );
    refused(
        &with_vni("id = 1\nencap = \"nvgre\"\nudpcsum = true"),
        "vni[0].udpcsum",
        "NVGRE",
    );
}

#[test]
fn vnis_on_one_tunnel_share_its_outer_options() {
    let text = format!(
        "{UNDERLAY}\n[[vni]]\nid = 1\nencap = \"vxlan\"\nttl = 5\n\
         [[vni]]\nid = 2\nencap = \"vxlan\"\nttl = 6\n\
         [[vni]]\nid = 3\nencap = \"vxlan\"\nport = 8472\nttl = 7\n"
    );
    refused(&text, "vni[1]", "vni[0]");
    // Another port is another tunnel.
    assert!(
        !problems(&text).iter().any(|p| p.starts_with("vni[2]:")),
        "{:?}",
        problems(&text)
    );
}

#[test]
fn control_socket_and_metrics_address() {
    let vni = "id = 1\nencap = \"vxlan\"\nflood = [\"10.0.0.1\"]\n";
    let c = parse(&format!(
        "{}\n[control]\nsocket = \"/run/v.sock\"\n[metrics]\nlisten = \"[::1]:9100\"\n",
        with_vni(vni)
    ))
    .unwrap();
    assert_eq!(c.control, Some(PathBuf::from("/run/v.sock")));
    assert_eq!(c.metrics, "[::1]:9100".parse().ok());
    let c = parse(&with_vni(vni)).unwrap();
    assert_eq!((c.control, c.metrics), (None, None));
    let long = "x".repeat(SOCKET_PATH_MAX + 1);
    refused(
        &format!("{}\n[control]\nsocket = \"{long}\"\n", with_vni(vni)),
        "control.socket",
        "Unix socket",
    );
    refused(
        &format!("{}\n[metrics]\nlisten = \"localhost\"\n", with_vni(vni)),
        "metrics.listen",
        "IP:PORT",
    );
}

#[test]
fn learning_and_l2miss_are_read_and_linux_spelling_is_refused_with_the_fix() {
    let base = "[underlay]\ntap = \"ul0\"\naddress = \"10.0.0.2/24\"\n[[vni]]\nid = 42\nencap = \"vxlan\"\nflood = [\"10.0.0.1\"]\n";
    let c = parse(base).unwrap();
    assert!(c.vnis[0].learning && !c.vnis[0].l2miss, "Linux's defaults");
    let c = parse(&format!("{base}learning = false\nl2miss = true\n")).unwrap();
    assert!(!c.vnis[0].learning && c.vnis[0].l2miss);
    let e = parse(&format!("{base}nolearning = true\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vni[0].nolearning") && e.contains("write learning = false"),
        "{e}"
    );
    let e = parse(&format!("{base}learning = \"off\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("learning") && e.contains("boolean"), "{e}");
}

#[test]
fn a_group_must_be_a_reported_multicast_address_of_the_underlays_family() {
    let with = |addr: &str, group: &str| {
        parse(&format!(
            "[underlay]\ntap = \"ul0\"\naddress = \"{addr}\"\n[[vni]]\nid = 42\nencap = \"vxlan\"\ngroup = \"{group}\"\n"
        ))
    };
    let c = with("10.0.0.2/24", "239.1.1.1").unwrap();
    assert_eq!(c.vnis[0].group, Some("239.1.1.1".parse().unwrap()));
    assert!(c.vnis[0].flood.is_empty(), "a group alone is enough");
    let c = with("fd00::2/64", "ff05::100").unwrap();
    assert_eq!(c.vnis[0].group, Some("ff05::100".parse().unwrap()));
    for (addr, group, want) in [
        (
            "10.0.0.2/24",
            "10.0.0.1",
            "vni[0].group: 10.0.0.1 is not a multicast address",
        ),
        (
            "10.0.0.2/24",
            "ff05::100",
            "not of the underlay's address family",
        ),
        (
            "10.0.0.2/24",
            "224.0.0.5",
            "reserved for link-local control traffic",
        ),
        (
            "fd00::2/64",
            "ff01::1",
            "reserved for link-local control traffic",
        ),
        (
            "10.0.0.2/24",
            "239.1.1",
            "vni[0].group: \"239.1.1\" is not an IP address",
        ),
    ] {
        let e = with(addr, group).unwrap_err().to_string();
        assert!(e.contains(want), "{group}: {e}");
    }
}

#[test]
fn tap_io_uring_is_a_ring_depth() {
    let vni = "id = 1\nencap = \"vxlan\"\nflood = [\"10.0.0.1\"]";
    let on = parse(&format!("{}\n[tap]\nio_uring = 256\n", with_vni(vni))).unwrap();
    assert_eq!(on.tap_io_uring, Some(256));
    assert_eq!(parse(&with_vni(vni)).unwrap().tap_io_uring, None);
    refused(
        &format!("{}\n[tap]\nio_uring = 1\n", with_vni(vni)),
        "tap.io_uring",
        "use 2 to 4096",
    );
    refused(
        &format!("{}\n[tap]\nio_uring = 100000\n", with_vni(vni)),
        "tap.io_uring",
        "use 2 to 4096",
    );
}
