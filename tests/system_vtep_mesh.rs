//! The VTEP's bridging against Linux beyond one network and one pair (issue
//! 13: several remotes, several VNIs, static entries, ageing, against the
//! kernel's VXLAN devices; the single-network transfers are in
//! `system_vtep_kernel.rs`).
//!
//! * `vtep_two_vnis_on_linux_and_iana_ports_at_once`: one linerate `Vtep`
//!   with two VXLAN networks on one underlay TAP, one on Linux's port 8472 and
//!   one on 4789 (the VTEP splits its underlay by UDP port), facing two kernel
//!   VXLAN devices in one namespace; a host namespace per network behind its
//!   own local port. Pings through both, TCP through both at once, SHA-256;
//!   neither network's FDB holds the other's MACs.
//! * `vtep_mesh_of_two_linerate_vteps_and_linux`: three VTEPs in one network,
//!   Linux's `vx0` with a flood list of two and two linerate VTEPs, their
//!   underlay TAPs ports of a kernel bridge: head-end replication to several
//!   remotes, learning behind the right one, TCP linerate to linerate and
//!   linerate to Linux at once.
//! * `vtep_static_entries_and_neighbours_without_flood_list`: the kernel's
//!   VTEP known only by a static FDB entry, ARP and ND answered by the VTEP
//!   from static neighbour entries (Linux accepts the answers).
//! * `vtep_learned_entries_age_out_and_are_relearned`: `ageing_secs = 1`.
//!
//! Each runs its `Vtep`s in-process on a poll thread (`tests/vtep_common`),
//! built from a TOML config. The first two move a quarter of
//! `LINERATE_BULK_MIB` (default 256) MiB each way on each connection; about
//! 2 s each here, the others well under.
//!
//! Needs root: `cargo test --features linerate/system-tests --test system_vtep_mesh -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod vtep_common;

use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
use linerate::nic::{Shim, ShimConfig};
use linerate::tunnel::bridge::Dest;
use linerate::tunnel::vtep::config::parse;
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::vxlan::{KernelVtep, LINUX_PORT, VxlanSpec};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;
use vtep_common::{LocalPort, Running, bulk_len, fmt_mac, mac_of, ping_from, transfer};

const VNI: u32 = 4242;
/// The second VNI of the two-network case, on the IANA port.
const VNI2: u32 = 4343;

