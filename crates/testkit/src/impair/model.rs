//! The per-frame decisions of one direction of an impaired link, as Linux's
//! `sch_netem` makes them (`netem_enqueue` in `net/sched/sch_netem.c`), from a
//! seeded generator: the same seed and the same frames give the same decisions.
//!
//! Order of the draws for each frame, as netem's:
//!
//! 1. duplication: with probability `duplicate` the frame is sent twice; the copy
//!    is taken before corruption and goes through the model again (its own loss,
//!    corruption and delay draws, never duplicated again), as netem re-enqueues
//!    its clone at the root qdisc with duplication off;
//! 2. loss: with probability `loss` one copy fewer is sent (a duplicated frame
//!    that is "lost" is still sent once, as in netem);
//! 3. corruption: with probability `corrupt` one bit of the frame, at a uniformly
//!    drawn byte and bit, is flipped;
//! 4. reordering: with probability `reorder` (netem's `reorder P` with its
//!    implied `gap 1`) the frame skips the delay and leaves at once, ahead of
//!    the frames still held; netem only reorders when a delay is set;
//! 5. delay: `delay` plus a uniform draw in `[-jitter, +jitter]` (netem's default
//!    table-less distribution), so jitter reorders frames whose times cross, as
//!    netem's time-sorted queue (`tfifo`) does, unless `keep_order` is set
//!    (then a frame never leaves before the one that came in before it, as on a
//!    path whose delay varies by queueing);
//! 6. rate: with a `rate`, each frame also waits for the frames before it to be
//!    serialised at that rate (netem's `rate`, without its per-packet overhead).
//!
//! At most `limit` frames are held; more are dropped and counted (netem's
//! `limit`, default 1000 there; larger here so that a fast flow over a 5 ms
//! path is not limited by it).

use std::time::Duration;

/// The impairments of one direction. `Default` is a clean link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Probability that a frame is lost (0 to 1).
    pub loss: f64,
    /// Fixed delay of every frame.
    pub delay: Duration,
    /// Each frame's delay is `delay` plus a uniform draw in `[-jitter, +jitter]`
    /// (never below zero).
    pub jitter: Duration,
    /// Jitter never reorders: a frame leaves no earlier than the one before it.
    pub keep_order: bool,
    /// Probability that a frame skips the delay (netem's `reorder`).
    pub reorder: f64,
    /// Probability that a frame is sent twice.
    pub duplicate: f64,
    /// Probability that one bit of a frame is flipped.
    pub corrupt: f64,
    /// Link rate in bits per second, if limited.
    pub rate: Option<u64>,
    /// Frames held at most; more are dropped (`overflow`).
    pub limit: usize,
}

impl Default for Impairment {
    fn default() -> Self {
        Impairment::CLEAN
    }
}

impl Impairment {
    /// No impairment at all: every frame passes at once.
    pub const CLEAN: Impairment = Impairment {
        loss: 0.0,
        delay: Duration::ZERO,
        jitter: Duration::ZERO,
        keep_order: false,
        reorder: 0.0,
        duplicate: 0.0,
        corrupt: 0.0,
        rate: None,
        limit: 20_000,
    };

    /// True if this impairment changes nothing.
    pub fn is_clean(&self) -> bool {
        self.loss <= 0.0
            && self.delay.is_zero()
            && self.jitter.is_zero()
            && self.reorder <= 0.0
            && self.duplicate <= 0.0
            && self.corrupt <= 0.0
            && self.rate.is_none()
    }
}

/// A small seeded generator (SplitMix64): fast, and the same sequence for a seed
/// on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        // 53 random bits: every value exactly representable.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A uniform draw in `[0, n)` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for test impairments.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// One copy of a frame to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// When it leaves (nanoseconds, on the caller's clock).
    pub due: u64,
    /// The bit to flip, if corrupted: byte index and bit (0 to 7).
    pub flip: Option<(usize, u8)>,
}

/// What happens to one frame: up to two copies (the frame and a duplicate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// The frame itself, unless lost.
    pub first: Option<Delivery>,
    /// Its duplicate, if duplicated and not lost.
    pub copy: Option<Delivery>,
}

impl Verdict {
    /// The copies to send, in the order they were decided.
    pub fn deliveries(&self) -> impl Iterator<Item = Delivery> + '_ {
        self.first.iter().chain(self.copy.iter()).copied()
    }
}

