use super::*;
use proptest::prelude::*;
use std::collections::HashMap as Model;

const T0: Duration = Duration::ZERO;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn mac(i: u32) -> Mac {
    let b = i.to_be_bytes();
    [2, 0, b[0], b[1], b[2], b[3]]
}

fn fdb_with(vnis: &[u32], cfg: FdbConfig) -> Fdb {
    let mut f = Fdb::new(cfg);
    for v in vnis {
        f.add_vni(*v);
    }
    f
}

#[test]
fn learns_refreshes_and_moves() {
    let mut f = fdb_with(&[1], FdbConfig::default());
    assert_eq!(f.learn(T0, 1, mac(1), Dest::Local(0)), Learned::New);
    assert_eq!(f.learn(T0, 1, mac(1), Dest::Local(0)), Learned::Refreshed);
    let r = Dest::Remote(ip("192.0.2.7"));
    assert_eq!(
        f.learn(T0, 1, mac(1), r),
        Learned::Moved {
            from: Dest::Local(0)
        }
    );
    assert_eq!(f.lookup(T0, 1, mac(1)), Some(r));
    let c = f.counters(1).unwrap();
    assert_eq!((c.learned, c.moved), (1, 1));
    assert_eq!(f.len(), 1);
}

#[test]
fn multicast_broadcast_and_zero_sources_are_not_learned() {
    let mut f = fdb_with(&[1], FdbConfig::default());
    for m in [
        [0xff; 6],
        [0x01, 0, 0x5e, 0, 0, 1],
        [0x33, 0x33, 0, 0, 0, 1],
        [0; 6],
    ] {
        assert_eq!(f.learn(T0, 1, m, Dest::Local(0)), Learned::Invalid);
    }
    assert_eq!(f.len(), 0);
    assert_eq!(f.counters(1).unwrap().invalid_src, 4);
    // An unconfigured VNI learns nothing either.
    assert_eq!(f.learn(T0, 9, mac(1), Dest::Local(0)), Learned::Invalid);
    assert_eq!(f.len(), 0);
}

#[test]
fn entries_age_out_at_exactly_the_ageing_time() {
    let cfg = FdbConfig {
        ageing: Duration::from_secs(300),
        ..FdbConfig::default()
    };
    let mut f = fdb_with(&[1], cfg);
    f.learn(Duration::from_secs(10), 1, mac(1), Dest::Local(3));
    // Linux's vxlan_cleanup: gone once updated + ageing <= now.
    let just_before = Duration::from_secs(310) - Duration::from_nanos(1);
    assert_eq!(f.lookup(just_before, 1, mac(1)), Some(Dest::Local(3)));
    assert_eq!(f.age(just_before), 0);
    assert_eq!(f.lookup(Duration::from_secs(310), 1, mac(1)), None);
    assert_eq!(f.age(Duration::from_secs(310)), 1);
    assert_eq!(f.len(), 0);
    assert_eq!(f.counters(1).unwrap().aged, 1);
    // Refreshing keeps it alive.
    f.learn(Duration::from_secs(400), 1, mac(2), Dest::Local(0));
    f.learn(Duration::from_secs(650), 1, mac(2), Dest::Local(0));
    assert_eq!(f.age(Duration::from_secs(900)), 0);
    assert_eq!(f.age(Duration::from_secs(950)), 1);
}

#[test]
fn an_expired_entry_relearned_elsewhere_is_new_not_a_move() {
    let mut f = fdb_with(&[1], FdbConfig::default());
    f.learn(T0, 1, mac(1), Dest::Local(0));
    let later = Duration::from_secs(301);
    assert_eq!(f.learn(later, 1, mac(1), Dest::Local(1)), Learned::New);
    let c = f.counters(1).unwrap();
    assert_eq!((c.learned, c.moved, c.aged), (2, 0, 1));
    assert_eq!(f.len(), 1);
}

#[test]
fn static_entries_never_age_or_move() {
    let mut f = fdb_with(&[1], FdbConfig::default());
    let r = Dest::Remote(ip("2001:db8::2"));
    f.add_static(1, mac(5), r).unwrap();
    assert_eq!(f.learn(T0, 1, mac(5), Dest::Local(0)), Learned::StaticKept);
    assert_eq!(f.lookup(Duration::from_secs(1 << 30), 1, mac(5)), Some(r));
    assert_eq!(f.age(Duration::from_secs(1 << 30)), 0);
    assert_eq!(
        f.add_static(1, [1, 0, 0, 0, 0, 1], r),
        Err(FdbError::InvalidMac([1, 0, 0, 0, 0, 1]))
    );
    assert_eq!(f.add_static(2, mac(5), r), Err(FdbError::UnknownVni(2)));
}