/// One VTEP, two VNIs on one underlay, one on Linux's port 8472 (`vx0`) and
/// one on 4789 (a second kernel device, `vx1`, in the same namespace B), each
/// with its own local port and namespace (A and C): the VTEP splits the
/// underlay by UDP port. Pings through both, then TCP through both at once
/// (a quarter of `LINERATE_BULK_MIB` each way on each), SHA-256; neither
/// network's FDB holds the other's MACs.
#[test]
fn vtep_two_vnis_on_linux_and_iana_ports_at_once() {
    assert!(netns::is_root(), "system tests need root");
    let t0 = Instant::now();
    let spec = VxlanSpec::new(false, VNI, LINUX_PORT);
    let mut b = KernelVtep::new("vkb", &spec).unwrap();
    // vx1: VNI2 on 4789 over the same TAP, 192.168.43.1 inside.
    let (vx1, c4, k4) = ("vx1", "192.168.43.2", "192.168.43.1");
    let (remote, local) = (
        spec.ours_underlay.to_string(),
        spec.kernel_underlay.to_string(),
    );
    b.ns.ip(&[
        "link",
        "add",
        vx1,
        "type",
        "vxlan",
        "id",
        &VNI2.to_string(),
        "remote",
        &remote,
        "local",
        &local,
        "dstport",
        "4789",
        "dev",
        &b.tap_name,
        "noudpcsum",
    ])
    .unwrap();
    let mtu = spec.overlay_mtu().to_string();
    b.ns.ip(&["link", "set", vx1, "mtu", &mtu]).unwrap();
    b.ns.ip(&["addr", "add", &format!("{k4}/24"), "dev", vx1])
        .unwrap();
    b.ns.ip(&["link", "set", vx1, "up"]).unwrap();

    let (a4, a6) = spec.ours_overlay;
    let (b4, _) = spec.kernel_overlay;
    let mut a = LocalPort::new("vka", true, spec.overlay_mtu(), a4, a6).unwrap();
    let c6 = "fd00:43::2".parse().unwrap();
    let mut c = LocalPort::new("vkc", true, spec.overlay_mtu(), c4.parse().unwrap(), c6).unwrap();
    let ul = Shim::new(b.take_tap().unwrap(), ShimConfig::all()).unwrap();
    let port_a = Shim::new(a.take_tap(), ShimConfig::all()).unwrap();
    let port_c = Shim::new(c.take_tap(), ShimConfig::all()).unwrap();
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/24"

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        port = 8472
        flood = ["{kernel}"]
        ports = ["{pa}"]

        [[vni]]
        id = {VNI2}
        encap = "vxlan"
        flood = ["{kernel}"]
        ports = ["{pc}"]
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        pa = a.name,
        pc = c.name,
    );
    let cfg = parse(&toml).unwrap();
    let vtep = Running::start(
        &cfg,
        Box::new(ul),
        vec![vec![Box::new(port_a)], vec![Box::new(port_c)]],
    );
    let what = "two VNIs";
    ping_from(&a.ns, b4.into(), what);
    ping_from(&c.ns, k4.parse().unwrap(), what);
    ping_from(&b.ns, a4.into(), what);
    ping_from(&b.ns, c4.parse().unwrap(), what);

    let len = bulk_len() / 4;
    let (ns_a, ns_c) = (&a.ns, &c.ns);
    let ns_b = &b.ns;
    let start = Instant::now();
    std::thread::scope(|s| {
        let one = s.spawn(|| {
            transfer(
                ns_a,
                ns_b,
                SocketAddr::new(b4.into(), 5001),
                len,
                "vni 4242",
            )
        });
        let two = s.spawn(|| {
            transfer(
                ns_c,
                ns_b,
                SocketAddr::new(k4.parse().unwrap(), 5002),
                len,
                "vni 4343",
            )
        });
        one.join().unwrap();
        two.join().unwrap();
    });
    let secs = start.elapsed().as_secs_f64();

    let (mac_a, mac_c) = (a.mac(), c.mac());
    let (mac_vx0, mac_vx1) = (b.kernel_overlay_mac().unwrap(), mac_of(&b.ns, vx1).unwrap());
    let dump = vtep.dump();
    let listing = dump.iter().map(|r| format!("\n  {r}")).collect::<String>();
    let at = |vni: u32, mac: [u8; 6]| {
        dump.iter()
            .find(|r| r.vni == vni && r.mac == mac)
            .map(|r| r.dest)
    };
    let kernel = Dest::Remote(spec.kernel_underlay);
    assert_eq!(at(VNI, mac_a), Some(Dest::Local(0)), "{listing}");
    assert_eq!(at(VNI, mac_vx0), Some(kernel), "{listing}");
    assert_eq!(at(VNI2, mac_c), Some(Dest::Local(0)), "{listing}");
    assert_eq!(at(VNI2, mac_vx1), Some(kernel), "{listing}");
    for (vni, mac) in [(VNI, mac_c), (VNI, mac_vx1), (VNI2, mac_a), (VNI2, mac_vx0)] {
        assert_eq!(
            at(vni, mac),
            None,
            "vni {vni} learned another network's MAC:{listing}"
        );
    }
    eprintln!(
        "two VNIs: 2 x 2 x {} MiB at once in {secs:.2} s, {:.2} s in all; FDB:{listing}\n{}",
        len >> 20,
        t0.elapsed().as_secs_f64(),
        vtep.nonzero()
    );
}

