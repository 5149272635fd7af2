//! The lab the experiment runs in (a namespace with a TAP for TOE mode, two
//! namespaces joined by a veth pair for NIC mode), one iperf3 or sockperf cell,
//! and the machine's CPU time around it.

use linerate_testkit::netns::{self, Netns, VethPair};
use serde_json::Value;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The kernel's address on the TAP, and linerate's.
const TOE_KERNEL: &str = "10.231.0.1";
const TOE_OURS: &str = "10.231.0.2";
/// The two ends of the veth pair.
const NIC_SERVER: &str = "10.232.0.1";
const NIC_CLIENT: &str = "10.232.0.2";
/// iperf3's port, and sockperf's (another: iperf3's last connection may
/// still be in TIME_WAIT, and sockperf's server binds without SO_REUSEADDR).
const PORT: &str = "5301";
const PING_PORT: &str = "5302";

/// Which stack pair a cell runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// linerate (preloaded) against the kernel over a TAP.
    Toe,
    /// The kernel against the kernel over a veth pair.
    Nic,
}

/// One cell of the experiment at a write size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cell {
    /// The preloaded iperf3 client writes to the kernel's server.
    ToeSend,
    /// The kernel's client writes to the preloaded server.
    ToeReceive,
    /// The preloaded client with `--bidir`.
    ToeBidir,
    /// Kernel to kernel over veth, one way.
    NicOneWay,
    /// Kernel to kernel over veth, `--bidir`.
    NicBidir,
}

impl Cell {
    /// In the order each write size runs them.
    pub const ALL: [Cell; 5] = [
        Cell::NicOneWay,
        Cell::ToeSend,
        Cell::ToeReceive,
        Cell::NicBidir,
        Cell::ToeBidir,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cell::ToeSend => "toe-send",
            Cell::ToeReceive => "toe-receive",
            Cell::ToeBidir => "toe-bidir",
            Cell::NicOneWay => "nic-one-way",
            Cell::NicBidir => "nic-bidir",
        }
    }

    pub fn legend(self) -> &'static str {
        match self {
            Cell::ToeSend => "TOE, linerate sends",
            Cell::ToeReceive => "TOE, linerate receives",
            Cell::ToeBidir => "TOE, both ways",
            Cell::NicOneWay => "NIC (kernel over veth), one way",
            Cell::NicBidir => "NIC (kernel over veth), both ways",
        }
    }

    pub fn mode(self) -> Mode {
        match self {
            Cell::ToeSend | Cell::ToeReceive | Cell::ToeBidir => Mode::Toe,
            Cell::NicOneWay | Cell::NicBidir => Mode::Nic,
        }
    }

    /// The NIC-mode cell a TOE cell is compared with.
    pub fn nic_peer(self) -> Cell {
        match self {
            Cell::ToeBidir | Cell::NicBidir => Cell::NicBidir,
            _ => Cell::NicOneWay,
        }
    }

    pub fn direction(self) -> &'static str {
        match self {
            Cell::ToeBidir | Cell::NicBidir => "bi",
            _ => "uni",
        }
    }

    fn bidir(self) -> bool {
        self.direction() == "bi"
    }
}

/// The latency cells.
#[derive(Clone, Copy, Debug)]
pub enum Latency {
    /// Kernel to kernel over veth.
    Nic,
    /// sockperf's server preloaded, the kernel's client.
    ToeServer,
    /// The preloaded client, the kernel's server.
    ToeClient,
    /// [`Latency::ToeServer`] with the preload busy polling.
    ToeServerBusy,
    /// [`Latency::ToeClient`] with the preload busy polling.
    ToeClientBusy,
}

impl Latency {
    pub const ALL: [Latency; 5] = [
        Latency::Nic,
        Latency::ToeServer,
        Latency::ToeClient,
        Latency::ToeServerBusy,
        Latency::ToeClientBusy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Latency::Nic => "NIC: kernel to kernel over veth",
            Latency::ToeServer => "TOE: linerate server, kernel client",
            Latency::ToeClient => "TOE: linerate client, kernel server",
            Latency::ToeServerBusy => "TOE busy-polling: linerate server",
            Latency::ToeClientBusy => "TOE busy-polling: linerate client",
        }
    }

    fn busy(self) -> bool {
        matches!(self, Latency::ToeServerBusy | Latency::ToeClientBusy)
    }
}

/// What one iperf3 cell measured.
pub struct Measured {
    pub gbit_per_s: f64,
    /// Whole-machine CPU over the client's run, 1.0 = every core busy.
    pub cpu: f64,
}

/// What one sockperf run measured.
pub struct PingPong {
    pub p50_us: f64,
    pub p99_us: f64,
}