#[test]
fn a_flood_of_random_sources_stays_within_the_bounds() {
    let cfg = FdbConfig {
        max_per_vni: 100,
        max_total: 150,
        ..FdbConfig::default()
    };
    let mut f = fdb_with(&[1, 2], cfg);
    for i in 0..10_000 {
        f.learn(T0, 1, mac(i), Dest::Local(0));
    }
    assert_eq!(f.len_vni(1), 100);
    assert_eq!(f.counters(1).unwrap().full, 9_900);
    for i in 0..10_000 {
        f.learn(T0, 2, mac(i), Dest::Local(0));
    }
    assert_eq!(f.len_vni(2), 50, "the total bound is 150");
    assert_eq!(f.len(), 150);
    // Known MACs still refresh and move while full.
    assert_eq!(
        f.learn(T0, 1, mac(3), Dest::Local(1)),
        Learned::Moved {
            from: Dest::Local(0)
        }
    );
    // Statics are refused when full, with a typed error.
    assert_eq!(
        f.add_static(2, mac(99_999), Dest::Local(0)),
        Err(FdbError::Full { vni: 2 })
    );
    // After ageing, room again.
    f.age(Duration::from_secs(300));
    assert_eq!(f.len(), 0);
    assert_eq!(
        f.learn(Duration::from_secs(300), 2, mac(1), Dest::Local(0)),
        Learned::New
    );
}

#[test]
fn flooding_obeys_split_horizon_and_the_ingress_port() {
    let mut f = fdb_with(&[7], FdbConfig::default());
    let (r1, r2) = (ip("10.0.0.2"), ip("10.0.0.3"));
    f.add_flood(7, r1).unwrap();
    f.add_flood(7, r2).unwrap();
    f.add_flood(7, r1).unwrap(); // idempotent
    assert_eq!(f.flood_list(7), &[r1, r2]);
    // Broadcast from a local port: other local ports and every remote VTEP.
    assert_eq!(
        f.forward(T0, 7, [0xff; 6], Dest::Local(2)),
        Forward::Flood {
            except: Some(2),
            remotes: &[r1, r2]
        }
    );
    // Broadcast from the tunnel: local ports only, never back into the tunnel.
    assert_eq!(
        f.forward(T0, 7, [0xff; 6], Dest::Remote(r1)),
        Forward::Flood {
            except: None,
            remotes: &[]
        }
    );
    // Known unicast to where it came from: dropped.
    f.learn(T0, 7, mac(1), Dest::Local(2));
    assert_eq!(
        f.forward(T0, 7, mac(1), Dest::Local(2)),
        Forward::Drop(DropReason::SamePort)
    );
    // Tunnel to tunnel: dropped.
    f.learn(T0, 7, mac(2), Dest::Remote(r2));
    assert_eq!(
        f.forward(T0, 7, mac(2), Dest::Remote(r1)),
        Forward::Drop(DropReason::SplitHorizon)
    );
    assert_eq!(
        f.forward(T0, 9, mac(2), Dest::Local(0)),
        Forward::Drop(DropReason::UnknownVni)
    );
}

#[test]
fn flood_list_is_bounded() {
    let cfg = FdbConfig {
        max_flood: 2,
        ..FdbConfig::default()
    };
    let mut f = fdb_with(&[1], cfg);
    f.add_flood(1, ip("10.0.0.1")).unwrap();
    f.add_flood(1, ip("10.0.0.2")).unwrap();
    assert_eq!(
        f.add_flood(1, ip("10.0.0.3")),
        Err(FdbError::FloodListFull(1))
    );
    assert_eq!(f.add_flood(2, ip("10.0.0.3")), Err(FdbError::UnknownVni(2)));
}

#[test]
fn dump_reads_like_bridge_fdb_show() {
    let mut f = fdb_with(&[42], FdbConfig::default());
    f.add_flood(42, ip("10.0.0.2")).unwrap();
    f.learn(
        Duration::from_secs(5),
        42,
        [2, 0xaa, 0, 0, 0, 1],
        Dest::Local(1),
    );
    let lines: Vec<String> = f
        .dump(Duration::from_secs(65))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            "00:00:00:00:00:00 dst 10.0.0.2 vni 42 permanent",
            "02:aa:00:00:00:01 port 1 vni 42 used 60",
        ]
    );
}

