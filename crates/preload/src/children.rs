//! `[nic] children = N`: the TAP queues the program keeps for its forked
//! children, the table of which child holds which, the steering that sends
//! each process its frames, and a child's runtime on its queue (see the
//! crate's `# fork`).

use crate::config::{Config, Device, TapNic};
use crate::stack::{Stack, config, log, runtime_config, stack_of};
use linerate_nic::Tap;
use linerate_nic::claims::Claims;
use linerate_nic::neigh::NeighborSource;
use linerate_nic::tap::TapSteering;
use linerate_rt::Runtime;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Whether forked children may run linerate on queues of their own
/// (`nic.children`).
pub(crate) fn enabled() -> bool {
    config().is_some_and(|c| c.nic.children > 0)
}

/// What the program keeps for its forked children (`nic.children`): the
/// TAP's steering, the queues kept for them (queue `i + 1` at `i`), and
/// which child holds which, in memory the children share.
struct Family {
    steer: Arc<TapSteering>,
    spares: Mutex<Vec<Option<Tap>>>,
    slots: crate::ffi::sys::Slots,
}

static FAMILY: OnceLock<Family> = OnceLock::new();

/// A forked child's runtime: on the first free queue kept for children,
/// with the program's address and MAC, its ports claimed for that queue in
/// the steering program, and next hops read from the program's record of
/// ARP (the replies go to queue 0).
pub(crate) fn start(cfg: &Config) -> Result<Option<Stack>, String> {
    if cfg.nic.children == 0 {
        return Ok(None);
    }
    let Device::Tap(t) = &cfg.nic.device else {
        return Ok(None);
    };
    let fam = FAMILY.get().ok_or(
        "the program had not started linerate on a TAP with nic.children before it forked",
    )?;
    let me = crate::ffi::sys::pid();
    let mut taken = None;
    for (i, slot) in fam.slots.all().iter().enumerate() {
        let holder = slot.load(Acquire);
        if (holder == 0 || (holder > 0 && !crate::ffi::sys::alive(holder)))
            && slot.compare_exchange(holder, me, AcqRel, Acquire).is_ok()
        {
            taken = Some(i);
            break;
        }
    }
    let slot = taken.ok_or_else(|| {
        format!(
            "the {} queue(s) of nic.children are all held by running children; raise nic.children",
            cfg.nic.children
        )
    })?;
    let free = || {
        if let Some(s) = fam.slots.all().get(slot) {
            let _ = s.compare_exchange(me, 0, AcqRel, Acquire);
        }
    };
    // Only this process's library touches the list; a lock held by a
    // thread of the parent at fork time would never be released here.
    let spare = match fam.spares.try_lock() {
        Ok(mut g) => g.get_mut(slot).and_then(Option::take),
        Err(_) => None,
    };
    let Some(spare) = spare else {
        free();
        return Err(format!("the queue of slot {slot} is not in this process"));
    };
    let tap = spare.renew();
    let queue = u32::try_from(tap.first_queue()).unwrap_or(0);
    let steer = Arc::new(fam.steer.for_queue(queue));
    // Claims a killed child on this queue left behind.
    let reaped = steer.reap(queue);
    let mut rc = runtime_config(cfg);
    rc.thread_name = format!("linerate-preload-c{queue}q");
    rc.claims = Some(Arc::clone(&steer) as Arc<dyn Claims>);
    rc.neighbor_source = Some(Arc::clone(&steer) as Arc<dyn NeighborSource>);
    let rt = match Runtime::start(tap, rc) {
        Ok(rt) => rt,
        Err(e) => {
            free();
            return Err(e.to_string());
        }
    };
    tracing::info!(
        tap = %t.name,
        queue,
        reaped,
        "linerate started in a forked process, on a queue of its own"
    );
    Ok(Some(stack_of(cfg, rt, None, Some((slot, steer)))))
}

