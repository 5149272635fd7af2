use super::*;
use crate::vtep::config::parse;
use crate::vtep::diff::tunnels;
use crate::vtep::endpoint::Scope;

const RUNNING: &str = r#"
    [underlay]
    tap = "ul0"
    address = "10.0.0.2/24"
    [[vni]]
    id = 42
    encap = "vxlan"
    flood = ["10.0.0.1"]
    ports = ["p42"]
    [[vni]]
    id = 7
    encap = "geneve"
    flood = ["10.0.0.3", "10.0.0.4"]
    ports = ["p7"]
"#;

fn running() -> EndpointConfig {
    parse(RUNNING).unwrap()
}

/// The fields a refusal names.
fn refused(r: Result<impl core::fmt::Debug, CtlError>) -> Vec<String> {
    match r {
        Err(CtlError::Invalid { problems }) => {
            assert!(
                problems
                    .iter()
                    .all(|p| !p.problem.is_empty() && !p.fix.is_empty()),
                "{problems:?}"
            );
            problems.into_iter().map(|p| p.field).collect()
        }
        other => panic!("not refused by field: {other:?}"),
    }
}

fn edits_of(line: &str) -> Result<Option<Vec<Edit>>, CtlError> {
    let c = running();
    let req = parse_request(line)?;
    edits(&req, &c, &tunnels(&c))
}

