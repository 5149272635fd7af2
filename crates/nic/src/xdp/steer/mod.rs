//! linerate's steering XDP program (`steer.bpf.c`, built by build.rs) and the
//! handle that keeps its maps: [`Steering`].
//!
//! The program redirects to the queue's AF_XDP socket only the frames linerate
//! owns (its ports and 4-tuples, ICMP errors quoting them, later fragments of
//! owned datagrams, and everything for an address of its own, ARP and ND
//! included) and passes the rest to the kernel's stack; `steer.bpf.c` lists
//! the rules. One program and one set of maps serve every queue of the
//! interface: each queue's socket sits in the `xsks` map at its queue index.
//!
//! # Lifecycle
//!
//! The program is attached through a BPF link (`BPF_LINK_CREATE`), and
//! nothing is pinned: when the last [`Steering`] holding the link drops, or
//! its process dies, the kernel detaches the program and frees its maps.
//! The link is exclusive, so a second process on the same interface joins
//! the first one's program rather than attaching its own (`share`): it gets
//! duplicates of the link's and maps' descriptors over an abstract Unix
//! socket and puts its sockets in the `xsks` map at its own queues
//! ([`XdpConfig::first_queue`](super::XdpConfig::first_queue)); the program
//! stays while any process holds it. The map sizes, the attach mode and the
//! RSS hash choice are the first process's. Ports and 4-tuples are not
//! arbitrated between processes (each claims its own; the kernel's hold of a
//! shared address's ports keeps two from claiming one port), and a killed
//! process's claims stay in the maps while the others hold them (their frames
//! then reach a queue of another process, or the kernel where the dead
//! process's queue has no socket).
//!
//! # Updates
//!
//! [`Steering`] implements [`Claims`](crate::claims::Claims): ports are counted (a listener on every
//! queue claims its port once per queue), 4-tuples are claimed once each. A
//! full map refuses with [`ClaimError::Full`] (and [`Steering::refused`]
//! counts it) so the caller refuses the connection: its frames would
//! otherwise reach the kernel, which does not know it. With
//! [`SteerConfig::hold`] addresses, every claimed local port is also held in
//! the kernel (a bound socket per port). Updates are system calls under a lock,
//! made at open and close only; the per-packet path never sees them.

mod claim;
mod share;

use super::XdpAttach;
use super::hold::NetNs;
use crate::claims::{ClaimError, L4};
use claim::State;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The program, built by build.rs from `steer.bpf.c`.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer.bpf.o"));

/// `BPF_F_XDP_DEV_BOUND_ONLY` (linux/bpf.h): a program bound to one device,
/// which may call its metadata kfuncs.
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// `XDP_FLAGS_SKB_MODE` and `XDP_FLAGS_DRV_MODE` (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// What the program steers besides the ports and 4-tuples claimed later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerConfig {
    /// Entries of the 4-tuple map (connections linerate may have open at once).
    pub flows: u32,
    /// Entries of the port map.
    pub ports: u32,
    /// Addresses of linerate's own (not the kernel's): every IP frame to them,
    /// and ARP and neighbour solicitations asking for them, go to linerate.
    /// Leave a shared address out: the kernel answers ARP/ND for it.
    pub addresses: Vec<IpAddr>,
    /// Addresses on which every claimed port is held in the kernel's stack by
    /// a bound socket (the address linerate shares with the kernel), in the
    /// network namespace [`super::Xdp::open`] ran in, whichever thread claims.
    /// Empty: nothing is held.
    pub hold: Vec<IpAddr>,
    /// Read the device's RSS hash in the program (`bpf_xdp_metadata_rx_hash`)
    /// and put it in front of each frame redirected to linerate (the XDP
    /// metadata area), where receive takes it as the frame's
    /// `OffloadMeta::rss_hash`, so the shim does not compute it again. The
    /// kfunc needs a device-bound program, which attaches only natively:
    /// where the kernel lacks the kfunc, the device does not implement it or
    /// the program attaches generically, the program is loaded without it
    /// ([`Steering::rx_hash`] says which). Default off: the device's hash
    /// is whatever the device computes (veth: the kernel's software flow
    /// hash, not Toeplitz), and the shim spreads frames over queues by it,
    /// so turn it on where the device's hash is the Toeplitz hash the
    /// runtime's steering computes (its key set on the NIC).
    pub rx_hash: bool,
}

