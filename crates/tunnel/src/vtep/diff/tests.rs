use super::*;
use crate::vtep::config::parse;

const BASE: &str = r#"
    [underlay]
    tap = "ul0"
    address = "10.0.0.2/24"
    [control]
    socket = "/run/vtep.sock"
    [[vni]]
    id = 42
    encap = "vxlan"
    flood = ["10.0.0.1", "10.0.0.3"]
    ports = ["p42"]
    [[vni.static]]
    mac = "02:00:00:00:00:01"
    remote = "10.0.0.1"
    [[vni]]
    id = 7
    encap = "geneve"
    flood = ["10.0.0.3"]
    ports = ["p7"]
    suppress_arp = true
    [[vni.neighbor]]
    ip = "192.168.7.1"
    mac = "02:00:00:00:07:01"
"#;

fn cfg(text: &str) -> EndpointConfig {
    parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn fields(p: &[ConfigProblem]) -> Vec<&str> {
    p.iter().map(|p| p.field.as_str()).collect()
}

#[test]
fn the_same_config_changes_nothing() {
    let a = cfg(BASE);
    assert_eq!(diff(&a, &a, &tunnels(&a)), Ok(Vec::new()));
}

#[test]
fn lists_and_ports_become_edits_removals_first() {
    let a = cfg(BASE);
    let text = BASE
        .replace(
            r#"flood = ["10.0.0.1", "10.0.0.3"]"#,
            r#"flood = ["10.0.0.1", "10.0.0.4"]"#,
        )
        .replace(r#"ports = ["p42"]"#, r#"ports = ["p42b"]"#)
        .replace("mac = \"02:00:00:00:00:01\"", "mac = \"02:00:00:00:00:02\"")
        .replace("ip = \"192.168.7.1\"", "ip = \"192.168.7.2\"");
    let b = cfg(&text);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let edits = diff(&a, &b, &tunnels(&a)).unwrap();
    assert_eq!(
        edits,
        vec![
            Edit::RemovePort {
                vni: 42,
                name: "p42".into()
            },
            Edit::RemoveStatic {
                vni: 42,
                mac: [2, 0, 0, 0, 0, 1]
            },
            Edit::RemoveFlood {
                vni: 42,
                remote: ip("10.0.0.3")
            },
            Edit::RemoveNeighbor {
                vni: 7,
                ip: ip("192.168.7.1")
            },
            Edit::AddFlood {
                vni: 42,
                remote: ip("10.0.0.4")
            },
            Edit::AddStatic {
                vni: 42,
                mac: [2, 0, 0, 0, 0, 2],
                remote: ip("10.0.0.1")
            },
            Edit::AddPort {
                vni: 42,
                name: "p42b".into()
            },
            Edit::AddNeighbor {
                vni: 7,
                ip: ip("192.168.7.2"),
                mac: [2, 0, 0, 0, 7, 1]
            },
        ]
    );
}

#[test]
fn a_vni_added_on_a_running_tunnel_and_one_removed() {
    let a = cfg(BASE);
    let text = BASE.replace("id = 7", "id = 8");
    let b = cfg(&text);
    let edits = diff(&a, &b, &tunnels(&a)).unwrap();
    let added = b.vnis.get(1).cloned().map(|s| VniSpec {
        ports: Vec::new(),
        ..s
    });
    assert_eq!(
        edits,
        vec![
            Edit::RemoveVni(7),
            Edit::AddVni(added.unwrap()),
            Edit::AddPort {
                vni: 8,
                name: "p7".into()
            },
        ]
    );
}

#[test]
fn what_cannot_change_at_run_time_is_refused_by_name() {
    let a = cfg(BASE);
    let text = BASE
        .replace("10.0.0.2/24", "10.0.0.9/24")
        .replace("tap = \"ul0\"", "tap = \"ul0\"\nqueues = 2")
        .replace("/run/vtep.sock", "/run/other.sock")
        .replace("suppress_arp = true", "suppress_arp = true\nport = 6082")
        .replace(
            "encap = \"vxlan\"",
            "encap = \"vxlan\"\nttl = 9\nsuppress_arp = true",
        )
        + "\n[metrics]\nlisten = \"127.0.0.1:9100\"\n[fdb]\nageing_secs = 60\n"
        + "[tap]\nio_uring = 256\n";
    let b = cfg(&text);
    let p = diff(&a, &b, &tunnels(&a)).unwrap_err();
    let mut f = fields(&p);
    f.sort();
    assert_eq!(
        f,
        vec![
            "control.socket",
            "fdb.ageing_secs",
            "metrics.listen",
            "tap.io_uring",
            "underlay.address",
            "underlay.queues",
            "vni[0].suppress_arp",
            "vni[0].ttl",
            "vni[1].port",
        ]
    );
    assert!(p.iter().all(|p| p.fix.contains("restart")), "{p:?}");
}

#[test]
fn a_new_tunnel_is_added_a_clashing_one_or_a_vni_without_remotes_is_refused() {
    let a = cfg(BASE);
    // VXLAN on 8472: a tunnel of its own, added.
    let text = format!(
        "{BASE}\n[[vni]]\nid = 9\nencap = \"vxlan\"\nport = 8472\nflood = [\"10.0.0.1\"]\n"
    );
    let b = cfg(&text);
    let e = diff(&a, &b, &tunnels(&a)).unwrap();
    assert!(matches!(&e[..], [Edit::AddVni(s)] if s.id == 9), "{e:?}");
    // VXLAN on GENEVE's running port, and an NVGRE VNI without remotes.
    let text = format!(
        "{BASE}\n[[vni]]\nid = 9\nencap = \"vxlan\"\nport = 6081\nflood = [\"10.0.0.1\"]\n\
         [[vni]]\nid = 10\nencap = \"nvgre\"\n"
    );
    let b = cfg(&text);
    let p = diff(&a, &b, &tunnels(&a)).unwrap_err();
    assert_eq!(fields(&p), vec!["vni[2].encap", "vni[3].flood"]);
    assert!(p[0].problem.contains("geneve on port 6081"), "{p:?}");
    // A VNI of a running tunnel with other outer options is refused when
    // the file is read (its VNIs must agree), before the difference.
    let text =
        format!("{BASE}\n[[vni]]\nid = 9\nencap = \"vxlan\"\nttl = 3\nflood = [\"10.0.0.1\"]\n");
    assert!(parse(&text).is_err());
}

#[test]
fn learning_changes_at_run_time_and_a_group_does_not() {
    let a = cfg(BASE);
    let b = cfg(&BASE.replace(
        "suppress_arp = true",
        "suppress_arp = true\n    learning = false\n    l2miss = true",
    ));
    assert_eq!(
        diff(&a, &b, &tunnels(&a)),
        Ok(vec![Edit::SetLearning {
            vni: 7,
            learning: false,
            l2miss: true
        }])
    );
    let c = cfg(&BASE.replace(
        "suppress_arp = true",
        "suppress_arp = true\n    group = \"239.1.1.7\"",
    ));
    let e = diff(&a, &c, &tunnels(&a)).unwrap_err();
    assert_eq!(fields(&e), vec!["vni[1].group"]);
    assert!(e[0].fix.contains("restart the VTEP"), "{e:?}");
}
