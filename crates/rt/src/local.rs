//! Tasks on the queue threads: thread per core.
//!
//! With the tokio adaptor alone, a stream's application task runs on an
//! executor thread and its connection on a queue thread, so every batch of
//! bytes crosses threads twice: the task wakes the queue thread to send, the
//! queue thread wakes the task when bytes arrive or room frees up. Each
//! crossing is a sleep and a wake-up once the threads outnumber the cores.
//!
//! A task spawned onto a queue ([`Handle::spawn_on`], or [`spawn`] from a task
//! already there) runs on that queue's thread, between the loop's rounds:
//! after the sweep that moves received bytes into the streams' staging rings
//! and before the sweep that hands written bytes to the engine and transmits.
//! Waking it from its own queue pushes it on a thread-local list (no lock, no
//! system call); a wake-up from another thread takes the queue's injection lock
//! and wakes the queue thread. Streams opened from the task on its own queue
//! ([`crate::TcpStream::connect_on`] with [`queue`], [`crate::TcpListener::bind_on`])
//! then never leave the thread: one thread per queue serves the wire, the
//! engine and the application, as in Seastar or a DPDK run-to-completion loop.
//! Their reads and writes go straight to the engine's buffers (the queue lends
//! its engine to the tasks while they run): one copy each way, none through
//! the staging rings. A stream read from elsewhere later is staged again.
//!
//! Tasks need not be `Send` (they never move); what builds them must be, when
//! it comes from another thread. A queue thread has no tokio reactor: use
//! [`sleep`] and [`timeout`] (the queue loop's clock) for timers there. A task
//! that panics is dropped and its [`JoinHandle`] fails; the queue goes on.
//!
//! ```
//! use linerate_nic::{MemNic, NicCaps};
//! use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream, local};
//! use linerate_toe::Config;
//! use std::net::Ipv4Addr;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
//! let host = |i: u8| Config::new([2, 0, 0, 0, 0, i]).with_ipv4(Ipv4Addr::new(10, 0, 0, i), 24);
//! let client = Runtime::start(a, RuntimeConfig::new(host(1)))?;
//! let server = Runtime::start(b, RuntimeConfig::new(host(2)))?;
//!
//! let wait = tokio::runtime::Builder::new_current_thread().build()?;
//!
//! // The server listens on its queue 0, from that queue's thread; its accept
//! // loop and the echo run there too.
//! let bound = server.handle().spawn_on(0, || async {
//!     let rt = local::handle().expect("on a queue thread");
//!     TcpListener::bind_on(&rt, 0, 7).await
//! })?;
//! let listener = wait.block_on(bound)??;
//! server.handle().spawn_on(0, move || async move {
//!     let (mut s, _) = listener.accept().await?;
//!     let mut buf = Vec::new();
//!     s.read_to_end(&mut buf).await?;
//!     s.write_all(&buf).await
//! })?;
//! // The client runs on its queue 0 and hands its answer back to this thread.
//! let answer = client.handle().spawn_on(0, || async {
//!     let rt = local::handle().expect("on a queue thread");
//!     let mut c = TcpStream::connect_on(&rt, 0, "10.0.0.2:7".parse().unwrap()).await?;
//!     c.write_all(b"ping").await?;
//!     c.shutdown().await?;
//!     let mut back = Vec::new();
//!     local::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut back)).await??;
//!     std::io::Result::Ok(back)
//! })?;
//! let back = wait.block_on(answer)??;
//! assert_eq!(back, b"ping");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::runtime::{Handle, Wake as QueueWake};
use crate::shared::lock;
use linerate_toe::{Engine, Instant};
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::sync::oneshot;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;
type Builder = Box<dyn FnOnce() -> LocalFuture + Send>;

/// What other threads hand a queue: tasks to build, tasks they woke.
#[derive(Default)]
struct Injected {
    /// The queue thread has stopped: nothing more is taken.
    closed: bool,
    spawned: Vec<Builder>,
    woken: Vec<Arc<Header>>,
}

/// The part of a queue's executor other threads reach.
pub(crate) struct Remote {
    injected: Mutex<Injected>,
    /// Something was injected since the queue thread last looked (so the
    /// thread takes the lock only then).
    pending: AtomicBool,
    /// Wakes the queue thread.
    wake: QueueWake,
}

impl core::fmt::Debug for Remote {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Remote").finish_non_exhaustive()
    }
}

