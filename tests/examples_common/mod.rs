//! Running the examples as a user does: the binary cargo builds from
//! `examples/`, started with flags, its output read line by line.
//!
//! [`example`] asks cargo for the binary (`cargo build --profile test
//! --example NAME`, with this test's features: a full `cargo test` has built
//! it already, so this only checks it is fresh; `cargo test --test NAME` builds
//! it here). [`Running`] is a started example that is killed when dropped, so a
//! failing test leaves no process behind.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// One cargo build at a time: they would wait for each other's lock anyway.
static BUILD: Mutex<()> = Mutex::new(());

/// The examples this test process has built (or found fresh) already: a
/// second `cargo build` of the same example would only take cargo a second
/// to say so.
static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());

/// The path of example `name`, built if it is missing or stale (once per
/// test process).
pub fn example(name: &str) -> PathBuf {
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    // This test runs from <target>/<profile dir>/deps/; examples live beside.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("<target>/<profile>/deps");
    let target = profile_dir.parent().expect("<target>");
    let mut features = Vec::new();
    if cfg!(feature = "system-tests") {
        features.push("system-tests");
    }
    if cfg!(feature = "af-xdp") {
        features.push("af-xdp");
    }
    let profile = if profile_dir.ends_with("release") {
        "release"
    } else {
        "test"
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--profile", profile, "--example", name])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .arg("--target-dir")
        .arg(target);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build --example {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = profile_dir.join("examples").join(name);
    assert!(path.exists(), "{} after the build", path.display());
    built.push((name.to_owned(), path.clone()));
    path
}

/// A started example: its stdout as lines, killed when dropped.
pub struct Running {
    name: String,
    child: Child,
    lines: Receiver<String>,
    /// Every line read so far (stdout, then stderr as the process ends).
    pub seen: Vec<String>,
}

impl Running {
    /// Starts `cmd` (an example, or a wrapper such as `ip netns exec` that
    /// execs one) with its stdout and stderr read by this side.
    pub fn start(name: &str, mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx2.send(format!("stderr: {line}"));
            }
        });
        Running {
            name: name.to_owned(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to `limit` for a line containing `text`; panics with what the
    /// example said otherwise.
    pub fn expect_line(&mut self, text: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{}: no line with {text:?} in {limit:?}: {:?}",
                        self.name, self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    panic!(
                        "{}: ended ({status:?}) without a line with {text:?}: {:?}",
                        self.name, self.seen
                    )
                }
            }
        }
    }

    /// The process's id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines printed within `limit` from now.
    pub fn lines_for(&mut self, limit: Duration) -> Vec<String> {
        let end = Instant::now() + limit;
        let mut out = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            out.push(line);
        }
        out
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the process to end; panics (after killing it)
    /// if it does not.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.drain();
                return status;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.drain();
                panic!(
                    "{}: still running after {limit:?}: {:?}",
                    self.name, self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The lines the readers still hold.
    fn drain(&mut self) {
        // The readers end with the process's pipes; give them a moment.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only the child this guard started, by its own id.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs example `name` with `args` to its end (at most `limit`); returns its
/// exit status and every line it printed.
pub fn run(name: &str, args: &[&str], limit: Duration) -> (ExitStatus, Vec<String>) {
    let mut cmd = Command::new(example(name));
    cmd.args(args);
    let mut r = Running::start(name, cmd);
    let status = r.wait(limit);
    (status, std::mem::take(&mut r.seen))
}
