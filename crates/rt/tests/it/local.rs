//! Tasks on the queue threads (`linerate_rt::local`): streams served without
//! leaving their thread, wake-ups from the thread itself and from others,
//! timers on the loop's clock, panics contained, tasks dropped at shutdown.
//!
//! The queue threads sleep up to a minute here when nothing wakes them, so a
//! lost wake-up shows as a hang that the test's own limit turns into a failure.

use crate::common;

use common::{mem_pair, pattern, two_runtimes_waiting};
use linerate_rt::local::{self, JoinHandle};
use linerate_rt::{Handle, Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::cell::{Cell, RefCell};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LONG_WAIT: Duration = Duration::from_secs(60);
const LIMIT: Duration = Duration::from_secs(30);

fn runtimes(queues: u16) -> (Runtime, Runtime) {
    two_runtimes_waiting(queues, LONG_WAIT)
}

/// Waits for `h` on a small executor of this thread, `LIMIT` at most.
fn join<T>(h: JoinHandle<T>) -> std::io::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(LIMIT, h)
            .await
            .expect("task finishes in time")
    })
}

fn server_addr(port: u16) -> SocketAddr {
    SocketAddr::new("10.0.0.2".parse().unwrap(), port)
}

/// A listener on `port` bound on `queue` of `h` from that queue's own thread.
fn listen_on(h: &Handle, queue: usize, port: u16) -> TcpListener {
    join(
        h.spawn_on(queue, move || async move {
            TcpListener::bind_on(&local::handle().unwrap(), queue, port).await
        })
        .unwrap(),
    )
    .unwrap()
    .unwrap()
}

/// The name of the thread of `queue`, as the runtime names it.
fn queue_thread(queue: usize) -> String {
    format!("linerate-q{queue}")
}

/// Checks that the caller runs on the thread of `queue`.
fn assert_on(queue: usize) {
    assert_eq!(local::queue(), Some(queue));
    assert_eq!(
        std::thread::current().name(),
        Some(queue_thread(queue).as_str())
    );
}

/// The echo server on queue `q`'s thread, its writer a second task there.
async fn serve(s: TcpStream, q: usize) {
    assert_on(q);
    assert_eq!(s.queue(), q, "RSS put the flow on the listener's queue");
    common::serve_echo(s, |w| {
        let h = local::spawn(w).unwrap();
        async { h.await.unwrap() }
    })
    .await;
    assert_on(q);
}

/// One echo client stream from queue `q`, its writer a second task there.
async fn client(rt: Handle, q: usize, id: u64, up: usize, down: usize) {
    assert_on(q);
    let s = TcpStream::connect_on(&rt, q, server_addr(7000))
        .await
        .unwrap();
    assert_eq!(s.queue(), q);
    common::echo_client(s, id, up, down, |w| {
        let h = local::spawn(w).unwrap();
        async { h.await.unwrap() }
    })
    .await;
}