impl Remote {
    pub(crate) fn new(wake: QueueWake) -> Remote {
        Remote {
            injected: Mutex::new(Injected::default()),
            pending: AtomicBool::new(false),
            wake,
        }
    }

    fn wake_thread(&self) {
        self.wake.kick();
    }

    /// Queues `build` for the queue thread; false once the queue has stopped.
    fn spawn(&self, build: Builder) -> bool {
        {
            let mut inj = lock(&self.injected);
            if inj.closed {
                return false;
            }
            inj.spawned.push(build);
            self.pending.store(true, Ordering::Release);
        }
        self.wake_thread();
        true
    }
}

/// A task's identity, shared with its wakers.
struct Header {
    /// Its slot in the executor's table.
    slot: usize,
    /// On a ready list already.
    queued: AtomicBool,
    /// Finished or dropped: wake-ups are ignored.
    done: AtomicBool,
    remote: Arc<Remote>,
}

impl Wake for Header {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.done.load(Ordering::Acquire) || self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        // `try_with`: a wake-up while the thread's locals are being torn
        // down (a waker dropped or called at thread exit) goes the remote way.
        let mine = CURRENT
            .try_with(|c| match &*c.borrow() {
                Some(ctx) if Arc::ptr_eq(&ctx.remote, &self.remote) => {
                    ctx.ready.borrow_mut().push_back(Arc::clone(self));
                    true
                }
                _ => false,
            })
            .unwrap_or(false);
        if !mine {
            let pushed = {
                let mut inj = lock(&self.remote.injected);
                if !inj.closed {
                    inj.woken.push(Arc::clone(self));
                    self.remote.pending.store(true, Ordering::Release);
                }
                !inj.closed
            };
            if pushed {
                self.remote.wake_thread();
            }
        }
    }
}

/// A timer of [`sleep`]: due time (on a loop's clock or the wall clock),
/// order of registration, whom to wake. Ordered by time, then registration.
struct Entry<T> {
    due: T,
    seq: u64,
    shared: Arc<TimerShared>,
}

impl<T: Ord> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        (&self.due, self.seq) == (&o.due, o.seq)
    }
}
impl<T: Ord> Eq for Entry<T> {}
impl<T: Ord> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T: Ord> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        (&self.due, self.seq).cmp(&(&o.due, o.seq))
    }
}

/// A timer of a queue loop (its clock).
type Timer = Entry<Instant>;

/// A sleep off the queue threads, on the shared timer thread.
type WallTimer = Entry<std::time::Instant>;

/// What tasks on a queue thread reach through the thread-local context.
struct Ctx {
    queue: usize,
    handle: Handle,
    remote: Arc<Remote>,
    epoch: std::time::Instant,
    ready: RefCell<VecDeque<Arc<Header>>>,
    /// Spawned by tasks of this thread during a round; placed after it.
    spawned: RefCell<Vec<LocalFuture>>,
    timers: RefCell<BinaryHeap<Reverse<Timer>>>,
    seq: Cell<u64>,
    /// Reads and writes of streams served straight from and into the engine.
    direct: Cell<u64>,
    /// Sleeps dropped before they were due (their entries wait in `timers`).
    canceled: Cell<usize>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Ctx>>> = const { RefCell::new(None) };
}

// The queue's engine, lent while the tasks of its thread run.
scoped_tls::scoped_thread_local!(static ENGINE: RefCell<Engine>);

/// Whether the caller runs on the thread of `queue` of `rt`.
pub(crate) fn on_queue(rt: &Handle, queue: usize) -> bool {
    current().is_some_and(|ctx| ctx.queue == queue && Arc::ptr_eq(&ctx.handle.inner, &rt.inner))
}

/// Runs `f` on the engine of `queue` of `rt` if the caller is a task on that
/// queue's thread (and the engine is not borrowed already); `None` otherwise.
pub(crate) fn with_engine<R>(
    rt: &Handle,
    queue: usize,
    f: impl FnOnce(&mut Engine) -> R,
) -> Option<R> {
    if !ENGINE.is_set() {
        return None;
    }
    let ctx =
        current().filter(|ctx| ctx.queue == queue && Arc::ptr_eq(&ctx.handle.inner, &rt.inner))?;
    let r = ENGINE.with(|e| e.try_borrow_mut().ok().map(|mut e| f(&mut e)))?;
    ctx.direct.set(ctx.direct.get() + 1);
    Some(r)
}

