//! `tunnel_endpoint ctl SOCKET COMMAND`: the control socket's client.
//!
//! ```text
//! tunnel_endpoint ctl /run/vtep.sock fdb [--vni 42]
//! tunnel_endpoint ctl /run/vtep.sock vnis | ports | neighbors | counters
//! tunnel_endpoint ctl /run/vtep.sock fdb add 42 02:00:00:00:00:01 10.0.0.1
//! tunnel_endpoint ctl /run/vtep.sock fdb del 42 02:00:00:00:00:01
//! tunnel_endpoint ctl /run/vtep.sock flood add|del 42 10.0.0.3
//! tunnel_endpoint ctl /run/vtep.sock vni add 43 --encap vxlan --flood 10.0.0.1 --dev vm43
//! tunnel_endpoint ctl /run/vtep.sock vni add 44 --udp-port 8472 --group 239.1.1.44 --nolearning --l2miss --dev vm44
//! tunnel_endpoint ctl /run/vtep.sock vni del 43
//! tunnel_endpoint ctl /run/vtep.sock port add|del 42 vm1
//! tunnel_endpoint ctl /run/vtep.sock flush [--vni 42]
//! tunnel_endpoint ctl /run/vtep.sock reload
//! tunnel_endpoint ctl /run/vtep.sock send '{"cmd":"fdb","vni":42}'
//! ```
//!
//! Each command is one request line and one reply line
//! ([`linerate::tunnel::vtep::control`]); `--json` prints the reply as it
//! came, otherwise as `bridge fdb show`-like text. A refusal exits with
//! status 1, the fields and their fixes on standard error.

use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};
use linerate::tunnel::vtep::control::Reply;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn vni() -> Arg {
    Arg::new("vni")
        .required(true)
        .value_parser(value_parser!(u32))
        .help("the VNI")
}

fn vni_flag() -> Arg {
    Arg::new("vni")
        .long("vni")
        .value_parser(value_parser!(u32))
        .help("only this VNI")
}

fn add_del(
    name: &'static str,
    about: &'static str,
    args: &[(&'static str, &'static str)],
) -> Command {
    let with = |c: Command, args: &[(&'static str, &'static str)]| {
        args.iter().fold(c.arg(vni()), |c, (a, h)| {
            c.arg(Arg::new(*a).required(true).help(*h))
        })
    };
    Command::new(name)
        .about(about)
        .subcommand_required(true)
        .subcommand(with(Command::new("add"), args))
        .subcommand(with(Command::new("del"), args.get(..1).unwrap_or_default()))
}

/// The `ctl` subcommand's arguments.
pub fn command() -> Command {
    Command::new("ctl")
        .about("Shows and changes a running tunnel endpoint through its control socket")
        .arg(
            Arg::new("socket")
                .required(true)
                .help("the control socket (the config's [control] socket)"),
        )
        .arg(
            Arg::new("json")
                .long("json")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("print the reply as the JSON line it came as"),
        )
        .subcommand_required(true)
        .subcommand(
            Command::new("fdb")
                .about("the forwarding table, like `bridge fdb show`; add or del a static entry")
                .arg(vni_flag())
                .subcommand(
                    Command::new("add")
                        .arg(vni())
                        .arg(Arg::new("mac").required(true).help("the inner MAC"))
                        .arg(Arg::new("remote").required(true).help("the remote VTEP")),
                )
                .subcommand(
                    Command::new("del")
                        .arg(vni())
                        .arg(Arg::new("mac").required(true).help("the inner MAC")),
                ),
        )
        .subcommand(Command::new("vnis").about("the running VNIs"))
        .subcommand(Command::new("ports").about("the local ports and their traffic"))
        .subcommand(
            Command::new("neighbors")
                .about("remote VTEPs with their next hops, and the ARP/ND suppression tables"),
        )
        .subcommand(Command::new("counters").about("every counter"))
        .subcommand(add_del(
            "flood",
            "add or remove a remote VTEP of a VNI's flood list",
            &[("remote", "the remote VTEP")],
        ))
        .subcommand(
            Command::new("vni")
                .about("add or remove a VNI")
                .subcommand_required(true)
                .subcommand(
                    Command::new("add")
                        .arg(vni())
                        .arg(
                            Arg::new("encap")
                                .long("encap")
                                .default_value("vxlan")
                                .help("vxlan, geneve or nvgre (a new port or kind gets a tunnel)"),
                        )
                        .arg(
                            Arg::new("udp-port")
                                .long("udp-port")
                                .value_parser(value_parser!(u32))
                                .help("the UDP port (the encapsulation's default when absent)"),
                        )
                        .arg(
                            Arg::new("flood")
                                .long("flood")
                                .action(ArgAction::Append)
                                .help("a remote VTEP of its flood list (repeat for more)"),
                        )
                        .arg(
                            Arg::new("dev")
                                .long("dev")
                                .action(ArgAction::Append)
                                .help("a local port (TAP) to create in it (repeat for more)"),
                        )
                        .arg(
                            Arg::new("group").long("group").help(
                                "an underlay multicast group for its floods (Linux's `group`)",
                            ),
                        )
                        .arg(
                            Arg::new("nolearning")
                                .long("nolearning")
                                .action(ArgAction::SetTrue)
                                .help("learn no MAC from remote VTEPs (Linux's `nolearning`)"),
                        )
                        .arg(
                            Arg::new("l2miss")
                                .long("l2miss")
                                .action(ArgAction::SetTrue)
                                .help("log unknown destinations (Linux's `l2miss`)"),
                        ),
                )
                .subcommand(Command::new("del").arg(vni())),
        )
        .subcommand(add_del(
            "port",
            "create or remove a local port (TAP) of a VNI",
            &[("name", "the device name")],
        ))
        .subcommand(
            Command::new("flush")
                .about("forget learned FDB and neighbour entries")
                .arg(vni_flag()),
        )
        .subcommand(Command::new("reload").about("read the config file again (as SIGHUP)"))
        .subcommand(
            Command::new("send")
                .about("send one request line as it is (JSON)")
                .arg(Arg::new("line").required(true)),
        )
}