#[test]
fn streams_opened_on_their_queue_carry_exact_bytes_without_leaving_its_thread() {
    const N: u64 = 24;
    let (crt, srt) = runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let mut servers = Vec::new();
    for q in 0..2 {
        // Bound from the queue's own thread; accepts there, serves there.
        let bound = sh
            .spawn_on(q, move || async move {
                assert_on(q);
                let rt = local::handle().unwrap();
                TcpListener::bind_on(&rt, q, 7000).await
            })
            .unwrap();
        let listener = join(bound).unwrap().unwrap();
        servers.push(
            sh.spawn_on(q, move || async move {
                let mut served = Vec::new();
                for _ in 0..N / 2 {
                    let (s, _) = listener.accept().await.unwrap();
                    served.push(local::spawn(serve(s, q)).unwrap());
                }
                for s in served {
                    s.await.unwrap();
                }
            })
            .unwrap(),
        );
    }
    let clients: Vec<_> = (0..N)
        .map(|id| {
            let q = (id % 2) as usize;
            ch.spawn_on(q, move || async move {
                let rt = local::handle().unwrap();
                let up = 20_000 + (id as usize * 7_919) % 300_000;
                let down = 10_000 + (id as usize * 104_729) % 300_000;
                client(rt, q, id, up, down).await;
            })
            .unwrap()
        })
        .collect();
    for c in clients {
        join(c).unwrap();
    }
    for s in servers {
        join(s).unwrap();
    }
    for q in 0..2 {
        let (c, s) = (ch.stats(q).unwrap(), sh.stats(q).unwrap());
        assert_eq!(
            (c.active_opens, s.passive_opens),
            (N / 2, N / 2),
            "queue {q}"
        );
        assert_eq!((c.task_panics, s.task_panics), (0, 0));
        assert!(c.task_polls > 0 && s.task_polls > 0);
        // The tasks read and wrote their engines directly, both ends.
        assert!(c.direct_io > 0 && s.direct_io > 0, "{c:?} {s:?}");
    }
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

#[test]
fn many_round_trips_between_tasks_on_queues_lose_no_wake_up() {
    const ROUNDS: u32 = 2_000;
    let (crt, srt) = runtimes(1);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = listen_on(&sh, 0, 7100);
    let echo = sh
        .spawn_on(0, move || async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut b = [0u8; 4];
            for _ in 0..ROUNDS {
                s.read_exact(&mut b).await.unwrap();
                let v = u32::from_le_bytes(b) + 1;
                s.write_all(&v.to_le_bytes()).await.unwrap();
            }
        })
        .unwrap();
    let pinger = ch
        .spawn_on(0, || async {
            let rt = local::handle().unwrap();
            let mut s = TcpStream::connect_on(&rt, 0, server_addr(7100))
                .await
                .unwrap();
            let mut b = [0u8; 4];
            for i in 0..ROUNDS {
                s.write_all(&(2 * i).to_le_bytes()).await.unwrap();
                s.read_exact(&mut b).await.unwrap();
                assert_eq!(u32::from_le_bytes(b), 2 * i + 1);
            }
            ROUNDS
        })
        .unwrap();
    assert_eq!(join(pinger).unwrap(), ROUNDS);
    join(echo).unwrap();
}

#[test]
fn wake_ups_from_other_threads_reach_tasks_on_a_queue() {
    let (crt, _srt) = runtimes(2);
    let h = crt.handle().clone();
    for q in 0..2 {
        let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
        let task = h
            .spawn_on(q, move || async move {
                assert_on(q);
                rx.await.unwrap() * 2
            })
            .unwrap();
        // Sent from this thread once the task sleeps on it: the queue thread,
        // itself asleep for up to a minute, must be woken to poll it.
        std::thread::sleep(Duration::from_millis(50));
        tx.send(21 + q as u64).unwrap();
        assert_eq!(join(task).unwrap(), 42 + 2 * q as u64);
    }
}