/// The context of the queue thread running the caller (none elsewhere, nor
/// while the thread's locals are torn down).
fn current() -> Option<Rc<Ctx>> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

/// The queue whose thread runs the caller, if it runs on a queue thread.
pub fn queue() -> Option<usize> {
    current().map(|c| c.queue)
}

/// The runtime whose queue thread runs the caller, if any.
pub fn handle() -> Option<Handle> {
    current().map(|c| c.handle.clone())
}

/// Spawns `fut` on the caller's queue thread (it need not be `Send`).
///
/// Errors: `Unsupported` when the caller does not run on a queue thread (use
/// [`Handle::spawn_on`] there).
pub fn spawn<F>(fut: F) -> io::Result<JoinHandle<F::Output>>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let Some(ctx) = current() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "local::spawn called outside a linerate queue thread",
        ));
    };
    let (tx, rx) = oneshot::channel();
    ctx.spawned.borrow_mut().push(Box::pin(async move {
        let _ = tx.send(fut.await);
    }));
    Ok(JoinHandle { rx })
}

impl Handle {
    /// Runs the future `build` returns as a task on `queue`'s thread: `build`
    /// runs there, so the future need not be `Send`. The task runs until it
    /// finishes or the runtime stops (then it is dropped).
    ///
    /// Errors: `NotFound` for a queue the runtime does not have,
    /// `NotConnected` once the runtime has stopped.
    pub fn spawn_on<B, F>(&self, queue: usize, build: B) -> io::Result<JoinHandle<F::Output>>
    where
        B: FnOnce() -> F + Send + 'static,
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        let remote = self.remote(queue)?;
        let (tx, rx) = oneshot::channel();
        let build: Builder = Box::new(move || {
            let fut = build();
            Box::pin(async move {
                let _ = tx.send(fut.await);
            })
        });
        if !remote.spawn(build) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the linerate runtime has stopped",
            ));
        }
        Ok(JoinHandle { rx })
    }
}

/// The output of a task on a queue thread: awaited from anywhere.
///
/// Fails (`Interrupted`) when the task was dropped before it finished: the
/// runtime stopped, or the task panicked. Dropping the handle does not stop the
/// task.
#[derive(Debug)]
pub struct JoinHandle<T> {
    rx: oneshot::Receiver<T>,
}

impl<T> Future for JoinHandle<T> {
    type Output = io::Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        Pin::new(&mut self.rx).poll(cx).map_err(|_| {
            io::Error::new(
                io::ErrorKind::Interrupted,
                "the task was dropped before it finished (runtime stopped or task panicked)",
            )
        })
    }
}

/// Waits `d`. On a queue thread the loop wakes the task when due (its timers
/// set the loop's deadline); elsewhere (any other executor) one shared timer
/// thread does.
pub fn sleep(d: Duration) -> Sleep {
    Sleep {
        d,
        due: None,
        armed: None,
    }
}

