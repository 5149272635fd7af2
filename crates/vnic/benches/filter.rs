//! The filter classifier with 10,000 rules: frames classified per second, field
//! extraction included.
//!
//! The rule set is a tenant's security policy at scale, in order:
//!
//! * 10 `Count` rules on source /8s (monitoring);
//! * 4,000 rules allowing or steering TCP to one host and port (dst /32, proto, port);
//! * 2,000 rules dropping UDP from a /24 to a port;
//! * 1,500 rules on a /16 source and a destination port range of up to 100
//!   ports (expanded to the prefixes that cover it);
//! * 1,000 rules dropping a source MAC;
//! * 1,000 rules on tunnelled traffic: a VNI and the inner destination /32;
//! * 489 rules on IPv6 destinations /64;
//! * the last: drop everything else.
//!
//! The traffic: 4,096 frames, mostly hitting the large groups, some tunnelled, some
//! matching only the last rule. `tss_10000_batch` is the classifier on batches
//! of 32 (as a vNIC's receive path has them), `tss_10000_one` one frame at a
//! time; `scan_10000` the
//! in-order reference on 64 of the frames, for scale; `extract` the field
//! extraction alone.
//!
//! Run with `cargo bench -p linerate-vnic --bench filter`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use linerate_vnic::filter::{
    Action, Filters, FlowKey, IpPrefix, Level, Match, PortRange, Rule, Verdict, naive,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn v4(a: u32, len: u8) -> Option<IpPrefix> {
    Some(IpPrefix {
        addr: IpAddr::V4(Ipv4Addr::from(a)),
        len,
    })
}

fn host(i: u64) -> u32 {
    0x0a00_0000 | (i as u32 & 0xffff)
}

fn v6(i: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[6..8].copy_from_slice(&(i as u16).to_be_bytes());
    a[15] = 1;
    a
}