fn s<'a>(m: &'a ArgMatches, name: &str) -> &'a str {
    m.get_one::<String>(name).map_or("", String::as_str)
}

fn list(m: &ArgMatches, name: &str) -> Vec<String> {
    m.get_many::<String>(name)
        .map(|v| v.cloned().collect())
        .unwrap_or_default()
}

/// The request line of the command in `m`.
fn request(m: &ArgMatches) -> Result<String, String> {
    let vni = |m: &ArgMatches| m.get_one::<u32>("vni").copied();
    let (cmd, sub) = m.subcommand().ok_or("no command")?;
    let v: Value = match (cmd, sub.subcommand()) {
        ("send", _) => return Ok(s(sub, "line").to_owned()),
        ("fdb", Some(("add", a))) => json!({
            "cmd": "fdb_add", "vni": vni(a), "mac": s(a, "mac"), "remote": s(a, "remote")
        }),
        ("fdb", Some(("del", a))) => json!({"cmd": "fdb_del", "vni": vni(a), "mac": s(a, "mac")}),
        ("fdb", _) => match vni(sub) {
            Some(v) => json!({"cmd": "fdb", "vni": v}),
            None => json!({"cmd": "fdb"}),
        },
        ("flood", Some((op, a))) => {
            json!({"cmd": format!("flood_{op}"), "vni": vni(a), "remote": s(a, "remote")})
        }
        ("port", Some((op, a))) => {
            json!({"cmd": format!("port_{op}"), "vni": vni(a), "name": s(a, "name")})
        }
        ("vni", Some(("add", a))) => {
            let mut t = json!({
                "id": vni(a),
                "encap": s(a, "encap"),
                "flood": list(a, "flood"),
                "ports": list(a, "dev"),
            });
            if let Some(o) = t.as_object_mut() {
                if let Some(p) = a.get_one::<u32>("udp-port") {
                    o.insert("port".into(), json!(p));
                }
                if let Some(g) = a.get_one::<String>("group") {
                    o.insert("group".into(), json!(g));
                }
                if a.get_flag("nolearning") {
                    o.insert("learning".into(), json!(false));
                }
                if a.get_flag("l2miss") {
                    o.insert("l2miss".into(), json!(true));
                }
            }
            json!({"cmd": "vni_add", "vni": t})
        }
        ("vni", Some(("del", a))) => json!({"cmd": "vni_del", "vni": vni(a)}),
        ("flush", _) => match vni(sub) {
            Some(v) => json!({"cmd": "flush", "vni": v}),
            None => json!({"cmd": "flush"}),
        },
        (other, _) => json!({ "cmd": other }),
    };
    serde_json::to_string(&v).map_err(|e| e.to_string())
}

/// Sends the command of `m` and prints the reply; an error for a refusal.
pub fn run(m: &ArgMatches) -> Result<(), String> {
    let socket = s(m, "socket");
    let line = request(m)?;
    let mut conn = UnixStream::connect(socket).map_err(|e| {
        format!(
            "{socket}: {e}: is the VTEP running, with [control] socket = {socket:?} in its config?"
        )
    })?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    conn.write_all(format!("{}\n", line.trim()).as_bytes())
        .map_err(|e| format!("{socket}: {e}"))?;
    let mut reply = String::new();
    BufReader::new(&conn)
        .read_line(&mut reply)
        .map_err(|e| format!("{socket}: {e}"))?;
    let parsed: Result<Reply, _> = serde_json::from_str(&reply);
    if m.get_flag("json") {
        print!("{reply}");
    }
    match parsed {
        Ok(Reply::Error { error }) => Err(error.to_string()),
        Ok(r) => {
            if !m.get_flag("json") {
                print!("{r}");
            }
            Ok(())
        }
        Err(e) => Err(format!(
            "{socket}: a reply not understood ({e}): {}",
            reply.trim()
        )),
    }
}