#[test]
fn local_tasks_need_not_be_send_and_a_panic_stays_in_its_task() {
    let (crt, _srt) = runtimes(1);
    let h = crt.handle().clone();
    let out = h
        .spawn_on(0, || async {
            // Rc and Cell: neither Send nor Sync, shared by three tasks.
            let seen = Rc::new(Cell::new(0u32));
            let mut tasks = Vec::new();
            for i in 1..=3 {
                let seen = Rc::clone(&seen);
                tasks.push(
                    local::spawn(async move {
                        local::sleep(Duration::from_millis(u64::from(i))).await;
                        seen.set(seen.get() + i);
                    })
                    .unwrap(),
                );
            }
            for t in tasks {
                t.await.unwrap();
            }
            seen.get()
        })
        .unwrap();
    assert_eq!(join(out).unwrap(), 6);

    let boom = h
        .spawn_on(0, || async {
            local::sleep(Duration::from_millis(1)).await;
            panic!("a task panics on purpose");
        })
        .unwrap();
    let err = join::<()>(boom).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Interrupted);
    // The queue goes on: tasks and streams still run.
    let after = h.spawn_on(0, || async { local::queue() }).unwrap();
    assert_eq!(join(after).unwrap(), Some(0));
    // Published once the round that dropped it ends: look after another.
    join(h.spawn_on(0, || async {}).unwrap()).unwrap();
    assert_eq!(h.stats(0).unwrap().task_panics, 1);

    // Outside a queue thread there is no local executor; a missing queue is
    // refused.
    assert_eq!(
        local::spawn(async {}).unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(local::queue(), None);
    assert!(local::handle().is_none());
    assert_eq!(
        h.spawn_on(2, || async {}).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn sleeps_and_timeouts_follow_the_loop_clock() {
    let (crt, _srt) = runtimes(1);
    let h = crt.handle().clone();
    let order = h
        .spawn_on(0, || async {
            let done = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            // Registered out of order; they end in order of their times.
            for ms in [40u64, 10, 30, 20] {
                let done = Rc::clone(&done);
                tasks.push(
                    local::spawn(async move {
                        let t = Instant::now();
                        local::sleep(Duration::from_millis(ms)).await;
                        assert!(t.elapsed() >= Duration::from_millis(ms));
                        done.borrow_mut().push(ms);
                    })
                    .unwrap(),
                );
            }
            for t in tasks {
                t.await.unwrap();
            }
            let t = Instant::now();
            let never = std::future::pending::<()>();
            let timed_out = local::timeout(Duration::from_millis(15), never).await;
            assert_eq!(timed_out.unwrap_err().kind(), ErrorKind::TimedOut);
            assert!(t.elapsed() >= Duration::from_millis(15));
            let quick = local::timeout(Duration::from_secs(10), async { 7 }).await;
            assert_eq!(quick.unwrap(), 7);
            done.take()
        })
        .unwrap();
    assert_eq!(join(order).unwrap(), vec![10, 20, 30, 40]);

    // Timeouts whose future wins leave their entries behind; the queue clears
    // them out rather than keeping 20,000 until they fall due in an hour.
    let many = h
        .spawn_on(0, || async {
            for i in 0..20_000u32 {
                // Pending once (so the timeout arms its timer), then ready.
                let mut yielded = false;
                let once = std::future::poll_fn(move |cx| {
                    if yielded {
                        std::task::Poll::Ready(i)
                    } else {
                        yielded = true;
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    }
                });
                let v = local::timeout(Duration::from_secs(3600), once).await;
                assert_eq!(v.unwrap(), i);
            }
        })
        .unwrap();
    join(many).unwrap();
    join(h.spawn_on(0, || async {}).unwrap()).unwrap();
    let timers = h.stats(0).unwrap().timers;
    assert!(timers < 1_000, "{timers} timers held");

    // Off a queue thread (here tokio's), one shared timer thread keeps the
    // time, however many sleeps wait (not a thread each).
    let threads = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .unwrap()
            .trim()
            .parse::<usize>()
            .unwrap()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let before = threads();
        let mut sleeps: Vec<_> = (0..300)
            .map(|_| Box::pin(local::sleep(Duration::from_secs(3600))))
            .collect();
        std::future::poll_fn(|cx| {
            for s in &mut sleeps {
                assert!(s.as_mut().poll(cx).is_pending());
            }
            std::task::Poll::Ready(())
        })
        .await;
        // Other tests of this binary start threads meanwhile: far fewer.
        let after = threads();
        assert!(after < before + 100, "{before} -> {after} threads");
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let t = Instant::now();
    rt.block_on(local::sleep(Duration::from_millis(20)));
    assert!(t.elapsed() >= Duration::from_millis(20));
}

#[test]
fn stopping_the_runtime_drops_its_tasks_and_fails_their_handles() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (crt, srt) = runtimes(2);
    let h = crt.handle().clone();
    let dropped = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&dropped);
    let forever = h
        .spawn_on(1, move || async move {
            let _flag = Flag(d);
            std::future::pending::<()>().await;
        })
        .unwrap();
    // A stream held by a task at shutdown fails like every other.
    let listener = join(
        srt.handle()
            .spawn_on(0, || async {
                TcpListener::bind(&local::handle().unwrap(), 7200).await
            })
            .unwrap(),
    )
    .unwrap()
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = h
        .spawn_on(0, move || async move {
            let rt = local::handle().unwrap();
            let mut s = TcpStream::connect_on(&rt, 0, server_addr(7200))
                .await
                .unwrap();
            tx.send(()).unwrap();
            let mut b = [0u8; 1];
            s.read(&mut b).await
        })
        .unwrap();
    rx.recv_timeout(LIMIT).unwrap();
    crt.shutdown().unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the task was dropped");
    assert_eq!(join(forever).unwrap_err().kind(), ErrorKind::Interrupted);
    // The reading task was dropped too (its read never finished).
    assert_eq!(join(reader).unwrap_err().kind(), ErrorKind::Interrupted);
    assert_eq!(
        h.spawn_on(0, || async {}).unwrap_err().kind(),
        ErrorKind::NotConnected
    );
    drop(listener);
}

