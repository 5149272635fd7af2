//! The TAP backend's batched mode: one io_uring per queue ([`super::TapConfig::io_uring`]).
//!
//! Receive keeps a read posted into a pool buffer per slot, or (multishot
//! mode) runs one multishot read (`IORING_OP_READ_MULTISHOT`, Linux 6.7+)
//! over a ring of provided pool buffers (`io_uring_register_buf_ring`): the
//! kernel waits on the TAP with one poll entry and completes a read into the
//! next buffer for every frame. A kernel without it (the first completion an
//! error, no buffer) falls back to posted reads. Posted reads each wait on
//! the TAP's wait queue, so every frame wakes all of them and all but one
//! poll again (at 128 reads, about eight poll arms per frame at light load);
//! under a saturating load they find frames at submit and read them inline.
//! Either way completions are reaped from the completion queue without a
//! system call, and a slot or buffer goes back to the kernel only once its
//! frame was handed up, so what waits is bounded by the buffers.
//! Transmit queues a write (writev for a
//! scatter-gather frame) per frame and submits the batch with one
//! `io_uring_enter`. Every buffer the kernel may still touch is owned by the
//! ring's slots until its completion is reaped: a received frame's buffer
//! leaves its slot only with its completion, a sent frame goes back to the pool
//! only when its write completed.
//!
//! Readiness is an eventfd registered with the ring: the kernel writes it for
//! every completion it posts. A receive that finds nothing submits what is
//! queued, drains the eventfd, and only then looks at the completion queue a
//! last time, so a completion posted after that look leaves the eventfd
//! readable and a thread sleeping on it wakes: nothing sleeps through one.
//!
//! With posted reads the queue's descriptor is made blocking: io_uring then
//! waits for a frame by polling the TAP inside the kernel, where a
//! non-blocking one would complete each read at once with `EAGAIN`. The
//! multishot read asks for non-blocking reads itself and polls when one finds
//! nothing.

use crate::buf::{PacketBuf, Pool};
use crate::frame::Frame;
use crate::sys::MAX_IOV;
use io_uring::{IoUring, opcode, types};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Set in the user data of a write; a read's is its slot index.
const TX: u64 = 1 << 63;
/// The user data of the cancellation sent when the ring is dropped.
const CANCEL: u64 = u64::MAX;
/// The user data of the multishot read.
const MSHOT: u64 = 1 << 62;
/// The provided-buffer group of the multishot read.
const BGID: u16 = 0;

/// How much a ring batched, for tests and measurements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// `io_uring_enter` calls made to submit.
    pub enters: u64,
    /// Completions reaped (reads and writes).
    pub completions: u64,
    /// Reads submitted (posted reads) or completed into a provided buffer
    /// (the multishot read).
    pub reads: u64,
    /// Writes submitted.
    pub writes: u64,
    /// The most completions one look at the completion queue reaped.
    pub max_reaped: u64,
    /// The most completed reads waiting at once to be handed up (at most the
    /// receive buffers: a buffer goes back to the kernel only once its frame
    /// went up).
    pub max_waiting: u64,
    /// Times the multishot read was armed (once, plus once each time it
    /// ended: out of buffers, or an error); 0 with posted reads.
    pub multishot_arms: u64,
}

/// The multishot read's ring of provided buffers: `entries` slots of
/// `struct io_uring_buf` in page-aligned memory the kernel reads, the pool
/// buffer behind each buffer id, and the ids to hand back.
struct Provided {
    mem: core::ptr::NonNull<io_uring::types::BufRingEntry>,
    layout: std::alloc::Layout,
    entries: u16,
    /// The tail we publish (the kernel consumes from its head).
    tail: u16,
    bufs: Vec<Option<PacketBuf>>,
    free: Vec<u16>,
    /// The read is in the kernel (its last completion had `F_MORE`).
    armed: bool,
    /// A completion carried a buffer: the kernel has the operation.
    proven: bool,
}

// SAFETY: the memory is owned by this struct and only touched by the thread
// that owns the ring (the queue's), and by the kernel.
#[allow(unsafe_code)]
unsafe impl Send for Provided {}