/// Three VTEPs in one VXLAN network: Linux's `vx0` (no `remote`: a flood
/// list of two all-zero FDB entries, `bridge fdb append`) over a kernel
/// bridge in namespace U, and two linerate VTEPs whose underlay TAPs are
/// ports of that bridge, each with a host behind it (A and C; B is `vx0`
/// itself). Each linerate VTEP floods to the two others (head-end
/// replication) and learns the far hosts behind the right VTEP; so does the
/// kernel. Pings between every pair, then TCP A to C (linerate to linerate,
/// switched by the kernel bridge) and A to B at once, a quarter of
/// `LINERATE_BULK_MIB` each way on each.
#[test]
fn vtep_mesh_of_two_linerate_vteps_and_linux() {
    assert!(netns::is_root(), "system tests need root");
    let t0 = Instant::now();
    let u = Netns::new("vku").unwrap();
    let kernel: IpAddr = "10.79.0.1".parse().unwrap();
    let ours: [IpAddr; 2] = ["10.79.0.2".parse().unwrap(), "10.79.0.3".parse().unwrap()];
    u.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    u.ip(&["addr", "add", "10.79.0.1/24", "dev", "br0"])
        .unwrap();
    u.ip(&["link", "set", "br0", "up"]).unwrap();
    u.ip(&[
        "link",
        "add",
        "vx0",
        "type",
        "vxlan",
        "id",
        &VNI.to_string(),
        "local",
        "10.79.0.1",
        "dstport",
        "4789",
        "dev",
        "br0",
    ])
    .unwrap();
    for o in ours {
        let dst = o.to_string();
        u.exec(
            "bridge",
            &[
                "fdb",
                "append",
                "00:00:00:00:00:00",
                "dev",
                "vx0",
                "dst",
                &dst,
            ],
        )
        .unwrap();
    }
    let (b4, b6) = ("192.168.44.1", "fd00:44::1");
    u.ip(&["link", "set", "vx0", "mtu", "1450"]).unwrap();
    u.ip(&["addr", "add", &format!("{b4}/24"), "dev", "vx0"])
        .unwrap();
    u.ip(&["addr", "add", &format!("{b6}/64"), "dev", "vx0", "nodad"])
        .unwrap();
    u.ip(&["link", "set", "vx0", "up"]).unwrap();

    let mut hosts = Vec::new();
    let mut vteps = Vec::new();
    for (i, me) in ours.iter().enumerate() {
        let tap = Tap::open(&TapConfig {
            offloads: TapOffloads::ALL,
            ..TapConfig::new(netns::unique("vku"))
        })
        .unwrap();
        let name = tap.name().to_owned();
        netns::ip(&["link", "set", &name, "netns", u.name()]).unwrap();
        u.ip(&["link", "set", &name, "master", "br0", "up"])
            .unwrap();
        let n = i as u8 + 2;
        let mut host = LocalPort::new(
            "vkh",
            true,
            1450,
            Ipv4Addr::new(192, 168, 44, n),
            Ipv6Addr::new(0xfd00, 0x44, 0, 0, 0, 0, 0, n.into()),
        )
        .unwrap();
        let others: Vec<String> = [kernel, ours[1 - i]]
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        let toml = format!(
            r#"
            [underlay]
            tap = "unused"
            address = "{me}/24"

            [[vni]]
            id = {VNI}
            encap = "vxlan"
            flood = [{}]
            ports = ["{}"]
            "#,
            others.join(", "),
            host.name
        );
        let cfg = parse(&toml).unwrap();
        let ul = Shim::new(tap, ShimConfig::all()).unwrap();
        let port = Shim::new(host.take_tap(), ShimConfig::all()).unwrap();
        vteps.push(Running::start(
            &cfg,
            Box::new(ul),
            vec![vec![Box::new(port)]],
        ));
        hosts.push(host);
    }
    let what = "mesh";
    let (a, c) = (&hosts[0], &hosts[1]);
    let (a4, c4): (IpAddr, IpAddr) = (
        "192.168.44.2".parse().unwrap(),
        "192.168.44.3".parse().unwrap(),
    );
    let b4: IpAddr = b4.parse().unwrap();
    ping_from(&a.ns, b4, what);
    ping_from(&a.ns, c4, what);
    ping_from(&c.ns, b4, what);
    ping_from(&u, a4, what);
    ping_from(&u, c4, what);
    ping_from(&c.ns, a4, what);
    ping_from(&a.ns, b6.parse().unwrap(), what);
    ping_from(&c.ns, "fd00:44::2".parse().unwrap(), what);

    // Every VTEP knows every host where it is.
    let macs = [a.mac(), c.mac()];
    let mac_b = mac_of(&u, "vx0").unwrap();
    for (i, v) in vteps.iter().enumerate() {
        let dump = v.dump();
        let listing = dump.iter().map(|r| format!("\n  {r}")).collect::<String>();
        let at = |mac: [u8; 6]| dump.iter().find(|r| r.mac == mac).map(|r| r.dest);
        assert_eq!(at(macs[i]), Some(Dest::Local(0)), "VTEP {i}:{listing}");
        assert_eq!(
            at(macs[1 - i]),
            Some(Dest::Remote(ours[1 - i])),
            "VTEP {i}:{listing}"
        );
        assert_eq!(at(mac_b), Some(Dest::Remote(kernel)), "VTEP {i}:{listing}");
    }
    let fdb = u.exec("bridge", &["fdb", "show", "dev", "vx0"]).unwrap();
    let fdb = String::from_utf8_lossy(&fdb.stdout).into_owned();
    for (mac, at) in macs.iter().zip(ours) {
        let want = format!("{} dst {at}", fmt_mac(*mac));
        assert!(
            fdb.lines().any(|l| l.starts_with(&want)),
            "vx0 lacks {want:?}:\n{fdb}"
        );
    }

    let len = bulk_len() / 4;
    let (ns_a, ns_c, ns_b) = (&a.ns, &c.ns, &u);
    let start = Instant::now();
    std::thread::scope(|s| {
        let one = s.spawn(|| transfer(ns_a, ns_c, SocketAddr::new(c4, 5001), len, "A to C"));
        let two = s.spawn(|| transfer(ns_a, ns_b, SocketAddr::new(b4, 5002), len, "A to B"));
        one.join().unwrap();
        two.join().unwrap();
    });
    eprintln!(
        "mesh: 2 x 2 x {} MiB at once in {:.2} s, {:.2} s in all; vx0 FDB:\n{fdb}\nVTEP 1: {}\nVTEP 2: {}",
        len >> 20,
        start.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        vteps[0].nonzero(),
        vteps[1].nonzero()
    );
    // The VTEPs go before the namespace holding their TAPs' kernel sides.
    drop(vteps);
    drop(hosts);
}