#[test]
fn requests_are_read() {
    assert!(matches!(
        parse_request(r#"{"cmd":"fdb"}"#),
        Ok(Request::Fdb { vni: None })
    ));
    assert!(matches!(
        parse_request(r#" {"cmd":"fdb","vni":42} "#),
        Ok(Request::Fdb { vni: Some(42) })
    ));
    assert!(matches!(
        parse_request(r#"{"cmd":"counters"}"#).map(|r| r.query()),
        Ok(Some(Query::Counters))
    ));
    let r = parse_request(
        r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan","flood":["10.0.0.1"],"ports":["p9"]}}"#,
    );
    assert!(matches!(r, Ok(Request::VniAdd { .. })), "{r:?}");
    assert!(matches!(
        parse_request(r#"{"cmd":"reload"}"#),
        Ok(Request::Reload {})
    ));
}

#[test]
fn a_bad_line_is_refused_naming_where() {
    assert_eq!(refused(parse_request("fdb")), ["."]);
    assert_eq!(refused(parse_request(r#"{"cmd":"fdb"} x"#)), ["."]);
    assert_eq!(refused(parse_request(r#"{"vni":42}"#)), ["cmd"]);
    assert_eq!(refused(parse_request(r#"{"cmd":"frobnicate"}"#)), ["cmd"]);
    assert_eq!(
        refused(parse_request(
            r#"{"cmd":"fdb_add","vni":42,"remote":"10.0.0.1"}"#
        )),
        ["mac"]
    );
    assert_eq!(
        refused(parse_request(
            r#"{"cmd":"fdb_del","vni":"x","mac":"02:00:00:00:00:01"}"#
        )),
        ["vni"]
    );
    assert_eq!(
        refused(parse_request(
            r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan","flood":[1]}}"#
        )),
        ["vni.flood[0]"]
    );
    assert_eq!(
        refused(parse_request(r#"{"cmd":"fdb","vlan":3}"#)),
        ["vlan"]
    );
    assert_eq!(refused(parse_request(r#"{"cmd":"vnis","vni":3}"#)), ["vni"]);
    assert_eq!(refused(parse_request(r#"{"cmd":7}"#)), ["cmd"]);
    assert_eq!(refused(parse_request("[1]")), ["."]);
    let long = format!(r#"{{"cmd":"fdb","pad":"{}"}}"#, "x".repeat(MAX_LINE));
    assert_eq!(refused(parse_request(&long)), ["."]);
}

#[test]
fn a_field_that_breaks_a_rule_is_refused_by_name() {
    let add = |vni: &str, mac: &str, remote: &str| {
        edits_of(&format!(
            r#"{{"cmd":"fdb_add","vni":{vni},"mac":"{mac}","remote":"{remote}"}}"#
        ))
    };
    assert_eq!(refused(add("43", "02:00:00:00:00:01", "10.0.0.1")), ["vni"]);
    assert_eq!(refused(add("42", "02:00:00:00:01", "10.0.0.1")), ["mac"]);
    assert_eq!(refused(add("42", "ff:ff:ff:ff:ff:ff", "10.0.0.1")), ["mac"]);
    assert_eq!(
        refused(add("42", "02:00:00:00:00:01", "10.0.0")),
        ["remote"]
    );
    assert_eq!(
        refused(add("42", "02:00:00:00:00:01", "fd00::1")),
        ["remote"]
    );
    assert_eq!(
        refused(add("42", "02:00:00:00:00:01", "224.0.0.1")),
        ["remote"]
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"fdb_del","vni":42,"mac":"02:00:00:00:00:01"}"#
        )),
        ["mac"],
        "no such static entry"
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"flood_del","vni":42,"remote":"10.0.0.1"}"#
        )),
        ["remote"],
        "the last remote"
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"flood_del","vni":7,"remote":"10.0.0.9"}"#
        )),
        ["remote"],
        "not in the list"
    );
    assert_eq!(
        refused(edits_of(r#"{"cmd":"port_add","vni":42,"name":"p7"}"#)),
        ["name"],
        "a name in use"
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"port_add","vni":42,"name":"a-name-far-too-long"}"#
        )),
        ["name"]
    );
    assert_eq!(
        refused(edits_of(r#"{"cmd":"port_del","vni":7,"name":"p42"}"#)),
        ["name"]
    );
    assert_eq!(refused(edits_of(r#"{"cmd":"flush","vni":1}"#)), ["vni"]);
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"vni_add","vni":{"id":7,"encap":"vxlan","flood":["10.0.0.1"],"ports":["p42"]}}"#
        )),
        ["vni.id", "vni.ports[0]"]
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan","port":6081,"flood":["10.0.0.1"]}}"#
        )),
        ["vni.encap"],
        "GENEVE runs on that port"
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan"}}"#
        )),
        ["vni.flood"]
    );
    assert_eq!(
        refused(edits_of(
            r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan","ttl":3,"flood":["10.0.0.1"]}}"#
        )),
        ["vni"],
        "other outer options than the tunnel's"
    );
}

#[test]
fn good_changes_become_edits() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(
        edits_of(r#"{"cmd":"fdb_add","vni":42,"mac":"02:00:00:00:00:01","remote":"10.0.0.5"}"#),
        Ok(Some(vec![Edit::AddStatic {
            vni: 42,
            mac: [2, 0, 0, 0, 0, 1],
            remote: ip("10.0.0.5")
        }]))
    );
    assert_eq!(
        edits_of(r#"{"cmd":"flood_del","vni":7,"remote":"10.0.0.4"}"#),
        Ok(Some(vec![Edit::RemoveFlood {
            vni: 7,
            remote: ip("10.0.0.4")
        }]))
    );
    let e = edits_of(
        r#"{"cmd":"vni_add","vni":{"id":9,"encap":"vxlan","flood":["10.0.0.1"],"ports":["p9","q9"]}}"#,
    )
    .unwrap()
    .unwrap();
    assert!(matches!(&e[0], Edit::AddVni(s) if s.id == 9 && s.ports.is_empty()));
    assert_eq!(
        &e[1..],
        [
            Edit::AddPort {
                vni: 9,
                name: "p9".into()
            },
            Edit::AddPort {
                vni: 9,
                name: "q9".into()
            }
        ]
    );
    assert_eq!(edits_of(r#"{"cmd":"fdb"}"#), Ok(None));
    assert_eq!(edits_of(r#"{"cmd":"reload"}"#), Ok(None));
}

#[test]
fn replies_read_back_as_written() {
    let replies = [
        Reply::from(CtlError::field("mac", "not a MAC", "write one")),
        Reply::Done {
            edits: vec!["add vni 9".into()],
        },
        Reply::Counters {
            counters: vec![Sample {
                scope: Scope::Port {
                    vni: 42,
                    port: "p42".into(),
                },
                name: "rx_packets".into(),
                value: 3,
            }],
        },
    ];
    for r in replies {
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Reply>(&line).unwrap(), r, "{line}");
    }
}

#[test]
fn replicas_answers_are_summed() {
    let s = |scope: Scope, value| Sample {
        scope,
        name: "n".into(),
        value,
    };
    let port = || Scope::Port {
        vni: 1,
        port: "p".into(),
    };
    let a = Reply::Counters {
        counters: vec![s(port(), 2), s(Scope::Fdb { vni: 1 }, 5)],
    };
    let b = Reply::Counters {
        counters: vec![s(port(), 3), s(Scope::Fdb { vni: 1 }, 5), s(Scope::Vtep, 1)],
    };
    assert_eq!(
        merge(vec![a, b]),
        Reply::Counters {
            counters: vec![s(port(), 5), s(Scope::Fdb { vni: 1 }, 5), s(Scope::Vtep, 1)]
        },
        "the FDB's counters are the first replica's (copies of one table)"
    );
}