/// The namespaces and devices; removed when dropped (the guards' order: the
/// config file, then the namespaces with their devices).
pub struct Lab {
    config: PathBuf,
    tap: String,
    preload: PathBuf,
    toe: Netns,
    nic_server: Netns,
    nic_client: Netns,
    _veth: VethPair,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Fails naming the package when a program is missing.
pub fn require(programs: &[&str]) -> Result<(), Box<dyn Error>> {
    for p in programs {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("{p} is not installed (apt-get install {p})").into());
        }
    }
    Ok(())
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The machine's busy and total jiffies (`/proc/stat`'s first line: user nice
/// system idle iowait irq softirq steal).
fn cpu_jiffies() -> Result<(u64, u64), Box<dyn Error>> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().ok_or("/proc/stat is empty")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    if v.len() < 8 {
        return Err(format!("/proc/stat's cpu line is short: {line}").into());
    }
    let idle = v[3] + v[4];
    let total: u64 = v.iter().sum();
    Ok((total - idle, total))
}

/// A child killed (SIGTERM, then SIGKILL) if still running when dropped.
struct Running(Option<Child>);

impl Running {
    fn wait(mut self) -> std::io::Result<Output> {
        match self.0.take() {
            Some(c) => c.wait_with_output(),
            None => Err(std::io::Error::other("already waited for")),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            if let Ok(pid) = i32::try_from(c.id()) {
                // `timeout` passes SIGTERM on to the program it runs.
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Lab {
    /// `busy_poll_us`: the preload's `nic.busy_poll_us` (0: off).
    pub fn new(preload: &Path, busy_poll_us: u32) -> Result<Lab, Box<dyn Error>> {
        let toe = Netns::new("lrtr")?;
        let tap = netns::unique("lrtt");
        toe.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"])?;
        let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{tap}/disable_ipv6");
        let _ = toe.exec("sh", &["-c", &off]);
        toe.ip(&["addr", "add", &format!("{TOE_KERNEL}/24"), "dev", &tap])?;
        toe.ip(&["link", "set", &tap, "up"])?;
        let config = std::env::temp_dir().join(format!("{}.toml", netns::unique("lrtc")));
        let nic_server = Netns::new("lrts")?;
        let nic_client = Netns::new("lrtk")?;
        let veth = VethPair::new(
            &nic_server,
            &format!("{NIC_SERVER}/24"),
            &nic_client,
            &format!("{NIC_CLIENT}/24"),
        )?;
        let lab = Lab {
            config,
            tap,
            preload: std::fs::canonicalize(preload)?,
            toe,
            nic_server,
            nic_client,
            _veth: veth,
        };
        lab.busy_poll(busy_poll_us)?;
        Ok(lab)
    }

    /// Writes the preload's configuration (read by each preloaded program
    /// as it starts) with `nic.busy_poll_us = us`.
    pub fn busy_poll(&self, us: u32) -> Result<(), Box<dyn Error>> {
        let tap = &self.tap;
        std::fs::write(
            &self.config,
            format!(
                "[nic]\ntap = \"{tap}\"\nbusy_poll_us = {us}\n\
                 [net]\naddress = \"{TOE_OURS}/24\"\n\
                 [policy]\ndefault = \"linerate\"\n"
            ),
        )?;
        Ok(())
    }

    /// `program args` in `ns`, under the preload if `preloaded`, bounded in time.
    fn command(&self, ns: &Netns, preloaded: bool, limit: u32, args: &[&str]) -> Command {
        let mut c = ns.command("env");
        if preloaded {
            c.arg(format!("LINERATE_CONFIG={}", self.config.display()))
                .arg(format!("LD_PRELOAD={}", self.preload.display()));
        }
        c.args(["timeout", &limit.to_string()]).args(args);
        c.stdin(Stdio::null());
        c
    }

    /// Where a cell's server and client run: (server namespace, server
    /// preloaded, server address, client namespace, client preloaded).
    fn ends(&self, toe_server: bool, mode: Mode) -> (&Netns, bool, &'static str, &Netns, bool) {
        match mode {
            Mode::Nic => (&self.nic_server, false, NIC_SERVER, &self.nic_client, false),
            Mode::Toe if toe_server => (&self.toe, true, TOE_OURS, &self.toe, false),
            Mode::Toe => (&self.toe, false, TOE_KERNEL, &self.toe, true),
        }
    }

    /// Runs `client` until the server answers (it needs a moment to listen
    /// and neither iperf3 nor sockperf retries), with the machine's CPU time
    /// around the successful run.
    fn until_listening(
        &self,
        server: &mut Running,
        (ns, preloaded, limit): (&Netns, bool, u32),
        args: &[&str],
        refused: &str,
    ) -> Result<(Output, f64), Box<dyn Error>> {
        let client = || {
            let mut c = self.command(ns, preloaded, limit, args);
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            c
        };
        for _ in 0..100 {
            if let Some(c) = server.0.as_mut()
                && c.try_wait()?.is_some()
            {
                let out = server.0.take().map(Child::wait_with_output).transpose()?;
                return Err(format!(
                    "the server exited before its client ran: {}",
                    out.as_ref().map(text).unwrap_or_default()
                )
                .into());
            }
            let (busy0, total0) = cpu_jiffies()?;
            let out = client().output()?;
            let (busy1, total1) = cpu_jiffies()?;
            let t = text(&out);
            if t.contains(refused) {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let cpu = (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
            return Ok((out, cpu));
        }
        Err("the server never listened".into())
    }

    /// One iperf3 run of `cell` with `write`-byte writes for `seconds`.
    pub fn iperf3(
        &self,
        cell: Cell,
        write: usize,
        seconds: u32,
    ) -> Result<Measured, Box<dyn Error>> {
        let (sns, spre, addr, cns, cpre) = self.ends(cell == Cell::ToeReceive, cell.mode());
        let limit = seconds + 30;
        let server = self
            .command(
                sns,
                spre,
                limit,
                &["iperf3", "-s", "-1", "--json", "-B", addr, "-p", PORT],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut server = Running(Some(server));
        let (l, t) = (write.to_string(), seconds.to_string());
        let mut args = vec![
            "iperf3", "-c", addr, "-p", PORT, "-t", &t, "-l", &l, "--json",
        ];
        if cell.bidir() {
            args.push("--bidir");
        }
        let (out, cpu) =
            self.until_listening(&mut server, (cns, cpre, limit), &args, "Connection refused")?;
        let what = format!("iperf3 {} at {write} B", cell.name());
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{what}: not JSON ({e}): {}", text(&out)))?;
        if let Some(e) = v.get("error") {
            return Err(format!("{what}: {e}").into());
        }
        let server_out = server.wait()?;
        if !out.status.success() || !server_out.status.success() {
            return Err(format!(
                "{what} failed: {}\nserver: {}",
                text(&out),
                text(&server_out)
            )
            .into());
        }
        let bps = |key: &str| v["end"][key]["bits_per_second"].as_f64();
        let received = bps("sum_received").ok_or_else(|| format!("{what}: no sum_received"))?;
        let reverse = if cell.bidir() {
            bps("sum_received_bidir_reverse")
                .ok_or_else(|| format!("{what}: no sum_received_bidir_reverse"))?
        } else {
            0.0
        };
        Ok(Measured {
            gbit_per_s: (received + reverse) / 1e9,
            cpu,
        })
    }

    /// One sockperf TCP ping-pong run, 64-byte messages; the busy-polling
    /// cells with `nic.busy_poll_us = busy_us`, the others with `us`.
    pub fn sockperf(
        &self,
        cell: Latency,
        seconds: u32,
        (us, busy_us): (u32, u32),
    ) -> Result<PingPong, Box<dyn Error>> {
        self.busy_poll(if cell.busy() { busy_us } else { us })?;
        let (sns, spre, addr, cns, cpre) = match cell {
            Latency::Nic => self.ends(false, Mode::Nic),
            Latency::ToeServer | Latency::ToeServerBusy => self.ends(true, Mode::Toe),
            Latency::ToeClient | Latency::ToeClientBusy => self.ends(false, Mode::Toe),
        };
        let limit = seconds + 30;
        let server = self
            .command(
                sns,
                spre,
                limit,
                &["sockperf", "server", "--tcp", "-i", addr, "-p", PING_PORT],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut server = Running(Some(server));
        let t = seconds.to_string();
        let args = [
            "sockperf",
            "ping-pong",
            "--tcp",
            "-i",
            addr,
            "-p",
            PING_PORT,
            "-t",
            &t,
            "-m",
            "64",
        ];
        let (out, _) = self.until_listening(&mut server, (cns, cpre, limit), &args, "refused")?;
        let t = text(&out);
        if !out.status.success() || t.contains("ERROR") {
            return Err(format!("sockperf {}: {t}", cell.name()).into());
        }
        let after = |key: &str| -> Option<f64> {
            let (_, rest) = t.split_once(key)?;
            let v: String = rest
                .trim_start_matches([' ', '='])
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            v.parse().ok()
        };
        Ok(PingPong {
            p50_us: after("percentile 50.000").ok_or_else(|| format!("no median in: {t}"))?,
            p99_us: after("percentile 99.000").unwrap_or(f64::NAN),
        })
    }
}
