//! The tunnel endpoint binary changed while it runs, against Linux's VXLAN
//! device: its control socket, SIGHUP and its Prometheus metrics.
//!
//! ```text
//! ns A: kernel ── TAP p ══ tunnel_endpoint (ns V) ══ TAP ul ── ns K: vx0 (VNI 4242), vx1 (4343)
//! ```
//!
//! The binary runs in a namespace of its own (`ip netns exec`) and creates
//! its TAPs there from the config; the test moves the underlay's kernel side
//! into K under the kernel's VXLAN device (`KernelVtep::adopt`) and each
//! port's into a host namespace. VNI 4242's flood list holds the kernel's
//! VTEP K and a VTEP D that does not exist, so K can leave it. Changes are
//! checked by traffic: a UDP stream from A to `vx0` that stops and resumes,
//! pings from new ports' hosts. Each test takes a few seconds; everything
//! lives in namespaces removed (and the binary killed) on failure too.
//!
//! * `control_socket_changes_what_traffic_does`: flood remotes and static
//!   entries removed and added while the stream runs; shows checked against
//!   the kernel's own MACs; bad requests answered with the field, the server
//!   and the connection going on; a port and a VNI added and removed; the
//!   socket is 0600 and gone after exit.
//! * `sighup_applies_a_new_config_and_refuses_a_broken_one`: a VNI and its
//!   port added by SIGHUP (ping across), then a config that changes the
//!   underlay and one that breaks a rule refused field by field with the
//!   running state kept (pings go on), then the first config back.
//! * `vnis_on_new_tunnels_are_added_by_the_socket_and_by_sighup`: VNIs on
//!   VXLAN ports the VTEP did not start with (8472 through the socket, 4790
//!   by SIGHUP) against kernel devices on those ports, pinged across while
//!   the first VNI runs on.
//! * `prometheus_metrics_agree_with_the_dump_and_the_socket`: the scrape
//!   (curl) parsed line by line as the text exposition format, every counter
//!   equal to the control socket's and the SIGUSR1 dump's.
//!
//! Needs root: `cargo test --features system-tests --test system_vtep_ctl -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod examples_common;
mod vtep_common;

use examples_common::{Running, example};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::vxlan::{IANA_PORT, KernelVtep, LINUX_PORT, VxlanSpec};
use serde_json::Value;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use vtep_common::{TempDir, fmt_mac, mac_of};

const VNI: u32 = 4242;
const VNI2: u32 = 4343;
/// A remote VTEP of VNI 4242's flood list that does not exist.
const DUMMY: &str = "10.78.0.9";
const METRICS: &str = "127.0.0.1:9100";
const START: Duration = Duration::from_secs(120);

/// The binary in namespace V with its TAPs moved out: the kernel's VTEP in
/// K, the host of port `p` in A.
struct Site {
    run: Running,
    /// Holds the config and the socket; removed last but one.
    _dir: TempDir,
    config: PathBuf,
    socket: PathBuf,
    kernel: KernelVtep,
    a: Netns,
    p: String,
    spec: VxlanSpec,
    // The binary's namespace goes last (its TAPs are gone by then).
    v: Netns,
}

fn config(spec: &VxlanSpec, ul: &str, p: &str, socket: &Path, extra: &str) -> String {
    format!(
        r#"
        [underlay]
        tap = "{ul}"
        address = "{ours}/24"
        [control]
        socket = "{socket}"
        [metrics]
        listen = "{METRICS}"
        [[vni]]
        id = {VNI}
        encap = "vxlan"
        flood = ["{kernel}", "{DUMMY}"]
        ports = ["{p}"]
        {extra}
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        socket = socket.display(),
    )
}

/// Moves port `name` from V into a new namespace at `addr`/24.
fn host(v: &Netns, name: &str, addr: &str) -> Netns {
    let ns = Netns::new("vch").unwrap();
    v.ip(&["link", "set", name, "netns", ns.name()]).unwrap();
    ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", name])
        .unwrap();
    ns.ip(&["link", "set", name, "up"]).unwrap();
    ns
}

fn pings(ns: &Netns, to: &str) -> u16 {
    let to: IpAddr = to.parse().unwrap();
    ns.run(move || linerate_testkit::ping::ping(to, 2, 56, Duration::from_secs(2)))
        .unwrap()
        .unwrap_or(0)
}