/// The CPUs the calling thread may run on, read from `/proc` (independent of
/// the runtime's own call).
fn cpus_allowed_of_this_thread() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

#[test]
fn queue_threads_run_on_the_cpus_they_are_pinned_to() {
    use linerate_rt::{RtError, RuntimeConfig};
    use linerate_toe::sim::Sim;
    let allowed = cpus_allowed_of_this_thread();
    let last = *allowed.last().unwrap();
    let (a, b) = common::mem_pair(2);
    let cfg = RuntimeConfig {
        cpus: vec![last],
        ..RuntimeConfig::new(Sim::host_config(1))
    };
    let rt = Runtime::start(a, cfg).unwrap();
    for q in 0..2 {
        let on = join(
            rt.handle()
                .spawn_on(q, || async { cpus_allowed_of_this_thread() })
                .unwrap(),
        )
        .unwrap();
        assert_eq!(on, vec![last], "queue {q}");
    }
    rt.shutdown().unwrap();
    // A CPU the process may not use is refused before any thread starts.
    let cfg = RuntimeConfig {
        cpus: vec![last, 1 << 20],
        ..RuntimeConfig::new(Sim::host_config(2))
    };
    match Runtime::start(b, cfg) {
        Err(RtError::Cpu { cpu }) => assert_eq!(cpu, 1 << 20),
        other => panic!("want RtError::Cpu, got {other:?}"),
    }
}

thread_local! {
    /// Set by `mark` on the thread that runs it.
    static MARKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn mark() {
    MARKED.with(|m| m.set(true));
}

/// `RuntimeConfig::on_thread_start` runs on every queue thread before its
/// tasks do (as an LD_PRELOAD interposer marks its own threads), and
/// nowhere else.
#[test]
fn on_thread_start_runs_first_on_each_queue_thread() {
    use linerate_rt::RuntimeConfig;
    use linerate_toe::sim::Sim;
    let (a, _b) = common::mem_pair(2);
    let cfg = RuntimeConfig {
        on_thread_start: Some(mark),
        ..RuntimeConfig::new(Sim::host_config(1))
    };
    let rt = Runtime::start(a, cfg).unwrap();
    for q in 0..2 {
        let marked = join(
            rt.handle()
                .spawn_on(q, || async { MARKED.with(std::cell::Cell::get) })
                .unwrap(),
        )
        .unwrap();
        assert!(marked, "queue {q}'s thread did not run it");
    }
    assert!(!MARKED.with(std::cell::Cell::get), "it ran on the caller");
    rt.shutdown().unwrap();
}

#[test]
fn a_stream_read_on_its_queue_then_elsewhere_loses_no_byte() {
    const LEN: usize = 3 << 20;
    let (crt, srt) = runtimes(1);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = listen_on(&sh, 0, 7300);
    // The server's task reads the first part on the queue thread (straight
    // from the engine), then hands the stream to this thread.
    let first = sh
        .spawn_on(0, move || async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; LEN / 3];
            s.read_exact(&mut head).await.unwrap();
            (s, head)
        })
        .unwrap();
    let writer = ch
        .spawn_on(0, || async {
            let rt = local::handle().unwrap();
            let mut s = TcpStream::connect_on(&rt, 0, server_addr(7300))
                .await
                .unwrap();
            for chunk in pattern(9, LEN).chunks(100_003) {
                s.write_all(chunk).await.unwrap();
            }
            s.shutdown().await.unwrap();
            let mut b = [0u8; 1];
            let _ = local::timeout(LIMIT, s.read(&mut b)).await;
        })
        .unwrap();
    let (mut s, mut got) = join(first).unwrap();
    let direct = sh.stats(0).unwrap().direct_io;
    assert!(direct > 0, "the first part was read on the queue thread");
    // The rest from a tokio task on this thread: the queue stages again.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(LIMIT, s.read_to_end(&mut got))
            .await
            .expect("the rest arrives")
            .unwrap();
    });
    drop(s);
    assert_eq!(got.len(), LEN);
    assert!(got == pattern(9, LEN), "bytes differ");
    join(writer).unwrap();
}