impl Provided {
    fn new(entries: u16) -> Option<Provided> {
        let size = usize::from(entries) * core::mem::size_of::<io_uring::types::BufRingEntry>();
        let layout = std::alloc::Layout::from_size_align(size.max(4096), 4096).ok()?;
        #[allow(unsafe_code)]
        // SAFETY: a non-zero size.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        let mem = core::ptr::NonNull::new(mem.cast())?;
        Some(Provided {
            mem,
            layout,
            entries,
            tail: 0,
            bufs: (0..entries).map(|_| None).collect(),
            free: (0..entries).rev().collect(),
            armed: false,
            proven: false,
        })
    }

    /// Gives the kernel a buffer for every free id and publishes the tail.
    fn refill(&mut self, pool: &Pool, hlen: usize, room: usize) {
        if self.free.is_empty() {
            return;
        }
        let mask = self.entries - 1;
        while let Some(bid) = self.free.pop() {
            let mut buf = pool.alloc();
            let area = buf.read_area(hlen, room + 1);
            let (ptr, len) = (area.as_mut_ptr(), area.len());
            #[allow(unsafe_code)]
            // SAFETY: `tail & mask` is below `entries`, the slots the memory
            // holds; the kernel reads only slots between its head and the
            // published tail, and this one is past the tail until the store
            // below.
            let entry = unsafe { &mut *self.mem.as_ptr().add(usize::from(self.tail & mask)) };
            entry.set_addr(ptr as u64);
            entry.set_len(u32::try_from(len).unwrap_or(u32::MAX));
            entry.set_bid(bid);
            if let Some(s) = self.bufs.get_mut(usize::from(bid)) {
                *s = Some(buf);
            }
            self.tail = self.tail.wrapping_add(1);
        }
        #[allow(unsafe_code)]
        // SAFETY: the tail field of the ring's first entry, an aligned u16 in
        // memory the kernel shares; stored with release order so the entries
        // written above are seen first.
        unsafe {
            let tail = io_uring::types::BufRingEntry::tail(self.mem.as_ptr())
                as *const core::sync::atomic::AtomicU16;
            (*tail).store(self.tail, core::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for Provided {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: allocated in `new` with this layout; the ring (and with it
        // the kernel's reference) is gone or the buffers were leaked by
        // `Ring::drop`, which leaks this too in that case.
        unsafe {
            std::alloc::dealloc(self.mem.as_ptr().cast(), self.layout);
        }
    }
}

/// `struct iovec` with its pointer as an address, so that a slot is `Send`
/// (the ring's thread is the queue's, and a `Tap` moves to it).
#[repr(C)]
#[derive(Clone, Copy)]
struct IoVec {
    base: usize,
    len: usize,
}

/// A write in flight: the frame (its buffers stay alive until the
/// completion) and the iovecs that describe it.
struct TxSlot {
    frame: Option<Frame>,
    iov: [IoVec; MAX_IOV],
}

/// One queue's ring and the buffers it owns.
pub(crate) struct Ring {
    ring: IoUring,
    event: OwnedFd,
    fd: RawFd,
    /// Read slots: `Some` while a read into the buffer is queued or in flight.
    rx: Vec<Option<PacketBuf>>,
    /// Read slots with no read posted.
    rx_idle: Vec<u32>,
    /// Completed reads not yet handed up: slot (or buffer id) and result.
    /// A slot or id is given to the kernel again only once its buffer went
    /// up, so what waits here is bounded by the buffers.
    rx_done: VecDeque<(u32, i32)>,
    /// The multishot read's buffers; `None` with posted reads.
    provided: Option<Provided>,
    /// Reads queued in the submission queue or in the kernel.
    rx_posted: usize,
    tx: Vec<TxSlot>,
    tx_idle: Vec<u32>,
    /// Writes that completed with an error since the last look: their errno.
    pub(crate) tx_failed: Vec<i32>,
    /// The multishot read ended with an error (its errno) since the last
    /// look; it is armed again at the next receive.
    pub(crate) rx_failed: Option<i32>,
    /// Requests in the kernel or queued (their buffers are not ours).
    in_flight: usize,
    /// The multishot read failed before it read anything: to be replaced by
    /// posted reads ([`Ring::settle`]).
    fallback: bool,
    /// Entries queued but not yet submitted.
    queued: usize,
    pub(crate) stats: RingStats,
}

impl core::fmt::Debug for Ring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ring")
            .field("fd", &self.fd)
            .field("in_flight", &self.in_flight)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    #[allow(unsafe_code)]
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(unsafe_code)]
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Ring {
    /// A ring of `depth` entries (at least 2, rounded by the kernel to a power
    /// of two) for the queue `fd`: half for reads, half for writes.
    pub(crate) fn new(fd: &OwnedFd, depth: u32, multishot: bool) -> io::Result<Ring> {
        let depth = depth.clamp(2, 4096);
        let ring = IoUring::builder()
            // Room for every request in flight: the completion queue never
            // overflows.
            .setup_cqsize(depth * 2)
            .build(depth)?;
        let event = eventfd()?;
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        let sq = ring.params().sq_entries() as usize;
        let reads = (sq / 2).max(1);
        let writes = (sq - reads).max(1);
        // The multishot read's buffers: as many as posted reads would have.
        let entries = u16::try_from(reads.next_power_of_two()).unwrap_or(1 << 15);
        let provided = multishot
            .then(|| Provided::new(entries))
            .flatten()
            .and_then(|p| {
                #[allow(unsafe_code)]
                // SAFETY: the memory holds `entries` entries, is page-aligned, and
                // lives in `Provided` until the ring is dropped (or is leaked).
                let r = unsafe {
                    ring.submitter().register_buf_ring_with_flags(
                        p.mem.as_ptr() as u64,
                        entries,
                        BGID,
                        0,
                    )
                };
                r.ok().map(|()| p)
            });
        // Posted reads need a blocking descriptor (see the module docs).
        crate::sys::set_nonblocking(fd, provided.is_some())?;
        let empty = IoVec { base: 0, len: 0 };
        Ok(Ring {
            ring,
            event,
            fd: fd.as_raw_fd(),
            rx: (0..reads).map(|_| None).collect(),
            rx_idle: (0..reads as u32).rev().collect(),
            rx_done: VecDeque::with_capacity(reads),
            provided,
            rx_posted: 0,
            tx: (0..writes)
                .map(|_| TxSlot {
                    frame: None,
                    iov: [empty; MAX_IOV],
                })
                .collect(),
            tx_idle: (0..writes as u32).rev().collect(),
            tx_failed: Vec::with_capacity(writes),
            rx_failed: None,
            in_flight: 0,
            fallback: false,
            queued: 0,
            stats: RingStats::default(),
        })
    }

    /// The eventfd the kernel writes on every completion.
    pub(crate) fn event_fd(&self) -> RawFd {
        self.event.as_raw_fd()
    }

    /// Queues a read into a pool buffer for every idle read slot; each reads
    /// the `virtio_net_hdr` (`hlen` bytes) and up to `room` bytes of frame
    /// plus one (to tell a frame that did not fit).
    pub(crate) fn post_reads(&mut self, pool: &Pool, hlen: usize, room: usize) {
        if let Some(p) = &mut self.provided {
            p.refill(pool, hlen, room);
            if !p.armed {
                let sqe = opcode::ReadMulti::new(types::Fd(self.fd), 0, BGID)
                    .build()
                    .user_data(MSHOT);
                #[allow(unsafe_code)]
                // SAFETY: the read's targets are the provided buffers, which
                // stay in `Provided` until their completions are reaped.
                let pushed = unsafe { self.ring.submission().push(&sqe) };
                if pushed.is_ok() {
                    p.armed = true;
                    self.in_flight += 1;
                    self.queued += 1;
                    self.stats.multishot_arms += 1;
                }
            }
            return;
        }
        while let Some(&slot) = self.rx_idle.last() {
            let mut buf = pool.alloc();
            let area = buf.read_area(hlen, room + 1);
            let (ptr, len) = (area.as_mut_ptr(), area.len());
            let len = u32::try_from(len).unwrap_or(u32::MAX);
            let sqe = opcode::Read::new(types::Fd(self.fd), ptr, len)
                .build()
                .user_data(u64::from(slot));
            #[allow(unsafe_code)]
            // SAFETY: the read's target is the buffer's storage, which is heap
            // memory that stays where it is while the buffer sits in its slot,
            // and the buffer sits there until this read's completion is reaped
            // (or, if the ring goes away first, is leaked: see `Drop`).
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_err() {
                break;
            }
            self.rx_idle.pop();
            if let Some(s) = self.rx.get_mut(slot as usize) {
                *s = Some(buf);
            }
            self.rx_posted += 1;
            self.in_flight += 1;
            self.queued += 1;
            self.stats.reads += 1;
        }
    }

    /// The read slots (posted reads), or 2 with the multishot read: its one
    /// arming is worth a submit of its own.
    pub(crate) fn read_slots(&self) -> usize {
        if self.provided.is_some() {
            2
        } else {
            self.rx.len()
        }
    }

    /// Entries queued but not submitted.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Submits what is queued: one `io_uring_enter`.
    pub(crate) fn submit(&mut self) -> io::Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        self.stats.enters += 1;
        match self.ring.submit() {
            Ok(n) => {
                self.queued = self.queued.saturating_sub(n);
                Ok(())
            }
            // Out of kernel memory for now, or a signal: the entries stay
            // queued and go with the next submit.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Clears the eventfd (before the last look at the completion queue
    /// ahead of a sleep: see the module docs).
    pub(crate) fn drain_event(&self) {
        let mut v: u64 = 0;
        #[allow(unsafe_code)]
        // SAFETY: eight writable bytes; the eventfd is non-blocking.
        unsafe {
            libc::read(self.event.as_raw_fd(), (&raw mut v).cast(), 8)
        };
    }

    /// Moves every completion out of the completion queue: reads to
    /// `rx_done`, writes' frames back to the pool (their errors to
    /// `tx_failed`). No system call.
    pub(crate) fn reap(&mut self) -> usize {
        let mut n = 0u64;
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            n += 1;
            let data = cqe.user_data();
            let res = cqe.result();
            if data == CANCEL {
                continue;
            }
            if data == MSHOT {
                let flags = cqe.flags();
                let Some(p) = &mut self.provided else {
                    continue;
                };
                if !io_uring::cqueue::more(flags) {
                    p.armed = false;
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
                match io_uring::cqueue::buffer_select(flags) {
                    Some(bid) => {
                        p.proven = true;
                        self.stats.reads += 1;
                        self.rx_done.push_back((u32::from(bid), res));
                    }
                    // Out of buffers: armed again after the refill.
                    None if res == -libc::ENOBUFS => {}
                    // The kernel does not have the operation (or not for
                    // this file): posted reads from now on.
                    None if !p.proven => self.fallback = true,
                    None => {
                        if res < 0 {
                            self.rx_failed.get_or_insert(-res);
                        }
                    }
                }
                continue;
            }
            self.in_flight = self.in_flight.saturating_sub(1);
            if data & TX != 0 {
                let slot = (data & !TX) as u32;
                if let Some(s) = self.tx.get_mut(slot as usize) {
                    // The write is done: the frame's buffers are ours again.
                    s.frame = None;
                }
                self.tx_idle.push(slot);
                if res < 0 {
                    self.tx_failed.push(-res);
                }
            } else {
                self.rx_posted = self.rx_posted.saturating_sub(1);
                self.rx_done.push_back((data as u32, res));
            }
        }
        drop(cq);
        self.stats.max_waiting = self.stats.max_waiting.max(self.rx_done.len() as u64);
        self.stats.completions += n;
        self.stats.max_reaped = self.stats.max_reaped.max(n);
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// The next completed read: its buffer and result (bytes read or
    /// `-errno`). Its slot (or buffer id) goes idle, to be given to the
    /// kernel again.
    pub(crate) fn next_read(&mut self) -> Option<(PacketBuf, i32)> {
        loop {
            let (slot, res) = self.rx_done.pop_front()?;
            let buf = match &mut self.provided {
                Some(p) => {
                    let bid = u16::try_from(slot).unwrap_or(u16::MAX);
                    let buf = p.bufs.get_mut(usize::from(bid)).and_then(Option::take);
                    if buf.is_some() {
                        p.free.push(bid);
                    }
                    buf
                }
                None => {
                    self.rx_idle.push(slot);
                    self.rx.get_mut(slot as usize).and_then(Option::take)
                }
            };
            if let Some(buf) = buf {
                return Some((buf, res));
            }
        }
    }

    /// After a reap: if the multishot read turned out unsupported, moves to
    /// posted reads (the descriptor made blocking for them).
    pub(crate) fn settle(&mut self) -> io::Result<()> {
        if !self.fallback {
            return Ok(());
        }
        self.fallback = false;
        if let Some(p) = self.provided.take() {
            // Nothing is armed and no buffer was consumed: the kernel holds
            // none of them. Its registration goes with the ring.
            let _ = self.ring.submitter().unregister_buf_ring(BGID);
            drop(p);
        }
        crate::sys::set_nonblocking(&self.fd, false)
    }

    /// How many writes can be queued now.
    pub(crate) fn write_room(&mut self) -> usize {
        let sq = self.ring.submission();
        let free = sq.capacity() - sq.len();
        free.min(self.tx_idle.len())
    }

    fn sq_full(&mut self) -> bool {
        self.ring.submission().is_full()
    }

    /// Queues the write of `frame`, whose `virtio_net_hdr` (`hlen` bytes) is
    /// already in its headroom and whose fragments are fewer than
    /// [`MAX_IOV`]. The frame stays in the ring until the write completes.
    /// Gives the frame back if there is no room ([`Ring::write_room`] says how many fit).
    pub(crate) fn queue_write(&mut self, mut frame: Frame, hlen: usize) -> Result<(), Frame> {
        if self.sq_full() {
            return Err(frame);
        }
        let Some(&slot) = self.tx_idle.last() else {
            return Err(frame);
        };
        let Some(s) = self.tx.get_mut(slot as usize) else {
            return Err(frame);
        };
        let Some((head, len)) = frame.buf.with_header(hlen) else {
            return Err(frame);
        };
        let head = head.get(..len).unwrap_or_default();
        let (head_ptr, head_len) = (head.as_ptr(), head.len());
        let mut count = 0;
        let pieces = core::iter::once((head_ptr, head_len))
            .chain(frame.frags.iter().map(|fr| (fr.bytes().as_ptr(), fr.len())));
        for (v, (ptr, len)) in s.iov.iter_mut().zip(pieces) {
            *v = IoVec {
                base: ptr as usize,
                len,
            };
            count += 1;
        }
        let data = TX | u64::from(slot);
        let sqe = if count == 1 {
            let len = u32::try_from(head_len).unwrap_or(u32::MAX);
            opcode::Write::new(types::Fd(self.fd), head_ptr, len)
                .build()
                .user_data(data)
        } else {
            opcode::Writev::new(
                types::Fd(self.fd),
                s.iov.as_ptr().cast::<libc::iovec>(),
                count,
            )
            .build()
            .user_data(data)
        };
        #[allow(unsafe_code)]
        // SAFETY: the write reads the frame's head buffer and fragments (heap
        // storage, which does not move when the frame moves into the slot) and
        // the slot's iovecs; the frame stays in the slot until this write's
        // completion is reaped, or is leaked if the ring goes away first
        // (see `Drop`).
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            return Err(frame);
        }
        s.frame = Some(frame);
        self.tx_idle.pop();
        self.in_flight += 1;
        self.queued += 1;
        self.stats.writes += 1;
        Ok(())
    }
}

impl Drop for Ring {
    /// Cancels what is in flight and waits (briefly) for it: a buffer is freed
    /// only when the kernel is done with it; one it is not done with by then
    /// is leaked rather than freed under it.
    fn drop(&mut self) {
        if self.in_flight > 0 {
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(CANCEL);
            #[allow(unsafe_code)]
            // SAFETY: a cancellation refers to no memory.
            let _ = unsafe { self.ring.submission().push(&cancel) };
            self.queued += 1;
            for _ in 0..200 {
                let _ = self.ring.submit();
                self.reap();
                if self.in_flight == 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if self.in_flight > 0 {
            for b in self.rx.drain(..).flatten() {
                core::mem::forget(b);
            }
            if let Some(mut p) = self.provided.take() {
                for b in p.bufs.drain(..).flatten() {
                    core::mem::forget(b);
                }
                core::mem::forget(p);
            }
            for s in self.tx.drain(..) {
                core::mem::forget(s.frame);
            }
        }
    }
}