/// What a model did, by kind (each frame counted once under each that applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImpairCounters {
    /// Frames offered to the model.
    pub frames: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Loss draws that hit (a duplicated frame hit once is still sent once,
    /// as in netem; its copy draws again).
    pub lost: u64,
    /// Frames drawn for duplication.
    pub duplicated: u64,
    /// Copies with one bit flipped.
    pub corrupted: u64,
    /// Copies sent at once, skipping the delay (netem's reorder).
    pub reordered: u64,
    /// Copies dropped because `limit` frames were held.
    pub overflow: u64,
    /// Copies released ([`crate::impair::DelayLine`] counts these).
    pub released: u64,
    /// Copies released after a copy that had come in later (reordered on the
    /// wire, by `reorder` or by jitter).
    pub out_of_order: u64,
}

/// The decisions of one direction: an [`Impairment`] and its generator.
#[derive(Debug, Clone)]
pub struct Model {
    cfg: Impairment,
    rng: Rng,
    /// When the link is free again (rate), and the latest due time handed out
    /// (keep_order).
    link_free: u64,
    last_due: u64,
    /// Counts of what was decided.
    pub counters: ImpairCounters,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Model {
    /// A model of `cfg` whose draws come from `seed`.
    pub fn new(cfg: Impairment, seed: u64) -> Model {
        Model {
            cfg,
            rng: Rng::new(seed),
            link_free: 0,
            last_due: 0,
            counters: ImpairCounters::default(),
        }
    }

    /// The impairment.
    pub fn config(&self) -> &Impairment {
        &self.cfg
    }

    /// Decides the fate of a frame of `len` bytes arriving at `now`
    /// (nanoseconds); `held` is how many frames wait already (for `limit`).
    pub fn decide(&mut self, now: u64, len: usize, held: usize) -> Verdict {
        self.counters.frames += 1;
        self.counters.bytes += len as u64;
        // netem: count = 1, +1 if duplicated, -1 if lost; the clone (count 2)
        // is enqueued again with duplication off, so it draws its own loss.
        let dup = self.rng.chance(self.cfg.duplicate);
        if dup {
            self.counters.duplicated += 1;
        }
        let lost = self.rng.chance(self.cfg.loss);
        if lost {
            self.counters.lost += 1;
        }
        let mut v = Verdict::default();
        if lost && !dup {
            return v;
        }
        let mut held = held;
        v.first = self.place(now, len, &mut held);
        if dup && !lost {
            if self.rng.chance(self.cfg.loss) {
                self.counters.lost += 1;
            } else {
                v.copy = self.place(now, len, &mut held);
            }
        }
        v
    }

    /// Corruption, reordering, delay, rate and limit for one copy.
    fn place(&mut self, now: u64, len: usize, held: &mut usize) -> Option<Delivery> {
        let flip = if self.rng.chance(self.cfg.corrupt) {
            self.counters.corrupted += 1;
            let byte = self.rng.below(len as u64) as usize;
            let bit = self.rng.below(8) as u8;
            Some((byte, bit))
        } else {
            None
        };
        if *held >= self.cfg.limit {
            self.counters.overflow += 1;
            return None;
        }
        *held += 1;
        let delayed = !self.cfg.delay.is_zero() || !self.cfg.jitter.is_zero();
        if delayed && self.rng.chance(self.cfg.reorder) {
            self.counters.reordered += 1;
            return Some(Delivery { due: now, flip });
        }
        let mut start = now;
        if let Some(rate) = self.cfg.rate.filter(|&r| r > 0) {
            let bits = (len as u128) * 8 * 1_000_000_000;
            let tx = u64::try_from(bits / u128::from(rate)).unwrap_or(u64::MAX);
            self.link_free = self.link_free.max(now).saturating_add(tx);
            start = self.link_free;
        }
        let mut due = start.saturating_add(nanos(self.cfg.delay));
        let jitter = nanos(self.cfg.jitter);
        if jitter > 0 {
            let spread = self.rng.below(jitter.saturating_mul(2).saturating_add(1));
            due = due.saturating_add(spread).saturating_sub(jitter).max(now);
        }
        if self.cfg.keep_order {
            due = due.max(self.last_due);
        }
        self.last_due = self.last_due.max(due);
        Some(Delivery { due, flip })
    }
}