impl Site {
    fn start() -> Site {
        assert!(netns::is_root(), "system tests need root");
        let dir = TempDir::new("vtepctl");
        let v = Netns::new("vcv").unwrap();
        let (ul, p) = (netns::unique("vcu"), netns::unique("vcp"));
        let spec = VxlanSpec::new(false, VNI, IANA_PORT);
        let socket = dir.0.join("ctl.sock");
        let config = dir.0.join("vtep.toml");
        std::fs::write(&config, self::config(&spec, &ul, &p, &socket, "")).unwrap();
        let mut cmd = v.command(example("tunnel_endpoint").to_str().unwrap());
        cmd.args(["--config", config.to_str().unwrap(), "--log", "info"]);
        let mut run = Running::start("tunnel_endpoint", cmd);
        run.expect_line("VTEP running", START);
        let kernel = KernelVtep::adopt("vck", &spec, &v, &ul).unwrap();
        let a = host(&v, &p, "192.168.42.2");
        let site = Site {
            run,
            _dir: dir,
            config,
            socket,
            kernel,
            a,
            p,
            spec,
            v,
        };
        assert_eq!(
            pings(&site.a, "192.168.42.1"),
            2,
            "A to vx0 through the VTEP"
        );
        site
    }

    /// `tunnel_endpoint ctl SOCKET args`: whether it succeeded, and stdout.
    fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(example("tunnel_endpoint"))
            .arg("ctl")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// The JSON reply of `ctl --json args`, which must succeed.
    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let (ok, out) = self.ctl(&a);
        assert!(ok, "ctl {args:?}: {out}");
        serde_json::from_str(&out).unwrap()
    }

    /// The fields a refused `ctl --json args` names.
    fn refused(&self, args: &[&str]) -> Vec<String> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let (ok, out) = self.ctl(&a);
        assert!(!ok, "ctl {args:?} succeeded: {out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["reply"], "error", "{v}");
        assert_eq!(v["error"]["kind"], "invalid", "{v}");
        v["error"]["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["field"].as_str().unwrap().to_owned())
            .collect()
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.run.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn kernel_vtep(&self) -> String {
        self.spec.kernel_underlay.to_string()
    }

    /// A second kernel VXLAN device in K: VNI 4343 at 192.168.43.1.
    fn kernel_vni2(&self) {
        self.kernel_vni("vx1", VNI2, IANA_PORT, "192.168.43.1");
    }

    /// A kernel VXLAN device `dev` in K: VNI `vni` on UDP port `port`, at
    /// `addr`/24.
    fn kernel_vni(&self, dev: &str, vni: u32, port: u16, addr: &str) {
        let ns = &self.kernel.ns;
        let (remote, local) = (
            self.spec.ours_underlay.to_string(),
            self.spec.kernel_underlay.to_string(),
        );
        let (id, port) = (vni.to_string(), port.to_string());
        ns.ip(&[
            "link",
            "add",
            dev,
            "type",
            "vxlan",
            "id",
            &id,
            "remote",
            &remote,
            "local",
            &local,
            "dstport",
            &port,
            "dev",
            &self.kernel.tap_name,
            "noudpcsum",
        ])
        .unwrap();
        ns.ip(&["link", "set", dev, "mtu", "1450"]).unwrap();
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])
            .unwrap();
        ns.ip(&["link", "set", dev, "up"]).unwrap();
    }
}

/// UDP datagrams from A to vx0, every 2 ms, counted by a socket in K.
struct Stream {
    stop: Arc<AtomicBool>,
    got: Arc<AtomicU64>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
}