#[test]
fn removing_a_vni_frees_its_entries() {
    let mut f = fdb_with(&[1, 2], FdbConfig::default());
    f.learn(T0, 1, mac(1), Dest::Local(0));
    f.learn(T0, 2, mac(1), Dest::Local(0));
    f.remove_vni(1);
    assert_eq!(f.len(), 1);
    assert!(f.lookup(T0, 1, mac(1)).is_none());
    assert_eq!(f.lookup(T0, 2, mac(1)), Some(Dest::Local(0)));
    assert!(f.remove(2, mac(1)));
    assert!(!f.remove(2, mac(1)));
    assert!(f.is_empty());
}

#[derive(Debug, Clone)]
enum Op {
    Learn { t: u64, vni: u32, mac: u8, from: u8 },
    Forward { t: u64, vni: u32, mac: u8, from: u8 },
    Age { t: u64 },
}

fn dest(i: u8) -> Dest {
    if i < 4 {
        Dest::Local(u16::from(i))
    } else {
        Dest::Remote(IpAddr::from([10, 0, 0, i]))
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..20, 1u32..4, 0u8..12, 0u8..7).prop_map(|(t, vni, mac, from)| Op::Learn { t, vni, mac, from }),
        4 => (0u64..20, 1u32..4, 0u8..12, 0u8..7).prop_map(|(t, vni, mac, from)| Op::Forward { t, vni, mac, from }),
        1 => (0u64..20).prop_map(|t| Op::Age { t }),
    ]
}

proptest! {
    /// Against a naive model (a map per VNI, entries with a timestamp): the same
    /// lookups, bounds never passed, and a decision never names a destination
    /// learned only in another VNI, nor the ingress.
    #[test]
    fn matches_a_naive_model_and_never_crosses_vnis(ops in proptest::collection::vec(op(), 1..200)) {
        let cfg = FdbConfig { ageing: Duration::from_secs(5), max_per_vni: 6, max_total: 14, max_flood: 4 };
        let mut f = fdb_with(&[1, 2, 3], cfg);
        let mut model: Model<(u32, u8), (Dest, u64)> = Model::new();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Learn { t, vni, mac: m, from } => {
                    now += t;
                    let at = Duration::from_secs(now);
                    // Model: drop expired entries lazily, as lookups see them.
                    let live = |e: &(Dest, u64)| now - e.1 < 5;
                    let existing = model.get(&(vni, m)).copied();
                    let total = model.len();
                    let in_vni = model.keys().filter(|(v, _)| *v == vni).count();
                    let r = f.learn(at, vni, mac(u32::from(m)), dest(from));
                    match existing {
                        Some(e) if live(&e) && e.0 == dest(from) => prop_assert_eq!(r, Learned::Refreshed),
                        Some(e) if live(&e) => prop_assert_eq!(r, Learned::Moved { from: e.0 }),
                        Some(_) => prop_assert_eq!(r, Learned::New),
                        None if total >= 14 || in_vni >= 6 => prop_assert_eq!(r, Learned::Full),
                        None => prop_assert_eq!(r, Learned::New),
                    }
                    if r != Learned::Full {
                        model.insert((vni, m), (dest(from), now));
                    }
                }
                Op::Forward { t, vni, mac: m, from } => {
                    now += t;
                    let got = f.forward(Duration::from_secs(now), vni, mac(u32::from(m)), dest(from));
                    let want = model.get(&(vni, m)).filter(|e| now - e.1 < 5).map(|e| e.0);
                    match (got, want) {
                        (Forward::Unicast(d), Some(w)) => { prop_assert_eq!(d, w); prop_assert_ne!(d, dest(from)); }
                        (Forward::Flood { .. }, None) => {}
                        (Forward::Drop(DropReason::SamePort), Some(w)) => prop_assert_eq!(w, dest(from)),
                        (Forward::Drop(DropReason::SplitHorizon), Some(Dest::Remote(_))) => prop_assert!(from >= 4),
                        (g, w) => prop_assert!(false, "decision {:?} for model {:?}", g, w),
                    }
                }
                Op::Age { t } => {
                    now += t;
                    f.age(Duration::from_secs(now));
                    model.retain(|_, e| now - e.1 < 5);
                    prop_assert_eq!(f.len(), model.len());
                }
            }
            prop_assert!(f.len() <= 14);
            for v in 1..4 { prop_assert!(f.len_vni(v) <= 6); }
        }
    }
}