impl Default for SteerConfig {
    /// 65,536 4-tuples, 1,024 ports, no address of its own, nothing held,
    /// no RSS hash from the device.
    fn default() -> SteerConfig {
        SteerConfig {
            flows: 65_536,
            ports: 1024,
            addresses: Vec::new(),
            hold: Vec::new(),
            rx_hash: false,
        }
    }
}

/// What the program decided, summed over CPUs (its `counts` map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SteerCounts {
    /// Frames passed to the kernel: not linerate's.
    pub passed: u64,
    /// To linerate: a claimed port.
    pub port: u64,
    /// To linerate: a claimed 4-tuple.
    pub flow: u64,
    /// To linerate: an ICMP error quoting a segment of linerate's.
    pub icmp: u64,
    /// To linerate: ARP for an address of its own.
    pub arp: u64,
    /// To linerate: a neighbour solicitation for an address of its own.
    pub nd: u64,
    /// To linerate: IP to an address of its own.
    pub addr: u64,
    /// To linerate: a later fragment of an owned datagram.
    pub frag: u64,
    /// Linerate's, but its queue had no socket: passed to the kernel.
    pub no_socket: u64,
    /// Headers cut short: passed to the kernel.
    pub malformed: u64,
}

impl SteerCounts {
    /// Frames redirected to linerate.
    pub fn redirected(&self) -> u64 {
        self.port + self.flow + self.icmp + self.arp + self.nd + self.addr + self.frag
    }
}

/// linerate's XDP program attached to one interface, and its maps.
#[derive(Debug)]
pub struct Steering {
    ifindex: u32,
    attach: XdpAttach,
    rx_hash: bool,
    _link: OwnedFd,
    xsks: OwnedFd,
    ports: OwnedFd,
    flows: OwnedFd,
    counts: OwnedFd,
    addrs: OwnedFd,
    ports_max: u32,
    flows_max: u32,
    hold: Vec<IpAddr>,
    /// The interface's network namespace, where ports are held.
    netns: NetNs,
    state: Mutex<State>,
    refused: AtomicU64,
    /// The program was attached by another process and lent to this one.
    joined: bool,
    /// Lends the program to other processes on the interface.
    server: Option<share::Server>,
}

fn errno(rc: libc::c_int) -> io::Error {
    io::Error::from_raw_os_error(rc.checked_neg().filter(|e| *e > 0).unwrap_or(libc::EIO))
}

/// The map key of a port (`struct port_key`).
fn port_key(l4: L4, port: u16) -> [u8; 4] {
    let p = port.to_be_bytes();
    [l4.number(), 0, p[0], p[1]]
}

/// An address as the maps hold it: 16 bytes, an IPv4 address in the first
/// four; and its family (4 or 6).
fn ip_field(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(a) => {
            let mut f = [0u8; 16];
            for (d, s) in f.iter_mut().zip(a.octets()) {
                *d = s;
            }
            (4, f)
        }
        IpAddr::V6(a) => (6, a.octets()),
    }
}

/// The map key of a 4-tuple (`struct flow_key`).
fn flow_key(l4: L4, local: SocketAddr, remote: SocketAddr) -> Result<[u8; 40], ClaimError> {
    let (family, l) = ip_field(local.ip());
    let (remote_family, r) = ip_field(remote.ip());
    if family != remote_family {
        return Err(ClaimError::Family);
    }
    let (lp, rp) = (local.port().to_be_bytes(), remote.port().to_be_bytes());
    let head = [l4.number(), family, lp[0], lp[1], rp[0], rp[1], 0, 0];
    let mut k = [0u8; 40];
    for (d, s) in k.iter_mut().zip(head.iter().chain(&l).chain(&r)) {
        *d = *s;
    }
    Ok(k)
}

/// The map key of an address (`struct addr_key`).
fn addr_key(ip: IpAddr) -> [u8; 20] {
    let (family, a) = ip_field(ip);
    let mut k = [0u8; 20];
    for (d, s) in k.iter_mut().zip([family, 0, 0, 0].iter().chain(&a)) {
        *d = *s;
    }
    k
}

