//! The running VTEP's control: requests from the control socket, SIGHUP and
//! the metrics, served off the data path.
//!
//! Each replica (one per queue, each on its own thread) owns its VTEP
//! outright. A change or a show reaches it as a [`Job`] on a bounded
//! channel that its thread runs between two rounds of its loop, and the
//! answer comes back on a channel of the job's own: no lock is taken per
//! frame, and a replica's forwarding only ever waits for a job that is
//! running (an FDB entry, a port opened beforehand). [`Server`] sends a
//! job to every replica and waits for all of them; one change at a time
//! (a lock held by the control side only), so the replicas see changes in
//! one order and the running configuration it keeps matches theirs.
//!
//! New ports' TAPs are created here, before any replica changes: a device
//! that cannot be created refuses the whole change.

use crate::{Replica, open_tap};
use linerate::nic::Nic;
use linerate::tunnel::bridge::FdbRecord;
use linerate::tunnel::vtep::control::{
    self, CtlError, Query, Reply, Request, edits, parse_request,
};
use linerate::tunnel::vtep::diff::{TunnelSpec, diff, tunnels};
use linerate::tunnel::vtep::{Edit, EndpointConfig, Sample, VtepConfigError, overlay_mtu, parse};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tracing::{info, warn};

/// Work for a replica's thread, run between two rounds with its clock.
pub type Job = Box<dyn FnOnce(&mut Replica, Duration) + Send>;

/// One replica's share of a change: each edit with its new port's device
/// on that replica's queue.
type Share = Vec<(Edit, Option<Box<dyn Nic>>)>;

/// How long a replica may take to answer (it answers within a round, and
/// an idle one wakes every few tens of milliseconds).
const ANSWER: Duration = Duration::from_secs(5);

/// Connections served at once; more are told to come back.
const CONNECTIONS: usize = 8;

/// What the control side keeps of the running VTEP.
struct State {
    /// The configuration file as last read (its VNIs are the replicas').
    file: EndpointConfig,
    /// The configuration the replicas were built with (over AF_XDP, the
    /// interface's MAC and MTU): the ports' MTU comes from it.
    built: EndpointConfig,
    /// The tunnels the VTEP runs: those it started with and those VNIs of
    /// a new encapsulation or port added.
    tunnels: Vec<TunnelSpec>,
}