fn rules() -> Vec<Rule> {
    let mut r = Vec::new();
    let rule = |when: Match, action: Action| Rule { when, action };
    for i in 0..10 {
        r.push(rule(
            Match {
                src_ip: v4((20 + i) << 24, 8),
                ..Match::default()
            },
            Action::Count,
        ));
    }
    for i in 0..4000u64 {
        let action = if i % 3 == 0 {
            Action::Steer((i % 4) as u16)
        } else {
            Action::Allow
        };
        r.push(rule(
            Match {
                dst_ip: v4(host(i), 32),
                proto: Some(6),
                dst_port: Some(PortRange {
                    lo: 80 + (i % 7) as u16,
                    hi: 80 + (i % 7) as u16,
                }),
                ..Match::default()
            },
            action,
        ));
    }
    for i in 0..2000u64 {
        let p = 5000 + (i % 50) as u16;
        r.push(rule(
            Match {
                src_ip: v4(0xac10_0000 | ((i as u32) << 8), 24),
                proto: Some(17),
                dst_port: Some(PortRange { lo: p, hi: p }),
                ..Match::default()
            },
            Action::Drop,
        ));
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..1500u64 {
        let lo = 1024 + rng.below(60000) as u16;
        let hi = lo.saturating_add(rng.below(100) as u16);
        r.push(rule(
            Match {
                src_ip: v4(0xc0a8_0000 + ((i as u32) << 16), 16),
                dst_port: Some(PortRange { lo, hi }),
                ..Match::default()
            },
            if i % 2 == 0 {
                Action::Drop
            } else {
                Action::Allow
            },
        ));
    }
    for i in 0..1000u64 {
        r.push(rule(
            Match {
                src_mac: Some([2, 0xee, 0, 0, (i >> 8) as u8, i as u8]),
                ..Match::default()
            },
            Action::Drop,
        ));
    }
    for i in 0..1000u64 {
        r.push(rule(
            Match {
                level: Level::Inner,
                vni: Some(1000 + (i % 100) as u32),
                dst_ip: v4(host(i), 32),
                ..Match::default()
            },
            Action::Allow,
        ));
    }
    for i in 0..489u64 {
        r.push(rule(
            Match {
                dst_ip: Some(IpPrefix {
                    addr: IpAddr::V6(Ipv6Addr::from(v6(i))),
                    len: 64,
                }),
                proto: Some(6),
                ..Match::default()
            },
            Action::Allow,
        ));
    }
    r.push(rule(Match::default(), Action::Drop));
    assert_eq!(r.len(), 10_000);
    r
}

fn frames() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let macs = |i: u64| ([2, 0, 0, 0, 0, 1], [2, 0xee, 0, 0, (i >> 8) as u8, i as u8]);
    (0..4096)
        .map(|n| {
            let i = rng.below(4000);
            let (dst_mac, src_mac) = macs(2000 + i);
            let b = match n % 20 {
                0..=9 => FrameBuilder::new(
                    Ip::v4([21, 0, 0, 1], host(i).to_be_bytes()),
                    L4::tcp(40000, 80 + (i % 7) as u16),
                ),
                10..=13 => FrameBuilder::new(
                    Ip::v4(
                        (0xac10_0000 | ((i as u32 % 2000) << 8) | 5).to_be_bytes(),
                        [10, 0, 0, 1],
                    ),
                    L4::udp(999, 5000 + (i % 50) as u16),
                ),
                14 | 15 => FrameBuilder::new(
                    Ip::v4(
                        (0xc0a8_0000 + ((i as u32 % 1500) << 16) + 9).to_be_bytes(),
                        [10, 0, 0, 1],
                    ),
                    L4::tcp(999, 1024 + rng.below(60000) as u16),
                ),
                16 => FrameBuilder::new(
                    Ip::v4([10, 9, 9, 9], host(i % 1000).to_be_bytes()),
                    L4::udp(1, 2),
                )
                .vxlan(
                    1000 + (i % 100) as u32,
                    Ip::v4([172, 16, 0, 1], [172, 16, 0, 2]),
                ),
                17 => FrameBuilder::new(Ip::v6(v6(99), v6(i % 489)), L4::tcp(1, 443)),
                _ => FrameBuilder::new(Ip::v4([8, 8, 8, 8], [10, 200, 0, 1]), L4::udp(53, 53)),
            };
            b.macs(src_mac, dst_mac).build(&[0u8; 18])
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rules = rules();
    let frames = frames();
    let mut f = Filters::new(rules.clone()).expect("valid rules");
    eprintln!(
        "filter: {} rules, {} tuples, {} entries",
        f.len(),
        f.tuples(),
        f.entries()
    );
    let keys: Vec<FlowKey> = frames.iter().map(|b| FlowKey::extract(b)).collect();
    // The classifier and the reference agree on this traffic.
    let mut hits = vec![0; rules.len()];
    for k in keys.iter().take(256) {
        assert_eq!(f.classify(k), naive::scan(&rules, k, &mut hits));
    }

    let mut g = c.benchmark_group("filter");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(frames.len() as u64));
    let mut keys32 = [FlowKey::default(); 32];
    let mut verdicts = [Verdict::Allow; 32];
    g.bench_function("tss_10000_batch", |b| {
        b.iter(|| {
            let mut dropped = 0u32;
            for chunk in frames.chunks(32) {
                for (k, fr) in keys32.iter_mut().zip(chunk) {
                    k.fill(fr);
                }
                f.classify_batch(&keys32[..chunk.len()], &mut verdicts);
                dropped += verdicts.iter().filter(|&&v| v == Verdict::Drop).count() as u32;
            }
            black_box(dropped)
        })
    });
    g.bench_function("tss_10000_one", |b| {
        b.iter(|| {
            let mut dropped = 0u32;
            for fr in &frames {
                dropped += u32::from(f.classify_frame(fr) == Verdict::Drop);
            }
            black_box(dropped)
        })
    });
    g.bench_function("extract", |b| {
        b.iter(|| {
            for fr in &frames {
                black_box(FlowKey::extract(fr));
            }
        })
    });
    g.throughput(Throughput::Elements(64));
    g.bench_function("scan_10000", |b| {
        b.iter(|| {
            for k in keys.iter().take(64) {
                black_box(naive::scan(&rules, k, &mut hits));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
