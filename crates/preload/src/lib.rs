//! An `LD_PRELOAD` library that runs unmodified programs' BSD-socket calls on
//! linerate: the TCP and UDP sockets its policy offloads are served by a
//! linerate runtime on a TAP, or on an interface it shares with the kernel
//! through AF_XDP, in the program's own process; every other call goes to
//! libc untouched.
//!
//! ```text
//! cargo build --release -p linerate-preload
//! LINERATE_CONFIG=lr.toml LD_PRELOAD=target/release/liblinerate_preload.so iperf3 -c 10.0.0.1
//! ```
//!
//! The configuration file is described in [`config`]; without
//! `LINERATE_CONFIG` the library is inert. A bad file stops the program
//! before `main`, naming the field and the fix (or, with
//! `on_error = "kernel"`, leaves every socket to the kernel and says so).
//!
//! # Which sockets
//!
//! Only AF_INET and AF_INET6 sockets of type SOCK_STREAM (TCP) and SOCK_DGRAM
//! (UDP) are ever linerate's; AF_UNIX, netlink, raw and packet sockets are
//! the kernel's. The [`policy`] decides per socket, when what it looks at is
//! known: `listen` (the listening port), `connect` (the peer and the local
//! port), `bind` or the first `sendto` of a UDP socket. Until then the
//! socket is a real kernel socket and its calls go to the kernel as they
//! are; a socket left to the kernel leaves the library's table for good.
//! Without `net.gateway`, peers off linerate's subnet stay on the kernel; with
//! it, linerate reaches them through the gateway. IPv6 peers are linerate's
//! when the file gives linerate an IPv6 address (`net.address6`, and
//! `net.gateway6` for those off its prefix); IPv4-mapped peers of AF_INET6
//! sockets are IPv4 ones. A listener takes the families its socket asks for
//! (AF_INET: IPv4; AF_INET6: both, or IPv6 only with IPV6_V6ONLY); the
//! engine listens per port, so a peer of the other family is reset just
//! after its handshake rather than refused at its SYN. A UDP socket talks
//! one family, the one of its own address or of its first peer.
//! The runtime (one linerate-rt queue thread per configured queue) starts at
//! the first socket decided for linerate.
//!
//! # On an interface shared with the kernel (AF_XDP)
//!
//! Built with `--features af-xdp` (which compiles libxdp and libbpf: clang,
//! libelf, zlib and m4 from the OS; the default build needs none of them),
//! `[nic] xdp = "eth0"` binds AF_XDP sockets to queues of an existing
//! interface and attaches linerate's steering XDP program there; with
//! `[net] share_kernel_address = true` linerate takes the interface's own
//! address and MAC, and the kernel's programs keep using them: the program
//! redirects to linerate only the frames of the ports and connections
//! linerate claims (listeners, bound UDP ports, 4-tuples, as they open),
//! and passes everything else (the host's ssh, ping, ARP) to the kernel.
//! Each claimed port is held in the kernel by a bound kernel socket, so the
//! two stacks never pick the same port, and linerate reads next hops from the
//! kernel's neighbour table. See [`config`] for the fields. Needs root (or
//! `CAP_NET_ADMIN`, `CAP_NET_RAW` and `CAP_BPF`).
//!
//! A program that binds the wildcard address first has a kernel socket
//! bound to its port, which would keep linerate from holding the port: on a
//! shared address the library gives that binding up (the placeholder
//! replaces the kernel socket) just before linerate claims the port at
//! `listen` (or a UDP socket's decision). `LINERATE_STATS` adds the steering
//! program's counters (`steer passed`, `steer port`, `steer flow`, ...):
//! which frames went to the kernel and which to linerate.
//!
//! Tested on a veth pair with one queue. With several (`nic.queues`), the
//! interface's own RSS spreads the frames over them; linerate's active
//! opens do not pick source ports that the interface's hash sends back to
//! the opening queue, so a connection may be answered on another queue.
//!
//! The steering program's attachment is exclusive: one process per interface
//! (a second preloaded program on the same interface cannot start linerate
//! and stays on the kernel, saying so). A connection from the host itself
//! to linerate's shared address never leaves the kernel, so it does not
//! reach linerate's listeners (the kernel resets it).
//!
//! # Readiness: the placeholder fd
//!
//! Every linerate socket owns a real kernel fd number: one end of an AF_UNIX
//! socketpair (the placeholder), put under the number of the kernel socket
//! it replaces (`dup3`), so numbers never collide and `select`'s FD_SETSIZE
//! rules hold. The library keeps the placeholder's kernel readiness equal to
//! the linerate socket's: readable is one byte queued toward it from the
//! library's end; not writable is its small send buffer filled, writable
//! again when the library's end drains it. Each socket has one waker of its
//! own, registered with linerate-rt wherever a side is not ready; when a
//! queue thread wakes it, it brings the placeholder up to date (a system
//! call or two, only when readiness changes) and wakes threads blocked in
//! the socket's calls (a futex).
//!
//! So `poll`, `ppoll`, `select`, `pselect` and every `epoll` call are not
//! interposed at all: the kernel answers them over sets that mix linerate
//! sockets with pipes, eventfds, timerfds and kernel sockets, level- or
//! edge-triggered, EPOLLONESHOT, nested epoll sets, epoll fds inside poll
//! sets, with the kernel's own timeouts. Interposing them as Onload does
//! (splitting the set, checking linerate readiness in user space, waiting
//! in the kernel on the rest plus a wake fd) saves those system calls on
//! readiness changes but must re-implement every epoll semantic; the
//! placeholder gets them right by construction. An edge-triggered waiter
//! gets a new edge when a socket becomes readable again after a read
//! returned `EAGAIN`, as programs written for edge triggering expect.
//!
//! # What is interposed
//!
//! socket, bind, listen, accept, accept4, connect, read, write, readv,
//! writev, recv, recvfrom, recvmsg, send, sendto, sendmsg, close, shutdown,
//! getsockname, getpeername, getsockopt, setsockopt, fcntl (O_NONBLOCK,
//! FD_CLOEXEC, F_GETFL/F_SETFL, F_GETFD/F_SETFD, F_DUPFD, F_DUPFD_CLOEXEC),
//! ioctl (FIONBIO, FIONREAD), dup, dup2, dup3, recvmmsg, sendmmsg, sendfile
//! (a file to a linerate socket, through a per-thread buffer), and the
//! fortified `__read_chk`, `__recv_chk`, `__recvfrom_chk`. Blocking calls sleep on a futex until the
//! socket's waker runs (no spinning), honour SO_RCVTIMEO/SO_SNDTIMEO
//! (`EAGAIN`), and return `EINTR` when a signal handler runs, as the kernel's do:
//! restarted instead when the handler has `SA_RESTART` (`signal()`'s do) and
//! the call has no SO_RCVTIMEO/SO_SNDTIMEO (signal(7)). A write to a
//! stream whose sending side is shut returns `EPIPE` and raises SIGPIPE
//! unless MSG_NOSIGNAL. Options linerate has no knob for are refused with
//! `ENOPROTOOPT`, logged once per option. TCP_NODELAY and the keep-alive
//! options (SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) reach the
//! connection's engine, also when set before it connected or on its
//! listener; SO_LINGER with a zero time makes the last close a reset, and
//! with a time makes it wait (at most that time) until the peer has
//! acknowledged everything and the FIN, as Linux's;
//! TCP_INFO reports the engine's state, MSS, RTT, RTO, congestion window,
//! slow-start threshold, unacknowledged segments, retransmissions, window
//! scales and options.
//!
//! Busy polling (`nic.busy_poll_us`, as `SO_BUSY_POLL`): a blocking call
//! watches its socket for that long before it sleeps, and the queue threads
//! go on looking at the NIC for that long after traffic, so a request and
//! its answer cross without a wake-up on either side. It costs a core's
//! idle time; off by default.
//!
//! The library's own threads and calls never go through the interposer (a
//! per-thread flag); every entry point catches panics (`EIO`, logged); all
//! `unsafe` code is in one module, the C boundary.
//!
//! # Logging
//!
//! `LINERATE_LOG=filter` turns on tracing (tracing-subscriber's env-filter
//! syntax: `info`, `debug`, `linerate_rt=trace,info`): the runtime's events
//! and the library's own (the runtime's start, each policy decision) go to
//! stderr, or are appended to `LINERATE_LOG_FILE` when that names a file. A
//! program with a tracing subscriber of its own keeps it. Errors the program
//! must see (a bad configuration, a runtime that cannot start) are written
//! to stderr whatever the setting.
//!
//! # Statistics
//!
//! With `LINERATE_STATS=file`, the library writes at exit each queue's
//! runtime figures and engine counters (`queue N name value` lines), and a
//! line per offloaded TCP connection with its engine figures (state, MSS,
//! congestion window, smoothed RTT, RTO, retransmissions), taken when the
//! program closed it or, for those still open, at exit.
//!
//! # exec
//!
//! A linerate socket's descriptor is close-on-exec whatever the program set
//! (with fcntl, FIOCLEX/FIONCLEX or a dup; it reads its own setting back):
//! the new image's library has no runtime to serve an inherited socket, so
//! exec starts clean. Kernel sockets are inherited as the kernel inherits
//! them.
//!
//! # fork
//!
//! A child gets a copy of the library's memory but none of its threads: the
//! queue threads that serve the linerate sockets stay in the parent, and a
//! child must not drive the parent's engines (two processes writing one
//! engine's frames from diverging copies of its state). So in a child an
//! inherited linerate socket fails with `EIO` (logged once, saying what to
//! do), and its exit stops nothing of the parent's.
//!
//! The sockets a child opens itself are the kernel's, unless the file keeps
//! queues for children: with `[nic] children = N` (a TAP, `queues = 1`,
//! `vnet_hdr` on) the program opens the TAP with `1 + N` queues when it
//! starts linerate (at its first offloaded socket): queue 0 is its own, the
//! others are kept open for its children. A child's first offloaded socket
//! starts a runtime of its own in the child, on the first kept queue no
//! living child holds (a table in memory the family shares), with the
//! program's address and MAC (the kernel sees one host). Its sockets are
//! offloaded by the same policy; its exit gives the queue back (after up to
//! a second of linger, as the parent's). A grandchild does the same, down
//! to sixteen forks deep. `LINERATE_STATS` in a child writes to the file's
//! name with `.PID` appended.
//!
//! Which queue the kernel puts a frame on is decided by a steering program
//! linerate attaches to the TAP (`TUNSETSTEERINGEBPF`, see
//! `linerate_nic::tap::TapSteering`) instead of the kernel's flow hash,
//! which learns from what user space wrote where and forgets after a few
//! seconds (an idle connection's next segment, a SYN to a listener, an ARP
//! reply would land in another process's engine, which resets them). Every
//! process claims its listening and bound ports and the local ports of its
//! connections for its queue; a frame to a claimed port goes to that queue,
//! everything else (ARP, ICMP, IP fragments, IPv6 extension headers,
//! unclaimed ports) to queue 0, the program's. A port one process holds is
//! refused to another (a child's `listen` on the program's port fails with
//! `EADDRINUSE`; an active open picks another source port). ARP replies to a
//! child's requests reach queue 0, so the program records the sender of
//! every ARP frame into a map the children read their next hops from.
//!
//! Limits, and what happens when things go wrong:
//!
//! * the TAP must be multi-queue (`ip tuntap add dev lr0 mode tap
//!   multi_queue`, or `create = true`) and the program its only user: queue
//!   numbers are the kernel's order of attachment, so linerate refuses to
//!   start (the program's sockets stay the kernel's, said on stderr) if other
//!   queues are attached, such as those of a child that ran a preloaded
//!   program with exec (its new image is a program of its own);
//! * the program keeps every kept queue open for its whole life: when a
//!   queue closes, the kernel renumbers the last queue into its place, which
//!   would send the frames of one child to another;
//! * a child killed before it gave its queue back leaves its claims; the
//!   program looks for dead children every second and removes them (and a
//!   child taking the queue removes what is left). Until then frames to the
//!   dead child's ports go to its queue, where nobody reads them; after,
//!   they reach the program's engine, which resets the dead child's
//!   connections and refuses new ones to its ports, as the kernel does when
//!   a process dies. No other process's traffic is affected;
//! * the children depend on the program: ARP requests from the kernel for
//!   linerate's address are answered on queue 0, and ICMP errors (a path
//!   MTU to lower) reach only the program; children of a program that exited
//!   keep their connections until the kernel's neighbour entry expires;
//! * IPv6 next hops are not recorded (neighbour advertisements go to queue
//!   0): a child's sockets reach IPv4 peers only;
//! * UDP datagrams fragmented by IP go to queue 0;
//! * a program that forks before it opened its first offloaded socket has
//!   not started linerate: its children's sockets are the kernel's;
//! * a child that accepts on a listener the program opened before it forked
//!   (nginx's workers with `master_process on`) is not served: the listener
//!   is the program's, its copy in the child fails with `EIO`. Serving it
//!   would need the listener opened again in each child on the same port
//!   (`SO_REUSEPORT` shared by the processes' queues) and the program
//!   spreading new connections by claiming 4-tuples, not ports, in the
//!   steering program; run such servers as one process (`master_process
//!   off`) or leave their ports to the kernel with a policy rule.
//!
//! # Not yet
//!
//! A forked child does not serve listeners its parent opened (above); a
//! socket
//! duplicated before the policy decided it keeps the kernel socket in the
//! duplicate; EFAULT is detected for null pointers only.
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]

mod children;
pub mod config;
mod ffi;
pub mod policy;
mod sock;
mod stack;
mod stats;