/// What a registered timer and its [`Sleep`] share: whom to wake (the latest
/// poller), and whether the sleep still waits (a dropped one is skipped, and
/// the loop clears such entries out when they pile up).
#[derive(Debug)]
struct TimerShared {
    live: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl TimerShared {
    fn fire(&self) {
        if self.live.load(Ordering::Acquire)
            && let Some(w) = lock(&self.waker).take()
        {
            w.wake();
        }
    }

    fn set_waker(&self, w: &Waker) {
        let mut slot = lock(&self.waker);
        match &*slot {
            Some(old) if old.will_wake(w) => {}
            _ => *slot = Some(w.clone()),
        }
    }
}

/// The future of [`sleep`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    d: Duration,
    /// Set at the first poll: when it is due.
    due: Option<std::time::Instant>,
    /// Registered with a queue loop's timers or the shared timer thread.
    armed: Option<Arc<TimerShared>>,
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(t) = &self.armed
            && t.live.swap(false, Ordering::AcqRel)
            && let Some(ctx) = current()
        {
            ctx.canceled.set(ctx.canceled.get() + 1);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let d = self.d;
        let due = *self
            .due
            .get_or_insert_with(|| std::time::Instant::now() + d);
        if std::time::Instant::now() >= due {
            if let Some(t) = &self.armed {
                t.live.store(false, Ordering::Release);
            }
            return Poll::Ready(());
        }
        if let Some(t) = &self.armed {
            t.set_waker(cx.waker());
            return Poll::Pending;
        }
        let shared = Arc::new(TimerShared {
            live: AtomicBool::new(true),
            waker: Mutex::new(Some(cx.waker().clone())),
        });
        match current() {
            Some(ctx) => {
                // On the loop's clock (nanoseconds since the runtime's epoch).
                let at = Instant::from_nanos(
                    u64::try_from(due.saturating_duration_since(ctx.epoch).as_nanos())
                        .unwrap_or(u64::MAX),
                );
                let seq = ctx.seq.get();
                ctx.seq.set(seq + 1);
                ctx.timers.borrow_mut().push(Reverse(Timer {
                    due: at,
                    seq,
                    shared: Arc::clone(&shared),
                }));
            }
            None => {
                if !TimerThread::add(due, Arc::clone(&shared)) {
                    // No timer thread: wake at once and look again (a busy
                    // wait rather than a sleep that never ends).
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        self.armed = Some(shared);
        Poll::Pending
    }
}

/// One thread for every [`sleep`] polled off a queue thread (started at the
/// first): a heap of due times and a condition variable.
#[derive(Default)]
struct TimerThread {
    st: Mutex<WallTimers>,
    cond: std::sync::Condvar,
}

#[derive(Default)]
struct WallTimers {
    heap: BinaryHeap<Reverse<WallTimer>>,
    seq: u64,
    /// Heap size after the last clear-out of dropped sleeps.
    kept: usize,
}

impl TimerThread {
    /// Registers `shared` to fire at `due`; false if no timer thread runs.
    fn add(due: std::time::Instant, shared: Arc<TimerShared>) -> bool {
        static THREAD: std::sync::OnceLock<Option<Arc<TimerThread>>> = std::sync::OnceLock::new();
        let Some(t) = THREAD.get_or_init(|| {
            let t = Arc::new(TimerThread::default());
            let run = Arc::clone(&t);
            std::thread::Builder::new()
                .name("linerate-timer".into())
                .spawn(move || run.run())
                .ok()
                .map(|_| t)
        }) else {
            return false;
        };
        let mut st = lock(&t.st);
        // Sleeps dropped early leave entries behind: cleared out when the
        // heap has doubled since the last time.
        if st.heap.len() > 2 * st.kept + 1024 {
            st.heap
                .retain(|Reverse(w)| w.shared.live.load(Ordering::Acquire));
            st.kept = st.heap.len();
        }
        let seq = st.seq;
        st.seq += 1;
        let first = st.heap.peek().is_none_or(|Reverse(w)| due < w.due);
        st.heap.push(Reverse(WallTimer { due, seq, shared }));
        drop(st);
        if first {
            t.cond.notify_one();
        }
        true
    }

    fn run(&self) {
        let mut st = lock(&self.st);
        loop {
            let now = std::time::Instant::now();
            let mut due = Vec::new();
            while st.heap.peek().is_some_and(|Reverse(w)| w.due <= now) {
                if let Some(Reverse(w)) = st.heap.pop() {
                    due.push(w.shared);
                }
            }
            if !due.is_empty() {
                drop(st);
                for t in due {
                    t.fire();
                }
                st = lock(&self.st);
                continue;
            }
            let wait = st
                .heap
                .peek()
                .map(|Reverse(w)| w.due.saturating_duration_since(now));
            st = match wait {
                Some(d) => match self.cond.wait_timeout(st, d) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                },
                None => match self.cond.wait(st) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                },
            };
        }
    }
}

/// `fut`'s output, or `Err(TimedOut)` if it takes longer than `d` (see [`sleep`]).
pub async fn timeout<F: Future>(d: Duration, fut: F) -> io::Result<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut timer = std::pin::pin!(sleep(d));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::from(io::ErrorKind::TimedOut))),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

struct Task {
    header: Arc<Header>,
    waker: Waker,
    fut: LocalFuture,
}

/// One queue thread's executor, owned by its loop.
pub(crate) struct Executor {
    ctx: Rc<Ctx>,
    tasks: Vec<Option<Task>>,
    free: Vec<usize>,
    live: usize,
    /// Tasks dropped because they panicked.
    pub(crate) panics: u64,
    /// Task polls so far.
    pub(crate) polls: u64,
    /// The ready list's other buffer, swapped with it every round (no
    /// allocation per round).
    spare: VecDeque<Arc<Header>>,
    /// Closed: tasks dropped, the thread's context removed.
    closed: bool,
}