#[test]
fn udp_sockets_bound_on_a_queue_echo_through_their_engines_directly() {
    use linerate_rt::UdpSocket;
    const N: usize = 500;
    let (crt, srt) = runtimes(1);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let server_sock = join(
        sh.spawn_on(0, || async {
            let rt = local::handle().unwrap();
            UdpSocket::bind_on(&rt, 0, "10.0.0.2:5300".parse().unwrap()).await
        })
        .unwrap(),
    )
    .unwrap()
    .unwrap();
    let echo = sh
        .spawn_on(0, move || async move {
            let mut buf = vec![0u8; 2048];
            for _ in 0..N {
                let (n, from) = server_sock.recv_from(&mut buf).await.unwrap();
                server_sock.send_to(&buf[..n], from).await.unwrap();
            }
        })
        .unwrap();
    let client = ch
        .spawn_on(0, || async {
            let rt = local::handle().unwrap();
            let s = UdpSocket::bind_on(&rt, 0, "10.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            let server: SocketAddr = "10.0.0.2:5300".parse().unwrap();
            // Longer than the path MTU allows: refused at once (no staging
            // queue to report it from a later send).
            let err = s.send_to(&[0u8; 4000], server).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            let mut buf = vec![0u8; 2048];
            for i in 0..N {
                let len = 1 + (i * 131) % 1400;
                let msg = pattern(i as u64, len);
                // One in flight at a time: the memory wire loses nothing,
                // so every datagram comes back.
                s.send_to(&msg, server).await.unwrap();
                let (n, from) = local::timeout(LIMIT, s.recv_from(&mut buf))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(from, server);
                assert_eq!(&buf[..n], &msg[..], "datagram {i}");
            }
            N
        })
        .unwrap();
    assert_eq!(join(client).unwrap(), N);
    join(echo).unwrap();
    assert!(ch.stats(0).unwrap().direct_io > 0 && sh.stats(0).unwrap().direct_io > 0);
    // A queue the runtime does not have.
    let e = join(
        ch.spawn_on(0, || async {
            UdpSocket::bind_on(&local::handle().unwrap(), 3, "10.0.0.1:0".parse().unwrap())
                .await
                .map(|_| ())
        })
        .unwrap(),
    )
    .unwrap()
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

#[test]
fn engine_calls_from_a_task_on_its_queue_run_in_place() {
    let (crt, _srt) = runtimes(2);
    let h = crt.handle().clone();
    let got = join(
        h.spawn_on(1, || async {
            let rt = local::handle().unwrap();
            // Both would wait on a command this very thread has to run: the
            // blocking one forever. On the queue's thread they run in place.
            let a = rt.with_engine(1, |e| e.config().mac).await.unwrap();
            let b = rt.with_engine_blocking(1, |e| e.config().mac).unwrap();
            // Another queue's engine goes through its command channel.
            let c = rt.with_engine(0, |e| e.config().mac).await.unwrap();
            (a, b, c)
        })
        .unwrap(),
    )
    .unwrap();
    assert_eq!(got.0, got.1);
    assert_eq!(got.0, got.2);
}

/// User plus system CPU, in clock ticks, of this process's threads whose
/// names start with `prefix` (`/proc/self/task/*/stat`): the test's own queue
/// threads, not the other tests running beside it.
fn cpu_ticks(prefix: &str) -> u64 {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(s) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        if !s[open + 1..close].starts_with(prefix) {
            continue;
        }
        let f: Vec<&str> = s[close + 2..].split_whitespace().collect();
        // Fields 14 and 15 of stat; the slice starts at field 3.
        ticks += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    ticks
}

#[test]
fn a_timer_left_behind_by_a_finished_task_does_not_keep_the_queue_busy() {
    let (a, _b) = mem_pair(1);
    let cfg = RuntimeConfig {
        thread_name: "lr-idletmr-q".into(),
        max_wait: LONG_WAIT,
        ..RuntimeConfig::new(Sim::host_config(1))
    };
    let crt = Runtime::start(a, cfg).unwrap();
    let h = crt.handle().clone();
    join(
        h.spawn_on(0, || async {
            // Done at once; the 200 ms timer of the timeout stays in the heap.
            local::timeout(
                Duration::from_millis(200),
                local::sleep(Duration::from_millis(10)),
            )
            .await
            .unwrap();
        })
        .unwrap(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // The queue thread, with nothing to do, sleeps: a spinning loop (its
    // deadline stuck at the past timer's) would use about 100 ticks here.
    let t0 = cpu_ticks("lr-idletmr-q");
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks("lr-idletmr-q") - t0;
    assert!(used < 30, "{used} ticks of CPU in an idle second");
    assert_eq!(h.stats(0).unwrap().timers, 0);
}

#[test]
fn connections_past_the_backlog_reach_a_local_acceptor() {
    use linerate_rt::RuntimeConfig;
    use linerate_toe::sim::Sim;
    const N: usize = 8;
    let s = common::steering(1);
    let (a, b) = common::mem_pair(1);
    // One connection waits in the listener at a time: the others are moved by
    // the sweep after the acceptor ran, whose wake-up must not wait a minute.
    let cfg = |i: u8| RuntimeConfig {
        steering: Some(Arc::clone(&s)),
        seed: u64::from(i),
        max_wait: LONG_WAIT,
        accept_backlog: 1,
        ..RuntimeConfig::new(Sim::host_config(i))
    };
    let crt = Runtime::start(common::RssWire::new(a, Arc::clone(&s)), cfg(1)).unwrap();
    let srt = Runtime::start(common::RssWire::new(b, Arc::clone(&s)), cfg(2)).unwrap();
    let sh = srt.handle().clone();
    let listener = listen_on(&sh, 0, 7400);
    let acceptor = sh
        .spawn_on(0, move || async move {
            let mut held = Vec::new();
            for _ in 0..N {
                held.push(listener.accept().await.unwrap().0);
            }
            held.len()
        })
        .unwrap();
    let ch = crt.handle().clone();
    for _ in 0..N {
        ch.spawn_on(0, || async {
            let rt = local::handle().unwrap();
            let _s = TcpStream::connect_on(&rt, 0, server_addr(7400))
                .await
                .unwrap();
            local::sleep(Duration::from_secs(20)).await;
        })
        .unwrap();
    }
    assert_eq!(join(acceptor).unwrap(), N);
}

#[test]
fn a_local_udp_sender_that_fills_its_send_queue_is_woken() {
    use linerate_rt::UdpSocket;
    for size in [1400usize, 1024] {
        let (crt, srt) = runtimes(1);
        // A receiver nobody reads: nothing comes back to the sender.
        let _sink = join(
            srt.handle()
                .spawn_on(0, || async {
                    let rt = local::handle().unwrap();
                    UdpSocket::bind_on(&rt, 0, "10.0.0.2:5400".parse().unwrap()).await
                })
                .unwrap(),
        )
        .unwrap()
        .unwrap();
        // 2,000 datagrams through a 256 KiB send queue: the sender waits for
        // room many times (1024 B fills it exactly), and room appears only
        // when the queue transmits.
        let sender = crt
            .handle()
            .spawn_on(0, move || async move {
                let rt = local::handle().unwrap();
                let s = UdpSocket::bind_on(&rt, 0, "10.0.0.1:0".parse().unwrap())
                    .await
                    .unwrap();
                let to: SocketAddr = "10.0.0.2:5400".parse().unwrap();
                for _ in 0..2_000 {
                    s.send_to(&vec![7u8; size], to).await.unwrap();
                }
            })
            .unwrap();
        join(sender).unwrap();
    }
}