fn update(fd: &OwnedFd, key: &[u8], value: &[u8], flags: u32) -> Result<(), io::Error> {
    #[allow(unsafe_code)]
    // SAFETY: key and value are live buffers of the map's key and value sizes
    // (the layouts of steer.bpf.c); the kernel copies them during the call.
    let rc = unsafe {
        libxdp_sys::bpf_map_update_elem(
            fd.as_raw_fd(),
            key.as_ptr().cast(),
            value.as_ptr().cast(),
            u64::from(flags),
        )
    };
    if rc < 0 { Err(errno(rc)) } else { Ok(()) }
}

fn delete(fd: &OwnedFd, key: &[u8]) {
    #[allow(unsafe_code)]
    // SAFETY: key is a live buffer of the map's key size.
    let _ = unsafe { libxdp_sys::bpf_map_delete_elem(fd.as_raw_fd(), key.as_ptr().cast()) };
}

/// The number of possible CPUs (per-CPU map values come one per CPU).
fn possible_cpus() -> usize {
    // "0-3" or "0,2-5": the highest index plus one.
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split([',', '-'])
                .filter_map(|n| n.parse::<usize>().ok())
                .max()
        })
        .map_or(1, |m| m + 1)
}

/// Owns a libbpf object until it is closed.
struct Object(*mut libxdp_sys::bpf_object);

impl Drop for Object {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: the pointer came from bpf_object__open_mem and is closed once.
        unsafe {
            libxdp_sys::bpf_object__close(self.0)
        };
    }
}

impl Object {
    fn map(&self, name: &std::ffi::CStr) -> io::Result<*mut libxdp_sys::bpf_map> {
        #[allow(unsafe_code)]
        // SAFETY: a live object and a NUL-terminated name.
        let m = unsafe { libxdp_sys::bpf_object__find_map_by_name(self.0, name.as_ptr()) };
        if m.is_null() {
            Err(io::Error::other(format!(
                "the steering program has no map {name:?}"
            )))
        } else {
            Ok(m)
        }
    }

    /// A descriptor of map `name` of the loaded object, of our own.
    fn map_fd(&self, name: &std::ffi::CStr) -> io::Result<OwnedFd> {
        let m = self.map(name)?;
        #[allow(unsafe_code)]
        // SAFETY: a map of the live object.
        let fd: RawFd = unsafe { libxdp_sys::bpf_map__fd(m) };
        if fd < 0 {
            return Err(errno(fd));
        }
        #[allow(unsafe_code)]
        // SAFETY: the object owns `fd` and keeps it open during this call; the
        // duplicate made from it is ours.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        borrowed.try_clone_to_owned()
    }
}

impl Steering {
    /// Loads the program with `cfg`'s map sizes and attaches it to interface
    /// `ifindex` (`attach`: [`XdpAttach::Auto`] tries native, then generic).
    /// `queues` is the largest queue index plus one that sockets will use;
    /// `frags`: the `xdp.frags` program, for multi-buffer sockets. With
    /// [`SteerConfig::rx_hash`], the device-bound program that reads the RSS
    /// hash first (native only), the plain one if that fails. Joins the
    /// program of another process on the interface if one serves it.
    pub(crate) fn attach(
        ifindex: u32,
        attach: XdpAttach,
        queues: u32,
        cfg: &SteerConfig,
        frags: bool,
    ) -> io::Result<Steering> {
        // Another process may be attaching at the same moment: its link
        // makes ours fail with EBUSY until it serves the program.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            if let Some((header, fds)) = share::join(ifindex)? {
                return Steering::join(ifindex, attach, queues, cfg, frags, header, fds);
            }
            match Steering::attach_own(ifindex, attach, queues, cfg, frags) {
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }

    /// The program of another process, from its descriptors: checked
    /// against what this process asks for.
    fn join(
        ifindex: u32,
        attach: XdpAttach,
        queues: u32,
        cfg: &SteerConfig,
        frags: bool,
        header: share::Header,
        fds: [OwnedFd; share::FDS],
    ) -> io::Result<Steering> {
        let mode = |f: bool| if f { "with" } else { "without" };
        if header.frags != frags {
            return Err(io::Error::other(format!(
                "the steering program of this interface was loaded {} xdp.frags by another \
                 process, and this one asks {} multi-buffer: give every process the same \
                 multi_buffer setting",
                mode(header.frags),
                mode(frags)
            )));
        }
        if attach != XdpAttach::Auto && attach != header.attach {
            return Err(io::Error::other(format!(
                "the steering program of this interface is attached {:?} by another process, \
                 and this one asks {attach:?}: use the same mode or Auto",
                header.attach
            )));
        }
        if queues > header.xsks_max {
            return Err(io::Error::other(format!(
                "queue {} is past the {} sockets the shared steering program takes",
                queues.saturating_sub(1),
                header.xsks_max
            )));
        }
        let [link, xsks, ports, flows, counts, addrs] = fds;
        let mut steering = Steering {
            ifindex,
            attach: header.attach,
            rx_hash: header.rx_hash,
            _link: link,
            xsks,
            ports,
            flows,
            counts,
            addrs,
            ports_max: header.ports_max,
            flows_max: header.flows_max,
            hold: cfg.hold.clone(),
            netns: NetNs::current()?,
            state: Mutex::new(State::default()),
            refused: AtomicU64::new(0),
            joined: true,
            server: None,
        };
        steering.add_addresses(&cfg.addresses)?;
        steering.serve(header)?;
        Ok(steering)
    }