/// No flood list: the kernel's VTEP is known only through a static FDB entry
/// for `vx0`'s MAC, and ARP/ND suppression with static neighbour entries
/// for `vx0`'s addresses answers A's requests in the VTEP (nothing could
/// carry them to the kernel). Linux must accept those answers (its ping
/// from A goes out to the right MAC) and reach A through the static entry;
/// the FDB lists the entry as permanent.
#[test]
fn vtep_static_entries_and_neighbours_without_flood_list() {
    assert!(netns::is_root(), "system tests need root");
    let spec = VxlanSpec::new(false, VNI, LINUX_PORT);
    let mut b = KernelVtep::new("vkb", &spec).unwrap();
    let (a4, a6) = spec.ours_overlay;
    let (b4, b6) = spec.kernel_overlay;
    let mut a = LocalPort::new("vka", true, spec.overlay_mtu(), a4, a6).unwrap();
    let mac_b = b.kernel_overlay_mac().unwrap();
    let ul = Shim::new(b.take_tap().unwrap(), ShimConfig::all()).unwrap();
    let port = Shim::new(a.take_tap(), ShimConfig::all()).unwrap();
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/24"

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        port = {LINUX_PORT}
        ports = ["{pa}"]
        suppress_arp = true

        [[vni.static]]
        mac = "{mac}"
        remote = "{kernel}"

        [[vni.neighbor]]
        ip = "{b4}"
        mac = "{mac}"

        [[vni.neighbor]]
        ip = "{b6}"
        mac = "{mac}"
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        pa = a.name,
        mac = fmt_mac(mac_b),
    );
    let cfg = parse(&toml).unwrap();
    let vtep = Running::start(&cfg, Box::new(ul), vec![vec![Box::new(port)]]);
    let what = "static entries";
    for to in [IpAddr::from(b4), IpAddr::from(b6)] {
        ping_from(&a.ns, to, what);
    }
    for to in [IpAddr::from(a4), IpAddr::from(a6)] {
        ping_from(&b.ns, to, what);
    }
    let suppressed = vtep.counter(&format!("vni{VNI}.{}.arp_nd_suppressed", a.name));
    assert!(
        suppressed >= 2,
        "{what}: {suppressed} requests answered\n{}",
        vtep.nonzero()
    );
    let dump = vtep.dump();
    let listing = dump.iter().map(|r| format!("\n  {r}")).collect::<String>();
    let entry = dump.iter().find(|r| r.mac == mac_b);
    assert!(
        entry.is_some_and(|r| r.is_static && r.dest == Dest::Remote(spec.kernel_underlay)),
        "{what}:{listing}"
    );
    assert_eq!(
        dump.iter().find(|r| r.mac == a.mac()).map(|r| r.dest),
        Some(Dest::Local(0)),
        "{what}:{listing}"
    );
    assert!(
        dump.iter().all(|r| r.mac != [0; 6]),
        "{what}: no flood entry:{listing}"
    );
    // And TCP through it.
    transfer(
        &a.ns,
        &b.ns,
        SocketAddr::new(b4.into(), 5001),
        16 << 20,
        what,
    );
}