impl Stream {
    fn start(site: &Site) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(AtomicU64::new(0));
        let to: SocketAddr = "192.168.42.1:5555".parse().unwrap();
        let (s, g) = (Arc::clone(&stop), Arc::clone(&got));
        let recv = site
            .kernel
            .ns
            .spawn(move || {
                let sock = UdpSocket::bind(to).unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(50)))
                    .unwrap();
                let mut buf = [0u8; 64];
                while !s.load(Ordering::Relaxed) {
                    if sock.recv(&mut buf).is_ok() {
                        g.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .unwrap();
        // The receiver binds before the first datagram.
        std::thread::sleep(Duration::from_millis(100));
        let s = Arc::clone(&stop);
        let send = site
            .a
            .spawn(move || {
                let sock = UdpSocket::bind("192.168.42.2:0").unwrap();
                while !s.load(Ordering::Relaxed) {
                    let _ = sock.send_to(b"linerate", to);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
            .unwrap();
        Stream {
            stop,
            got,
            threads: vec![recv, send],
        }
    }

    /// Datagrams that arrive in 400 ms, after `settle` for what was in flight.
    fn arriving(&self, settle: Duration) -> u64 {
        std::thread::sleep(settle);
        let a = self.got.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(400));
        self.got.load(Ordering::Relaxed) - a
    }

    fn flows(&self, what: &str) {
        let n = self.arriving(Duration::from_millis(300));
        assert!(
            n > 30,
            "{what}: {n} datagrams in 400 ms, the stream should flow"
        );
    }

    fn stopped(&self, what: &str) {
        let n = self.arriving(Duration::from_millis(300));
        assert_eq!(n, 0, "{what}: the stream should have stopped");
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn control_socket_changes_what_traffic_does() {
    let site = Site::start();
    let mode = std::fs::metadata(&site.socket).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600, "socket mode");
    let k = site.kernel_vtep();
    let vni = VNI.to_string();
    let vx0 = fmt_mac(site.kernel.kernel_overlay_mac().unwrap());
    let a_mac = fmt_mac(mac_of(&site.a, &site.p).unwrap());

    // The shows, against the kernel's own view of its MACs.
    let fdb = site.json(&["fdb", "--vni", &vni]);
    let entries = fdb["entries"].as_array().unwrap();
    let find = |mac: &str| entries.iter().find(|e| e["mac"] == mac).cloned();
    let a_entry = find(&a_mac).expect("A's MAC learned");
    assert_eq!(a_entry["port"], site.p.as_str());
    assert_eq!(find(&vx0).expect("vx0's MAC learned")["remote"], k.as_str());
    let n = site.json(&["neighbors"]);
    let kernel_hop = n["remotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["remote"] == k.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        kernel_hop["mac"],
        fmt_mac(site.kernel.kernel_underlay_mac().unwrap()).as_str()
    );

    let stream = Stream::start(&site);
    stream.flows("at start");
    // K leaves the flood list: nothing goes to it (vx0's MAC is forgotten
    // with it and floods to D only), nothing from it is taken.
    assert!(site.ctl(&["flood", "del", &vni, &k]).0);
    stream.stopped("K out of the flood list");
    let fdb = site.json(&["fdb"]);
    assert!(
        fdb["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["remote"] != k.as_str()),
        "{fdb}"
    );
    assert!(site.ctl(&["flood", "add", &vni, &k]).0);
    stream.flows("K back in the flood list");
    // A static entry puts vx0 behind D: the stream goes there.
    assert!(site.ctl(&["fdb", "add", &vni, &vx0, DUMMY]).0);
    stream.stopped("vx0 statically behind D");
    let fdb = site.json(&["fdb", "--vni", &vni]);
    let e = fdb["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == vx0.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        (e["remote"].as_str(), e["permanent"].as_bool()),
        (Some(DUMMY), Some(true))
    );
    assert!(site.ctl(&["fdb", "del", &vni, &vx0]).0);
    stream.flows("the static entry gone");

    // Bad requests: typed refusals naming the field; the server goes on.
    assert_eq!(site.refused(&["send", "not json"]), ["."]);
    assert_eq!(
        site.refused(&["send", r#"{"cmd":"fdb_add","vni":4242}"#]),
        ["mac"]
    );
    assert_eq!(
        site.refused(&["fdb", "add", &vni, "ff:ff:ff:ff:ff:ff", &k]),
        ["mac"]
    );
    assert_eq!(site.refused(&["fdb", "add", "7", &vx0, &k]), ["vni"]);
    assert_eq!(
        site.refused(&["flood", "del", &vni, "10.78.0.50"]),
        ["remote"]
    );
    assert_eq!(site.refused(&["port", "add", &vni, "no/slash"]), ["name"]);
    // One connection: a bad line, then a good one, both answered.
    {
        use std::io::{BufRead, BufReader, Write};
        let mut c = std::os::unix::net::UnixStream::connect(&site.socket).unwrap();
        c.write_all(b"{\"cmd\":\n{\"cmd\":\"vnis\"}\n").unwrap();
        let mut r = BufReader::new(c);
        let (mut one, mut two) = (String::new(), String::new());
        r.read_line(&mut one).unwrap();
        r.read_line(&mut two).unwrap();
        let (one, two): (Value, Value) = (
            serde_json::from_str(&one).unwrap(),
            serde_json::from_str(&two).unwrap(),
        );
        assert_eq!(one["reply"], "error");
        assert_eq!(two["reply"], "vnis");
    }
    stream.flows("after the bad requests");

    // A port added: its host reaches vx0; removed: the device is gone.
    let p2 = netns::unique("vcq");
    assert!(site.ctl(&["port", "add", &vni, &p2]).0);
    let b = host(&site.v, &p2, "192.168.42.3");
    assert_eq!(pings(&b, "192.168.42.1"), 2, "the new port's host");
    let ports = site.json(&["ports"]);
    assert!(
        ports["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == p2.as_str() && p["rx_packets"].as_u64() > Some(0)),
        "{ports}"
    );
    assert!(site.ctl(&["port", "del", &vni, &p2]).0);
    std::thread::sleep(Duration::from_millis(200));
    assert!(b.ip(&["link", "show", &p2]).is_err(), "the TAP is gone");

    // A VNI added with a port: across to vx1; removed: no more.
    site.kernel_vni2();
    let p3 = netns::unique("vcr");
    let id = VNI2.to_string();
    assert!(
        site.ctl(&["vni", "add", &id, "--flood", &k, "--dev", &p3])
            .0
    );
    let c = host(&site.v, &p3, "192.168.43.2");
    assert_eq!(pings(&c, "192.168.43.1"), 2, "VNI 4343's host to vx1");
    assert!(site.ctl(&["vni", "del", &id]).0);
    let vnis = site.json(&["vnis"]);
    assert_eq!(vnis["vnis"].as_array().unwrap().len(), 1, "{vnis}");
    stream.flows("at the end");
    drop(stream);

    let mut site = site;
    site.signal("-TERM");
    let st = site.run.wait(Duration::from_secs(10));
    assert!(st.success(), "{st}: {:?}", site.run.seen);
    assert!(!site.socket.exists(), "the socket is removed at exit");
}

#[test]
fn sighup_applies_a_new_config_and_refuses_a_broken_one() {
    let mut site = Site::start();
    site.kernel_vni2();
    let k = site.kernel_vtep();
    let p3 = netns::unique("vcr");
    let ul = site.kernel.tap_name.clone();
    let write = |extra: &str| {
        std::fs::write(
            &site.config,
            config(&site.spec, &ul, &site.p, &site.socket, extra),
        )
        .unwrap();
    };
    let vni2 =
        format!("[[vni]]\nid = {VNI2}\nencap = \"vxlan\"\nflood = [\"{k}\"]\nports = [\"{p3}\"]\n");
    write(&vni2);
    site.signal("-HUP");
    site.run.expect_line(
        &format!("add port {p3} to vni {VNI2}"),
        Duration::from_secs(10),
    );
    let c = host(&site.v, &p3, "192.168.43.2");
    assert_eq!(pings(&c, "192.168.43.1"), 2, "the VNI SIGHUP added");

    // The underlay cannot change while it runs: the whole file is refused,
    // the flood list change in it too.
    let text = config(&site.spec, &ul, &site.p, &site.socket, &vni2)
        .replace(&format!("{}/24", site.spec.ours_underlay), "10.78.0.7/24")
        .replace(&format!(", \"{DUMMY}\""), "");
    std::fs::write(&site.config, text).unwrap();
    site.signal("-HUP");
    let line = site
        .run
        .expect_line("underlay.address", Duration::from_secs(10));
    assert!(line.contains("restart"), "{line}");
    let vnis = site.json(&["vnis"]);
    let list = vnis["vnis"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{vnis}");
    assert_eq!(
        list[0]["flood"].as_array().unwrap().len(),
        2,
        "kept: {vnis}"
    );
    assert_eq!(pings(&site.a, "192.168.42.1"), 2, "VNI 4242 runs on");
    assert_eq!(pings(&c, "192.168.43.1"), 2, "VNI 4343 runs on");
    assert_eq!(site.refused(&["reload"]), ["underlay.address"]);

    // A rule broken, and a TOML error: refused by field (and line).
    write(&format!(
        "{vni2}\n[[vni]]\nid = 16777216\nencap = \"vxlan\"\n"
    ));
    assert_eq!(site.refused(&["reload"]), ["vni[2].id"]);
    std::fs::write(&site.config, "[underlay\n").unwrap();
    assert_eq!(
        site.refused(&["reload"]),
        [site.config.display().to_string()]
    );
    assert_eq!(pings(&c, "192.168.43.1"), 2, "VNI 4343 runs on");

    // The first file back: VNI 4343 goes.
    write("");
    let done = site.json(&["reload"]);
    let edits: Vec<&str> = done["edits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(edits, [format!("remove vni {VNI2}")], "{done}");
    assert_eq!(pings(&c, "192.168.43.1"), 0, "VNI 4343 is gone");
    assert_eq!(pings(&site.a, "192.168.42.1"), 2);
}

/// VNIs of tunnels the VTEP did not start with (VXLAN on Linux's port 8472
/// and on 4790, beside 4789): one added through the socket, one by SIGHUP,
/// each reached by pings while the first VNI runs on.
#[test]
fn vnis_on_new_tunnels_are_added_by_the_socket_and_by_sighup() {
    let mut site = Site::start();
    site.kernel_vni("vx2", 4444, LINUX_PORT, "192.168.44.1");
    site.kernel_vni("vx3", 4545, 4790, "192.168.45.1");
    let k = site.kernel_vtep();
    let (p2, p3) = (netns::unique("vcn"), netns::unique("vco"));
    let (ok, out) = site.ctl(&[
        "vni",
        "add",
        "4444",
        "--encap",
        "vxlan",
        "--udp-port",
        "8472",
        "--flood",
        &k,
        "--dev",
        &p2,
        "--l2miss",
    ]);
    assert!(ok, "{out}");
    let c = host(&site.v, &p2, "192.168.44.2");
    assert_eq!(
        pings(&c, "192.168.44.1"),
        2,
        "the VNI on 8472 the socket added"
    );
    // A host behind the port sends to a MAC no one has: the l2miss log
    // names it.
    c.ip(&[
        "neigh",
        "add",
        "192.168.44.9",
        "lladdr",
        "02:00:00:00:44:09",
        "dev",
        &p2,
    ])
    .unwrap();
    assert_eq!(pings(&c, "192.168.44.9"), 0);
    let line = site
        .run
        .expect_line("02:00:00:00:44:09", Duration::from_secs(10));
    assert!(line.contains("l2miss") && line.contains("4444"), "{line}");
    assert_eq!(
        pings(&site.a, "192.168.42.1"),
        2,
        "VNI 4242 on 4789 runs on"
    );
    // A VNI with a multicast group and Linux's nolearning and l2miss, shown
    // as added, then removed.
    let (ok, out) = site.ctl(&[
        "vni",
        "add",
        "4646",
        "--udp-port",
        "8472",
        "--group",
        "239.46.0.1",
        "--nolearning",
        "--l2miss",
    ]);
    assert!(ok, "{out}");
    let vnis = site.json(&["vnis"]);
    let v = vnis["vnis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vni"] == 4646)
        .unwrap_or_else(|| panic!("{vnis}"));
    assert_eq!(v["group"], "239.46.0.1", "{v}");
    assert_eq!(
        (&v["learning"], &v["l2miss"]),
        (&Value::Bool(false), &Value::Bool(true))
    );
    let (_, text) = site.ctl(&["fdb", "--vni", "4646"]);
    assert!(
        text.contains("00:00:00:00:00:00 dst 239.46.0.1 vni 4646 permanent"),
        "{text}"
    );
    assert!(site.ctl(&["vni", "del", "4646"]).0);

    // The file gets both: the socket's VNI (unchanged) and one on 4790.
    let ul = site.kernel.tap_name.clone();
    let extra = format!(
        "[[vni]]\nid = 4444\nencap = \"vxlan\"\nport = 8472\nflood = [\"{k}\"]\nports = [\"{p2}\"]\nl2miss = true\n\
         [[vni]]\nid = 4545\nencap = \"vxlan\"\nport = 4790\nflood = [\"{k}\"]\nports = [\"{p3}\"]\n"
    );
    std::fs::write(
        &site.config,
        config(&site.spec, &ul, &site.p, &site.socket, &extra),
    )
    .unwrap();
    site.signal("-HUP");
    site.run.expect_line(
        &format!("add port {p3} to vni 4545"),
        Duration::from_secs(10),
    );
    let d = host(&site.v, &p3, "192.168.45.2");
    assert_eq!(pings(&d, "192.168.45.1"), 2, "the VNI on 4790 SIGHUP added");
    assert_eq!(pings(&c, "192.168.44.1"), 2);
    assert_eq!(pings(&site.a, "192.168.42.1"), 2);
    let vnis = site.json(&["vnis"]);
    assert_eq!(vnis["vnis"].as_array().unwrap().len(), 3, "{vnis}");
}

/// One sample line of the text exposition format: name, labels, value.
type Line = (String, Vec<(String, String)>, f64);

fn metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Parses a sample line, or panics saying why it is not one.
fn sample(line: &str) -> Line {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => panic!("no value: {line:?}"),
    };
    assert!(metric_name(name), "bad metric name in {line:?}");
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(r) = rest.strip_prefix('{') {
        let mut r = r;
        loop {
            if let Some(after) = r.strip_prefix('}') {
                r = after;
                break;
            }
            let eq = r.find('=').unwrap_or_else(|| panic!("label in {line:?}"));
            let (k, v) = r.split_at(eq);
            assert!(
                metric_name(k) && !k.contains(':'),
                "label name {k:?} in {line:?}"
            );
            let v = v
                .strip_prefix("=\"")
                .unwrap_or_else(|| panic!("label value in {line:?}"));
            let mut value = String::new();
            let mut chars = v.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => panic!("escape {other:?} in {line:?}"),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => panic!("unterminated label value in {line:?}"),
                }
            };
            labels.push((k.to_owned(), value));
            r = &v[end + 1..];
            r = r.strip_prefix(',').unwrap_or(r);
        }
        rest = r;
    }
    let mut parts = rest.split_whitespace();
    let value = parts.next().unwrap_or_else(|| panic!("no value: {line:?}"));
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("value {v:?} in {line:?}")),
    };
    if let Some(ts) = parts.next() {
        assert!(ts.parse::<i64>().is_ok(), "timestamp in {line:?}");
    }
    assert!(parts.next().is_none(), "trailing text in {line:?}");
    (name.to_owned(), labels, value)
}

/// Every line of a scrape checked; the samples by name and sorted labels.
fn exposition(text: &str) -> HashMap<(String, Vec<(String, String)>), f64> {
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(c) = line.strip_prefix('#') {
            let mut w = c.split_whitespace();
            match w.next() {
                Some("TYPE") => {
                    let (n, t) = (w.next().unwrap(), w.next().unwrap());
                    assert!(metric_name(n), "{line:?}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line:?}"
                    );
                    assert!(
                        typed.insert(n.to_owned(), t.to_owned()).is_none(),
                        "twice: {line:?}"
                    );
                }
                Some("HELP") => assert!(w.next().is_some_and(metric_name), "{line:?}"),
                _ => {}
            }
            continue;
        }
        assert!(!line.trim().is_empty(), "an empty line in the exposition");
        let (name, mut labels, value) = sample(line);
        assert_eq!(
            typed.get(&name).map(String::as_str),
            Some("counter"),
            "{line:?}"
        );
        assert!(value >= 0.0 && value.fract() == 0.0, "{line:?}");
        labels.sort();
        assert!(
            out.insert((name, labels), value).is_none(),
            "twice: {line:?}"
        );
    }
    out
}

/// The metric a counter of the control socket's `counters` is exposed as.
fn metric_of(s: &Value) -> (String, Vec<(String, String)>) {
    let name = s["name"].as_str().unwrap();
    let vni = s["vni"].as_u64().map(|v| ("vni".to_owned(), v.to_string()));
    let port = s["port"]
        .as_str()
        .map(|p| ("port".to_owned(), p.to_owned()));
    let tunnel = s["tunnel"]
        .as_str()
        .map(|t| ("tunnel".to_owned(), t.to_owned()));
    let (prefix, name) = match s["scope"].as_str().unwrap() {
        "fdb" => ("fdb_", name.strip_prefix("fdb_").unwrap_or(name)),
        "vtep" => ("endpoint_", name),
        "process" => ("", name),
        "port" => ("port_", name),
        "overlay" => ("overlay_", name),
        "tunnel" => ("tunnel_", name),
        "underlay" => ("underlay_", name),
        other => panic!("scope {other}"),
    };
    let mut labels: Vec<(String, String)> = [vni, port, tunnel].into_iter().flatten().collect();
    labels.sort();
    (format!("linerate_vtep_{prefix}{name}_total"), labels)
}

#[test]
fn prometheus_metrics_agree_with_the_dump_and_the_socket() {
    let mut site = Site::start();
    assert_eq!(pings(&site.a, "192.168.42.1"), 2);
    std::thread::sleep(Duration::from_millis(300));
    let before = site.json(&["counters"]);
    let scrape = site
        .v
        .exec("curl", &["-sf", &format!("http://{METRICS}/metrics")])
        .unwrap();
    let text = String::from_utf8(scrape.stdout).unwrap();
    site.signal("-USR1");
    let dump: HashMap<String, u64> = site
        .run
        .lines_for(Duration::from_millis(700))
        .iter()
        .filter_map(|l| {
            let (n, v) = l.rsplit_once(": ")?;
            Some((n.to_owned(), v.trim().parse().ok()?))
        })
        .collect();
    let after = site.json(&["counters"]);
    let metrics = exposition(&text);

    let (before, after) = (
        before["counters"].as_array().unwrap(),
        after["counters"].as_array().unwrap(),
    );
    assert_eq!(before.len(), after.len());
    assert_eq!(metrics.len(), before.len(), "one metric per counter");
    let mut checked = 0;
    for (b, a) in before.iter().zip(after) {
        assert_eq!((&b["scope"], &b["name"]), (&a["scope"], &a["name"]));
        let value = b["value"].as_u64().unwrap();
        if a["value"].as_u64() != Some(value) {
            // Moved while the three were read (ARP, ND on the underlay).
            continue;
        }
        let key = metric_of(b);
        assert_eq!(metrics.get(&key), Some(&(value as f64)), "{key:?}");
        // The dump names it as `vni<N>.<where>.<name>`; zeros are left out.
        let dotted = match (b["scope"].as_str(), b["vni"].as_u64()) {
            (Some("port"), Some(v)) => format!(
                "vni{v}.{}.{}",
                b["port"].as_str().unwrap(),
                b["name"].as_str().unwrap()
            ),
            (Some("overlay"), Some(v)) => format!(
                "vni{v}.{}.{}",
                b["tunnel"].as_str().unwrap(),
                b["name"].as_str().unwrap()
            ),
            (Some(s @ ("fdb" | "tunnel")), Some(v)) => {
                format!("vni{v}.{s}.{}", b["name"].as_str().unwrap())
            }
            (Some("underlay"), _) => format!("underlay.{}", b["name"].as_str().unwrap()),
            _ => format!("vtep.{}", b["name"].as_str().unwrap()),
        };
        assert_eq!(dump.get(&dotted).copied().unwrap_or(0), value, "{dotted}");
        checked += 1;
    }
    let port = (
        "linerate_vtep_port_rx_packets_total".to_owned(),
        vec![
            ("port".to_owned(), site.p.clone()),
            ("vni".to_owned(), VNI.to_string()),
        ],
    );
    assert!(metrics.get(&port).is_some_and(|v| *v >= 4.0), "{port:?}");
    assert!(
        checked > before.len() / 2,
        "{checked} of {} stable",
        before.len()
    );
    let nope = site
        .v
        .exec(
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://{METRICS}/nope"),
            ],
        )
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&nope.stdout), "404");
}