impl Executor {
    /// Installs the context of queue `queue` on the calling thread.
    pub(crate) fn install(queue: usize, handle: Handle, remote: Arc<Remote>) -> Executor {
        let ctx = Rc::new(Ctx {
            queue,
            epoch: handle.inner.epoch,
            handle,
            remote,
            ready: RefCell::new(VecDeque::new()),
            spawned: RefCell::new(Vec::new()),
            timers: RefCell::new(BinaryHeap::new()),
            seq: Cell::new(0),
            direct: Cell::new(0),
            canceled: Cell::new(0),
        });
        CURRENT.with(|c| *c.borrow_mut() = Some(Rc::clone(&ctx)));
        Executor {
            ctx,
            tasks: Vec::new(),
            free: Vec::new(),
            live: 0,
            panics: 0,
            polls: 0,
            spare: VecDeque::new(),
            closed: false,
        }
    }

    /// Stream reads and writes served straight from and into the engine.
    pub(crate) fn direct(&self) -> u64 {
        self.ctx.direct.get()
    }

    /// Tasks alive.
    pub(crate) fn tasks(&self) -> usize {
        self.live
    }

    fn add(&mut self, fut: LocalFuture) {
        let slot = self.free.pop().unwrap_or(self.tasks.len());
        let header = Arc::new(Header {
            slot,
            queued: AtomicBool::new(true),
            done: AtomicBool::new(false),
            remote: Arc::clone(&self.ctx.remote),
        });
        let waker = Waker::from(Arc::clone(&header));
        self.ctx.ready.borrow_mut().push_back(Arc::clone(&header));
        let task = Some(Task { header, waker, fut });
        match self.tasks.get_mut(slot) {
            Some(s) => *s = task,
            None => self.tasks.push(task),
        }
        self.live += 1;
    }