/// Ageing in real time against Linux: with `[fdb] ageing_secs = 1`, the
/// entries learned by a ping age out while the network is quiet (the FDB
/// counts them); the next ping floods, is answered, and relearns.
#[test]
fn vtep_learned_entries_age_out_and_are_relearned() {
    assert!(netns::is_root(), "system tests need root");
    let spec = VxlanSpec::new(false, VNI, LINUX_PORT);
    let mut b = KernelVtep::new("vkb", &spec).unwrap();
    let (a4, a6) = spec.ours_overlay;
    let (b4, _) = spec.kernel_overlay;
    let mut a = LocalPort::new("vka", true, spec.overlay_mtu(), a4, a6).unwrap();
    let ul = Shim::new(b.take_tap().unwrap(), ShimConfig::all()).unwrap();
    let port = Shim::new(a.take_tap(), ShimConfig::all()).unwrap();
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/24"

        [fdb]
        ageing_secs = 1

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        port = {LINUX_PORT}
        flood = ["{kernel}"]
        ports = ["{pa}"]
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        pa = a.name,
    );
    let cfg = parse(&toml).unwrap();
    let vtep = Running::start(&cfg, Box::new(ul), vec![vec![Box::new(port)]]);
    let what = "ageing";
    let c = |n: &str| vtep.counter(&format!("vni{VNI}.fdb.{n}"));
    ping_from(&a.ns, b4.into(), what);
    let learned = c("fdb_learned");
    assert!(learned >= 2, "{what}: {}", vtep.nonzero());
    // Quiet for longer than the ageing time and the sweep interval.
    let end = Instant::now() + std::time::Duration::from_secs(10);
    while c("fdb_aged") < 2 && Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(c("fdb_aged") >= 2, "{what}: {}", vtep.nonzero());
    ping_from(&a.ns, b4.into(), what);
    assert!(
        c("fdb_learned") > learned,
        "{what}: relearned: {}",
        vtep.nonzero()
    );
    let dump = vtep.dump();
    assert!(
        dump.iter()
            .any(|r| r.mac == a.mac() && r.dest == Dest::Local(0)),
        "{what}: {dump:?}"
    );
}