/// In the program, once its TAP is open with `1 + children` queues: checks
/// that no other process has queues on it, attaches the steering program,
/// keeps queues `1..` for the children and returns queue 0, the program's,
/// with its ports claimed for it in `rc`.
pub(crate) fn keep_queues(
    t: &TapNic,
    tap: Tap,
    rc: &mut linerate_rt::RuntimeConfig,
) -> Result<Tap, String> {
    let children = config().map_or(0, |c| c.nic.children);
    // Queue indices are the order of attachment: ours must be 0..=children,
    // so no other process may have queues on the TAP.
    let attached = std::fs::read_dir(format!("/sys/class/net/{}/queues", tap.name()))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0);
    if attached != usize::from(1 + children) {
        return Err(format!(
            "nic.tap: {} has {} queue(s) attached, {} of them this program's: another process \
             has queues on it (another linerate program, or a child that ran a preloaded \
             program with exec); with nic.children the program must be the TAP's only user",
            tap.name(),
            attached,
            1 + children
        ));
    }
    let steer = Arc::new(TapSteering::attach(&tap).map_err(|e| {
        format!("nic.children: cannot attach the TAP's steering program: {e} (needs root, or CAP_NET_ADMIN and CAP_BPF)")
    })?);
    let slots = crate::ffi::sys::Slots::new(usize::from(children))
        .map_err(|e| format!("nic.children: cannot map the children's table: {e}"))?;
    let mut queues = tap.split().into_iter();
    let first = queues
        .next()
        .ok_or_else(|| format!("nic.tap: {} opened with no queue", t.name))?;
    let spares: Vec<Option<Tap>> = queues.map(Some).collect();
    // The program's own ports are claimed for queue 0, so that no child
    // takes them (and a child's listener on one of them is refused).
    rc.claims = Some(Arc::clone(&steer) as Arc<dyn Claims>);
    let _ = FAMILY.set(Family {
        steer,
        spares: Mutex::new(spares),
        slots,
    });
    Ok(first)
}

/// Starts the program's thread that reaps the claims of killed children.
pub(crate) fn start_reaper() {
    let reaper = std::thread::Builder::new()
        .name("linerate-preload-reap".to_owned())
        .spawn(|| {
            crate::ffi::sys::library_thread();
            loop {
                std::thread::sleep(REAP_EVERY);
                reap_dead_children();
            }
        });
    if let Err(e) = reaper {
        log(format_args!(
            "nic.children: no thread to reap killed children's claims ({e}); the next child on their queue does"
        ));
    }
}

/// At a child's exit, after its runtime stopped: its claims (those the
/// runtime did not release), then its slot.
pub(crate) fn give_back(slot: usize, steer: &TapSteering) {
    steer.release_all();
    steer.reap(steer.queue());
    if let Some(held) = FAMILY.get().and_then(|f| f.slots.all().get(slot)) {
        let _ = held.compare_exchange(crate::ffi::sys::pid(), 0, AcqRel, Acquire);
    }
}

/// How often the program looks for children killed on their queues.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// A slot being reaped: held by nobody, not to be taken yet.
const REAPING: i32 = -1;

/// In the program: the claims of children that died without giving their
/// queue back (killed) are removed, so that frames to their ports come to
/// the program's engine, which resets their connections and refuses new
/// ones, as the kernel does for a process that died; their slots are free
/// again.
fn reap_dead_children() {
    let Some(fam) = FAMILY.get() else {
        return;
    };
    for (i, slot) in fam.slots.all().iter().enumerate() {
        let holder = slot.load(Acquire);
        if holder <= 0 || crate::ffi::sys::alive(holder) {
            continue;
        }
        if slot
            .compare_exchange(holder, REAPING, AcqRel, Acquire)
            .is_ok()
        {
            let queue = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let n = fam.steer.reap(queue);
            tracing::info!(
                pid = holder,
                queue,
                claims = n,
                "a child died holding its queue: its claims are removed"
            );
            slot.store(0, Release);
        }
    }
}