    /// Takes in what other threads spawned and woke, and fires due timers.
    fn gather(&mut self, now: Instant) {
        let (spawned, woken) = if self.ctx.remote.pending.swap(false, Ordering::AcqRel) {
            let mut inj = lock(&self.ctx.remote.injected);
            (
                std::mem::take(&mut inj.spawned),
                std::mem::take(&mut inj.woken),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        self.ctx.ready.borrow_mut().extend(woken);
        for build in spawned {
            match catch_unwind(AssertUnwindSafe(build)) {
                Ok(fut) => self.add(fut),
                Err(_) => self.panics += 1,
            }
        }
        let spawned = std::mem::take(&mut *self.ctx.spawned.borrow_mut());
        for fut in spawned {
            self.add(fut);
        }
        {
            // Entries of sleeps dropped early (a timeout whose future won)
            // would otherwise stay until due: cleared out once they are most
            // of the heap.
            let mut timers = self.ctx.timers.borrow_mut();
            let canceled = self.ctx.canceled.get();
            if canceled > 64 && 2 * canceled > timers.len() {
                timers.retain(|Reverse(t)| t.shared.live.load(Ordering::Acquire));
                self.ctx.canceled.set(0);
            }
        }
        loop {
            let due = {
                let mut timers = self.ctx.timers.borrow_mut();
                match timers.peek() {
                    Some(Reverse(t)) if t.due <= now => timers.pop().map(|Reverse(t)| t.shared),
                    _ => None,
                }
            };
            match due {
                // Outside the borrow: waking may register other timers.
                Some(t) => t.fire(),
                None => break,
            }
        }
    }

    /// Whether a round of [`Executor::run`] may have something to do: tasks
    /// alive, or work injected from another thread.
    pub(crate) fn has_work(&self) -> bool {
        self.live > 0
            || self.ctx.remote.pending.load(Ordering::Acquire)
            // Timers left by finished tasks fire (and leave) too, or their
            // due time would keep the loop from sleeping.
            || !self.ctx.timers.borrow().is_empty()
            || self.has_ready()
    }

    /// Whether a task is ready or spawned on this thread and not yet run: set
    /// by what the loop did after the tasks ran (a sweep's wake-up), it keeps
    /// the loop from sleeping.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ctx.ready.borrow().is_empty() || !self.ctx.spawned.borrow().is_empty()
    }

    /// Polls every task ready at `now` once (those woken meanwhile wait for the
    /// next round), lending them the queue's `engine`. `None` if no task was polled; otherwise whether some are
    /// ready again.
    pub(crate) fn run(&mut self, now: Instant, engine: &RefCell<Engine>) -> Option<bool> {
        ENGINE.set(engine, || self.run_tasks(now))
    }

    fn run_tasks(&mut self, now: Instant) -> Option<bool> {
        self.gather(now);
        let mut ready = std::mem::take(&mut self.spare);
        core::mem::swap(&mut ready, &mut *self.ctx.ready.borrow_mut());
        if ready.is_empty() {
            self.spare = ready;
            return None;
        }
        for header in ready.drain(..) {
            header.queued.store(false, Ordering::Release);
            let slot = header.slot;
            let Some(Some(mut task)) = self.tasks.get_mut(slot).map(Option::take) else {
                continue;
            };
            if !Arc::ptr_eq(&task.header, &header) {
                // A wake-up of a task that finished; the slot has a new one.
                if let Some(s) = self.tasks.get_mut(slot) {
                    *s = Some(task);
                }
                continue;
            }
            self.polls += 1;
            let mut cx = Context::from_waker(&task.waker);
            let finished = match catch_unwind(AssertUnwindSafe(|| task.fut.as_mut().poll(&mut cx)))
            {
                Ok(Poll::Ready(())) => true,
                Ok(Poll::Pending) => false,
                Err(_) => {
                    self.panics += 1;
                    true
                }
            };
            if finished {
                task.header.done.store(true, Ordering::Release);
                self.free.push(slot);
                self.live -= 1;
                // What the task held may panic in its `Drop`: contained too.
                if catch_unwind(AssertUnwindSafe(move || drop(task))).is_err() {
                    self.panics += 1;
                }
            } else if let Some(s) = self.tasks.get_mut(slot) {
                *s = Some(task);
            }
        }
        self.spare = ready;
        let spawned = std::mem::take(&mut *self.ctx.spawned.borrow_mut());
        for fut in spawned {
            self.add(fut);
        }
        Some(!self.ctx.ready.borrow().is_empty())
    }

    /// Timers registered and not yet fired or cleared out.
    pub(crate) fn timers(&self) -> usize {
        self.ctx.timers.borrow().len()
    }

    /// The earliest timer, if any.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.ctx.timers.borrow().peek().map(|Reverse(t)| t.due)
    }

    /// The queue stops: refuse new work, drop every task (their streams close
    /// and their join handles fail), and leave the thread.
    pub(crate) fn shutdown(mut self) {
        self.close();
    }

    /// [`Executor::shutdown`]; also when the queue thread unwinds from a
    /// panic, so that spawns fail at once rather than wait for a thread that
    /// is gone.
    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let (spawned, woken) = {
            let mut inj = lock(&self.ctx.remote.injected);
            inj.closed = true;
            (
                std::mem::take(&mut inj.spawned),
                std::mem::take(&mut inj.woken),
            )
        };
        drop(catch_unwind(AssertUnwindSafe(move || {
            drop(spawned);
            drop(woken);
        })));
        // Dropping a task may wake or spawn others: drop in rounds until none
        // are left, each outside every borrow of the context.
        loop {
            let mut doomed: Vec<Task> = self.tasks.drain(..).flatten().collect();
            doomed.extend(
                std::mem::take(&mut *self.ctx.spawned.borrow_mut())
                    .into_iter()
                    .map(|fut| {
                        let header = Arc::new(Header {
                            slot: 0,
                            queued: AtomicBool::new(false),
                            done: AtomicBool::new(true),
                            remote: Arc::clone(&self.ctx.remote),
                        });
                        Task {
                            waker: Waker::from(Arc::clone(&header)),
                            header,
                            fut,
                        }
                    }),
            );
            if doomed.is_empty() {
                break;
            }
            for t in &doomed {
                t.header.done.store(true, Ordering::Release);
            }
            drop(catch_unwind(AssertUnwindSafe(move || drop(doomed))));
        }
        self.live = 0;
        self.ctx.ready.borrow_mut().clear();
        self.ctx.timers.borrow_mut().clear();
        let _ = CURRENT.try_with(|c| *c.borrow_mut() = None);
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.close();
    }
}