/// The tunnels `edits` add: VNIs of an encapsulation, port or outer
/// options no running tunnel has.
fn new_tunnels(state: &State, edits: &[Edit]) -> Vec<TunnelSpec> {
    let mut out: Vec<TunnelSpec> = Vec::new();
    for e in edits {
        if let Edit::AddVni(s) = e {
            let t = (s.encap.clone(), s.outer.clone());
            if !state.tunnels.contains(&t) && !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// The running VTEP, as the control socket, SIGHUP and the metrics see it.
pub struct Server {
    path: PathBuf,
    jobs: Vec<SyncSender<Job>>,
    state: Mutex<State>,
}

impl Server {
    /// The server of replicas reached through `jobs`, started from `file`
    /// (read from `path`) and built as `built`.
    pub fn new(
        path: PathBuf,
        file: EndpointConfig,
        built: EndpointConfig,
        jobs: Vec<SyncSender<Job>>,
    ) -> Server {
        let tunnels = tunnels(&file);
        Server {
            path,
            jobs,
            state: Mutex::new(State {
                file,
                built,
                tunnels,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on every replica between two of its rounds; their answers
    /// in queue order.
    fn on_all<R: Send + 'static>(
        &self,
        f: impl Fn(usize, &mut Replica, Duration) -> R + Send + Sync + 'static,
    ) -> Result<Vec<R>, CtlError> {
        let f = Arc::new(f);
        let mut answers = Vec::with_capacity(self.jobs.len());
        for (q, jobs) in self.jobs.iter().enumerate() {
            let (tx, rx) = sync_channel(1);
            let f = Arc::clone(&f);
            let job: Job = Box::new(move |r, now| {
                let _ = tx.send(f(q, r, now));
            });
            jobs.send(job).map_err(|_| gone(q))?;
            answers.push(rx);
        }
        answers
            .into_iter()
            .enumerate()
            .map(|(q, rx)| rx.recv_timeout(ANSWER).map_err(|_| gone(q)))
            .collect()
    }

    /// Every counter, summed over the replicas.
    pub fn samples(&self) -> Result<Vec<Sample>, CtlError> {
        Ok(Sample::merge(&self.on_all(|_, r, _| r.samples())?))
    }

    /// The first replica's FDB.
    pub fn fdb(&self) -> Result<Vec<FdbRecord>, CtlError> {
        let mut all = self.on_all(|_, r, now| r.vtep().dump(now))?;
        Ok(if all.is_empty() {
            Vec::new()
        } else {
            all.swap_remove(0)
        })
    }

    /// Serves one request line.
    pub fn handle(&self, line: &str) -> Reply {
        let req = match parse_request(line) {
            Ok(r) => r,
            Err(e) => return e.into(),
        };
        let r = match req.query() {
            Some(Query::Counters) => self.samples().map(|counters| Reply::Counters { counters }),
            Some(q) => self
                .on_all(move |_, r, now| control::answer(q, r.vtep(), now))
                .map(control::merge),
            None => self.change(&req),
        };
        r.unwrap_or_else(Reply::from)
    }

    fn change(&self, req: &Request) -> Result<Reply, CtlError> {
        if matches!(req, Request::Reload {}) {
            return self.reload().map(|edits| Reply::Done { edits });
        }
        let mut state = self.state();
        let running = self.running(&state)?;
        match edits(req, &running, &state.tunnels)? {
            Some(e) => {
                let new = new_tunnels(&state, &e);
                let done = self.apply(&state, &running, e)?;
                state.tunnels.extend(new);
                Ok(Reply::Done { edits: done })
            }
            None => Ok(Reply::Done { edits: Vec::new() }),
        }
    }

    /// The running configuration: the file's, with the replicas' VNIs.
    fn running(&self, state: &State) -> Result<EndpointConfig, CtlError> {
        let mut vnis = self.on_all(|_, r, _| r.vtep().config().vnis.clone())?;
        let mut running = state.file.clone();
        if !vnis.is_empty() {
            running.vnis = vnis.swap_remove(0);
        }
        Ok(running)
    }

    /// Reads the config file again and applies the difference; the edits
    /// made, or why nothing changed.
    pub fn reload(&self) -> Result<Vec<String>, CtlError> {
        let text = std::fs::read_to_string(&self.path).map_err(|e| CtlError::Failed {
            message: format!("{}: {e}", self.path.display()),
        })?;
        let new = parse(&text).map_err(|e| match e {
            VtepConfigError::Invalid(problems) => CtlError::Invalid { problems },
            VtepConfigError::Syntax(m) => CtlError::field(
                self.path.display().to_string(),
                m,
                "fix the TOML at the line and column shown",
            ),
        })?;
        let mut state = self.state();
        let running = self.running(&state)?;
        let e = diff(&running, &new, &state.tunnels)
            .map_err(|problems| CtlError::Invalid { problems })?;
        let tunnels = new_tunnels(&state, &e);
        let done = self.apply(&state, &running, e)?;
        state.tunnels.extend(tunnels);
        state.file = new;
        Ok(done)
    }

    /// [`Server::reload`], its outcome logged (for SIGHUP).
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(edits) if edits.is_empty() => info!("{why}: the config is unchanged"),
            Ok(edits) => {
                for e in edits {
                    info!("{why}: {e}");
                }
            }
            Err(CtlError::Invalid { problems }) => {
                warn!(
                    "{why}: {} refused, the running configuration is kept",
                    self.path.display()
                );
                for p in problems {
                    warn!("{why}: {p}");
                }
            }
            Err(e) => warn!("{why}: {e}"),
        }
    }

    /// Applies `edits` on every replica, in order; the edits made. New
    /// ports are created first (all or none).
    fn apply(
        &self,
        state: &State,
        running: &EndpointConfig,
        edits: Vec<Edit>,
    ) -> Result<Vec<String>, CtlError> {
        if edits.is_empty() {
            return Ok(Vec::new());
        }
        let queues = self.jobs.len();
        // Per edit, its new port's device: one NIC per queue.
        let mut devices: Vec<Vec<Option<Box<dyn Nic>>>> = Vec::with_capacity(edits.len());
        for e in &edits {
            let Edit::AddPort { vni, name } = e else {
                devices.push(Vec::new());
                continue;
            };
            let spec = edits
                .iter()
                .find_map(|e| match e {
                    Edit::AddVni(s) if s.id == *vni => Some(s),
                    _ => None,
                })
                .or_else(|| running.vnis.iter().find(|s| s.id == *vni));
            let Some(spec) = spec else {
                return Err(CtlError::Failed {
                    message: format!("{e}: VNI {vni} is not running"),
                });
            };
            // The underlay as built (over AF_XDP, the interface's MTU).
            let mtu = overlay_mtu(&state.built, spec);
            let q = u16::try_from(queues).unwrap_or(u16::MAX);
            let dev = open_tap(name, mtu, q, "port", state.built.tap_io_uring)
                .map_err(|message| CtlError::Failed { message })?;
            devices.push(dev.into_iter().map(Some).collect());
        }
        // devices[edit][queue], dealt out per queue.
        let mut per_queue: Vec<Share> = (0..queues)
            .map(|_| Vec::with_capacity(edits.len()))
            .collect();
        for (e, mut dev) in edits.into_iter().zip(devices) {
            for (q, list) in per_queue.iter_mut().enumerate() {
                let nic = dev.get_mut(q).and_then(Option::take);
                list.push((e.clone(), nic));
            }
        }
        let per_queue: Vec<Mutex<Option<Share>>> =
            per_queue.into_iter().map(|l| Mutex::new(Some(l))).collect();
        let per_queue = Arc::new(per_queue);
        let results = self.on_all(move |q, r, _| {
            let list = per_queue
                .get(q)
                .and_then(|m| m.lock().unwrap_or_else(PoisonError::into_inner).take())
                .unwrap_or_default();
            let mut done = Vec::new();
            for (e, nic) in list {
                match r.vtep_mut().apply(&e, nic) {
                    Ok(()) => done.push(e.to_string()),
                    Err(err) => return (done, Some(format!("{e}: {err}"))),
                }
            }
            (done, None)
        })?;
        let mut first = None;
        for (q, (done, err)) in results.into_iter().enumerate() {
            if let Some(e) = &err {
                warn!(queue = q, "{e}");
            }
            first.get_or_insert((done, err));
        }
        let (done, err) = first.unwrap_or_default();
        for d in &done {
            info!("applied: {d}");
        }
        match err {
            None => Ok(done),
            Some(message) => Err(CtlError::Refused {
                message: if done.is_empty() {
                    message
                } else {
                    format!("{message} (applied before it: {})", done.join("; "))
                },
            }),
        }
    }
}

fn gone(q: usize) -> CtlError {
    CtlError::Failed {
        message: format!("the thread of queue {q} did not answer: the VTEP is stopping"),
    }
}

/// The control socket: a Unix socket file, removed when this is dropped.
pub struct Socket {
    path: PathBuf,
    listener: UnixListener,
}

impl Socket {
    /// Binds `path` with mode 0600. A stale socket file (no VTEP answers on
    /// it) is replaced; a live one, or any other file, is not.
    pub fn bind(path: &Path) -> Result<Socket, String> {
        let at = || format!("control.socket = {:?}", path.display().to_string());
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                return Err(format!(
                    "{}: a file that is not a socket is there: remove it or pick another path",
                    at()
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "{}: another VTEP serves it: stop that one or pick another path",
                    at()
                ));
            }
            std::fs::remove_file(path).map_err(|e| format!("{}: {e}", at()))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| format!("{}: {e}", at()))?;
        // Only this user may connect (connecting needs write permission).
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", at()))?;
        Ok(Socket {
            path: path.to_owned(),
            listener,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections on a thread of their own each (at most
    /// [`CONNECTIONS`] at once), one request line after another.
    pub fn serve(&self, server: Arc<Server>) -> std::io::Result<()> {
        let listener = self.listener.try_clone()?;
        let open = Arc::new(AtomicUsize::new(0));
        std::thread::Builder::new()
            .name("vtep-ctl".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    if open.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS {
                        open.fetch_sub(1, Ordering::SeqCst);
                        let busy = Reply::from(CtlError::Failed {
                            message: format!(
                                "{CONNECTIONS} connections are open: close one and retry"
                            ),
                        });
                        let _ = write_reply(&mut conn, &busy);
                        continue;
                    }
                    let (server, open) = (Arc::clone(&server), Arc::clone(&open));
                    let spawned = std::thread::Builder::new()
                        .name("vtep-ctl-conn".into())
                        .spawn(move || {
                            connection(conn, &server);
                            open.fetch_sub(1, Ordering::SeqCst);
                        });
                    if spawned.is_err() {
                        warn!("control socket: no thread for a connection");
                    }
                }
            })?;
        Ok(())
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn write_reply(conn: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_string(reply).map_err(std::io::Error::other)?;
    line.push('\n');
    conn.write_all(line.as_bytes())
}

/// One client: a reply per request line, until it closes or idles a
/// minute. A line too long is answered and the connection closed (the rest
/// of it would be read as requests).
fn connection(conn: UnixStream, server: &Server) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let limit = u64::try_from(control::MAX_LINE + 2).unwrap_or(u64::MAX);
    let mut reader = BufReader::new(conn);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = buf.ends_with(b"\n");
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let reply = if complete || buf.len() < control::MAX_LINE {
            server.handle(line)
        } else {
            Reply::from(CtlError::field(
                ".",
                "a line longer than a request may be",
                format!("send a request of at most {} bytes", control::MAX_LINE),
            ))
        };
        if write_reply(&mut out, &reply).is_err() || !(complete || buf.len() < control::MAX_LINE) {
            return;
        }
    }
}