    /// Adds addresses of linerate's own to the program's map.
    fn add_addresses(&self, addresses: &[IpAddr]) -> io::Result<()> {
        for ip in addresses {
            update(
                &self.addrs,
                &addr_key(*ip),
                &1u32.to_ne_bytes(),
                libxdp_sys::BPF_ANY,
            )
            .map_err(|e| io::Error::new(e.kind(), format!("adding address {ip}: {e}")))?;
        }
        Ok(())
    }

    /// Starts lending the program to other processes.
    fn serve(&mut self, header: share::Header) -> io::Result<()> {
        let fds = [
            self._link.try_clone()?,
            self.xsks.try_clone()?,
            self.ports.try_clone()?,
            self.flows.try_clone()?,
            self.counts.try_clone()?,
            self.addrs.try_clone()?,
        ];
        self.server = Some(share::Server::start(self.ifindex, header, fds)?);
        Ok(())
    }

    /// [`Steering::attach`] with a program of this process's own.
    fn attach_own(
        ifindex: u32,
        attach: XdpAttach,
        queues: u32,
        cfg: &SteerConfig,
        frags: bool,
    ) -> io::Result<Steering> {
        if cfg.rx_hash && attach != XdpAttach::Generic {
            match Steering::attach_variant(ifindex, XdpAttach::Native, queues, cfg, frags, true) {
                Ok(s) => return Ok(s),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    return Err(e);
                }
                Err(_) => {}
            }
        }
        Steering::attach_variant(ifindex, attach, queues, cfg, frags, false)
    }

    fn attach_variant(
        ifindex: u32,
        attach: XdpAttach,
        queues: u32,
        cfg: &SteerConfig,
        frags: bool,
        hash: bool,
    ) -> io::Result<Steering> {
        #[allow(unsafe_code)]
        // SAFETY: OBJECT is a static byte buffer libbpf only reads (it copies
        // what it keeps); no options.
        let obj = unsafe {
            libxdp_sys::bpf_object__open_mem(OBJECT.as_ptr().cast(), OBJECT.len(), std::ptr::null())
        };
        if obj.is_null() {
            return Err(io::Error::last_os_error());
        }
        let obj = Object(obj);
        for (name, entries) in [
            (c"xsks", queues.max(1)),
            (c"ports", cfg.ports.max(1)),
            (c"flows", cfg.flows.max(1)),
            (
                c"addrs",
                u32::try_from(cfg.addresses.len())
                    .unwrap_or(u32::MAX)
                    .max(1),
            ),
        ] {
            let m = obj.map(name)?;
            #[allow(unsafe_code)]
            // SAFETY: a map of the live object, before it is loaded.
            let rc = unsafe { libxdp_sys::bpf_map__set_max_entries(m, entries) };
            if rc < 0 {
                return Err(errno(rc));
            }
        }
        // One of the object's four programs is loaded: the `xdp.frags` ones
        // for multi-buffer sockets, the `_hash` ones bound to the device.
        let name = match (frags, hash) {
            (false, false) => c"linerate_steer",
            (true, false) => c"linerate_steer_frags",
            (false, true) => c"linerate_steer_hash",
            (true, true) => c"linerate_steer_frags_hash",
        };
        for other in [
            c"linerate_steer",
            c"linerate_steer_frags",
            c"linerate_steer_hash",
            c"linerate_steer_frags_hash",
        ] {
            #[allow(unsafe_code)]
            // SAFETY: a live, opened object and a NUL-terminated name.
            let p = unsafe { libxdp_sys::bpf_object__find_program_by_name(obj.0, other.as_ptr()) };
            if p.is_null() {
                continue;
            }
            let rc = if other == name {
                if !hash {
                    continue;
                }
                #[allow(unsafe_code)]
                // SAFETY: a program of the live object, before it is loaded.
                unsafe {
                    libxdp_sys::bpf_program__set_ifindex(p, ifindex);
                }
                #[allow(unsafe_code)]
                // SAFETY: as above; the flags keep what the section set
                // (BPF_F_XDP_HAS_FRAGS for `xdp.frags`).
                unsafe {
                    let flags = libxdp_sys::bpf_program__flags(p);
                    libxdp_sys::bpf_program__set_flags(p, flags | BPF_F_XDP_DEV_BOUND_ONLY)
                }
            } else {
                #[allow(unsafe_code)]
                // SAFETY: a program of the live object, before it is loaded.
                unsafe {
                    libxdp_sys::bpf_program__set_autoload(p, false)
                }
            };
            if rc < 0 {
                return Err(errno(rc));
            }
        }
        #[allow(unsafe_code)]
        // SAFETY: a live, opened object.
        let rc = unsafe { libxdp_sys::bpf_object__load(obj.0) };
        if rc < 0 {
            return Err(errno(rc));
        }
        #[allow(unsafe_code)]
        // SAFETY: a live, loaded object and a NUL-terminated name.
        let prog = unsafe { libxdp_sys::bpf_object__find_program_by_name(obj.0, name.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::other(format!(
                "the steering object has no program {}",
                name.to_string_lossy()
            )));
        }
        #[allow(unsafe_code)]
        // SAFETY: a program of the live, loaded object.
        let prog_fd = unsafe { libxdp_sys::bpf_program__fd(prog) };
        if prog_fd < 0 {
            return Err(errno(prog_fd));
        }
        let link = |flags: u32| -> io::Result<OwnedFd> {
            #[allow(unsafe_code)]
            // SAFETY: an all-zero options struct is valid (libbpf reads `sz`
            // and the fields it knows; zero means unset).
            let mut opts: libxdp_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
            opts.sz = size_of::<libxdp_sys::bpf_link_create_opts>();
            opts.flags = flags;
            let ifindex = libc::c_int::try_from(ifindex)
                .map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
            #[allow(unsafe_code)]
            // SAFETY: a loaded program's descriptor and live options.
            let fd = unsafe {
                libxdp_sys::bpf_link_create(
                    prog_fd,
                    ifindex,
                    libxdp_sys::bpf_attach_type_BPF_XDP,
                    &raw const opts,
                )
            };
            if fd < 0 {
                return Err(errno(fd));
            }
            #[allow(unsafe_code)]
            // SAFETY: a new descriptor returned to us alone.
            let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            Ok(owned)
        };
        let (link, attach) = match attach {
            XdpAttach::Native => (link(XDP_FLAGS_DRV_MODE)?, XdpAttach::Native),
            XdpAttach::Generic => (link(XDP_FLAGS_SKB_MODE)?, XdpAttach::Generic),
            XdpAttach::Auto => match link(XDP_FLAGS_DRV_MODE) {
                Ok(l) => (l, XdpAttach::Native),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    return Err(e);
                }
                Err(_) => (link(XDP_FLAGS_SKB_MODE)?, XdpAttach::Generic),
            },
        };
        let mut steering = Steering {
            ifindex,
            attach,
            rx_hash: hash,
            _link: link,
            xsks: obj.map_fd(c"xsks")?,
            ports: obj.map_fd(c"ports")?,
            flows: obj.map_fd(c"flows")?,
            counts: obj.map_fd(c"counts")?,
            addrs: obj.map_fd(c"addrs")?,
            ports_max: cfg.ports.max(1),
            flows_max: cfg.flows.max(1),
            hold: cfg.hold.clone(),
            netns: NetNs::current()?,
            state: Mutex::new(State::default()),
            refused: AtomicU64::new(0),
            joined: false,
            server: None,
        };
        steering.add_addresses(&cfg.addresses)?;
        // The object (and its descriptors) closes here: the link holds the
        // program, our duplicates hold the maps.
        drop(obj);
        steering.serve(share::Header {
            attach,
            rx_hash: hash,
            frags,
            xsks_max: queues.max(1),
            ports_max: steering.ports_max,
            flows_max: steering.flows_max,
        })?;
        Ok(steering)
    }

    /// Puts queue `queue`'s AF_XDP socket in the program's socket map.
    pub(crate) fn add_socket(&self, queue: u32, fd: RawFd) -> io::Result<()> {
        update(
            &self.xsks,
            &queue.to_ne_bytes(),
            &fd.to_ne_bytes(),
            libxdp_sys::BPF_ANY,
        )
    }

    /// Whether the program reads the device's RSS hash into each redirected
    /// frame's metadata ([`SteerConfig::rx_hash`], where it could be loaded).
    pub fn rx_hash(&self) -> bool {
        self.rx_hash
    }

    /// Whether another process attached the program and lent it to this one.
    pub fn joined(&self) -> bool {
        self.joined
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// How the program is attached ([`XdpAttach::Auto`] resolved).
    pub fn attach_mode(&self) -> XdpAttach {
        self.attach
    }

    /// Claims refused because a map was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// What the program decided so far, summed over CPUs.
    pub fn counts(&self) -> io::Result<SteerCounts> {
        let cpus = possible_cpus();
        let mut values = vec![0u64; cpus];
        let mut sums = [0u64; 10];
        for (i, sum) in (0u32..).zip(sums.iter_mut()) {
            #[allow(unsafe_code)]
            // SAFETY: a per-CPU array of u64: the kernel writes one value per
            // possible CPU into `values`, which has that many.
            let rc = unsafe {
                libxdp_sys::bpf_map_lookup_elem(
                    self.counts.as_raw_fd(),
                    std::ptr::from_ref(&i).cast(),
                    values.as_mut_ptr().cast(),
                )
            };
            if rc < 0 {
                return Err(errno(rc));
            }
            *sum = values.iter().sum();
        }
        let [
            passed,
            port,
            flow,
            icmp,
            arp,
            nd,
            addr,
            frag,
            no_socket,
            malformed,
        ] = sums;
        Ok(SteerCounts {
            passed,
            port,
            flow,
            icmp,
            arp,
            nd,
            addr,
            frag,
            no_socket,
            malformed,
        })
    }

    /// The 4-tuples in the program's map now (walks the map: for tests and
    /// diagnostics, not for a data path).
    pub fn flows(&self) -> io::Result<usize> {
        let mut key = [0u8; 40];
        let mut next = [0u8; 40];
        let mut n = 0;
        let mut first = true;
        loop {
            let prev = if first {
                std::ptr::null()
            } else {
                key.as_ptr().cast()
            };
            #[allow(unsafe_code)]
            // SAFETY: `prev` is null or a live key of the map's size; `next`
            // receives one key of that size.
            let rc = unsafe {
                libxdp_sys::bpf_map_get_next_key(
                    self.flows.as_raw_fd(),
                    prev,
                    next.as_mut_ptr().cast(),
                )
            };
            if rc < 0 {
                let e = errno(rc);
                return if e.raw_os_error() == Some(libc::ENOENT) {
                    Ok(n)
                } else {
                    Err(e)
                };
            }
            n += 1;
            key = next;
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_the_programs_layout() {
        assert_eq!(port_key(L4::Tcp, 0x1234), [6, 0, 0x12, 0x34]);
        let l: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let r: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        let k = flow_key(L4::Udp, l, r).unwrap();
        assert_eq!(k[..8], [17, 4, 0, 80, 0x9c, 0x40, 0, 0]);
        assert_eq!(k[8..12], [10, 0, 0, 2]);
        assert_eq!(k[24..28], [10, 0, 0, 1]);
        assert!(k[12..24].iter().chain(&k[28..]).all(|b| *b == 0));
        let l6: SocketAddr = "[fd00::2]:80".parse().unwrap();
        assert!(matches!(flow_key(L4::Tcp, l6, r), Err(ClaimError::Family)));
        let r6: SocketAddr = "[fd00::1]:5".parse().unwrap();
        let k6 = flow_key(L4::Tcp, l6, r6).unwrap();
        assert_eq!(k6[1], 6);
        assert_eq!(k6[23], 2);
        assert_eq!(k6[39], 1);
        assert_eq!(
            addr_key("10.1.2.3".parse().unwrap())[..8],
            [4, 0, 0, 0, 10, 1, 2, 3]
        );
    }
}
