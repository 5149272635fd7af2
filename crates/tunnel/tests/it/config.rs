//! Configurations a tunnel refuses: one case per [`TunnelConfigError`]
//! variant, each checking the figures the error carries and that its message
//! says what to do instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{MAC_A, MAC_B, static_vni};
use linerate_nic::{MemNic, NicCaps};
use linerate_tunnel::{
    Dscp, Encap, GeneveOpt, MAX_REMOTES, Tunnel, TunnelConfigError, VniConfig, VtepConfig,
};
use std::net::{IpAddr, Ipv4Addr};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 11));
const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));

/// What `Tunnel::many` says of `vtep` and `vnis` over a memory port with `caps`.
fn refusal(caps: NicCaps, vtep: VtepConfig, vnis: Vec<VniConfig>) -> TunnelConfigError {
    let (_a, b) = MemNic::pair(caps, caps);
    match Tunnel::many(b, vtep, vnis) {
        Ok(_) => panic!("accepted"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(": "), "{text}");
            e
        }
    }
}

fn vxlan() -> VtepConfig {
    VtepConfig::new(Encap::Vxlan, MAC_B, LOCAL)
}

fn one() -> Vec<VniConfig> {
    vec![static_vni(42, REMOTE, MAC_A)]
}

#[test]
fn a_good_configuration_is_accepted() {
    let (_a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    assert!(Tunnel::many(b, vxlan(), one()).is_ok());
}

#[test]
fn vnis_are_24_bits_and_given_once() {
    let plain = NicCaps::plain();
    assert_eq!(
        refusal(plain, vxlan(), vec![static_vni(1 << 24, REMOTE, MAC_A)]),
        TunnelConfigError::VniTooLarge { vni: 1 << 24 }
    );
    let twice = vec![static_vni(7, REMOTE, MAC_A), static_vni(7, REMOTE, MAC_A)];
    assert_eq!(
        refusal(plain, vxlan(), twice),
        TunnelConfigError::DuplicateVni { vni: 7 }
    );
    assert_eq!(
        refusal(plain, vxlan(), Vec::new()),
        TunnelConfigError::NoVni
    );
}

#[test]
fn the_address_of_the_other_family_is_named() {
    let v6: IpAddr = "2001:db8::a".parse().unwrap();
    let mut vni = static_vni(42, REMOTE, MAC_A);
    vni.allowed_sources = vec![REMOTE, v6];
    let e = refusal(NicCaps::plain(), vxlan(), vec![vni]);
    assert_eq!(
        e,
        TunnelConfigError::Family {
            local: LOCAL,
            other: v6
        }
    );
    assert!(e.to_string().contains("2001:db8::a"), "{e}");
}

#[test]
fn geneve_options_are_checked_one_by_one() {
    let opt = |class: u16, len: usize| GeneveOpt {
        class,
        kind: 1,
        data: vec![0; len],
    };
    let geneve = |options| {
        VtepConfig::new(
            Encap::Geneve {
                options,
                known_critical: Vec::new(),
            },
            MAC_B,
            LOCAL,
        )
    };
    // Not a multiple of 4: the second option is named.
    assert_eq!(
        refusal(NicCaps::plain(), geneve(vec![opt(1, 4), opt(2, 6)]), one()),
        TunnelConfigError::GeneveOption {
            class: 2,
            kind: 1,
            data_len: 6,
            total: 18,
        }
    );
    // Three options of 124 bytes: 384 bytes with their headers, over 252.
    assert_eq!(
        refusal(
            NicCaps::plain(),
            geneve(vec![opt(1, 124), opt(2, 124), opt(3, 124)]),
            one()
        ),
        TunnelConfigError::GeneveOption {
            class: 2,
            kind: 1,
            data_len: 124,
            total: 256,
        }
    );
}

#[test]
fn outer_fields_are_checked() {
    let plain = NicCaps::plain();
    let mut v = vxlan();
    // An empty range, as a configuration file may give one.
    #[allow(clippy::reversed_empty_ranges)]
    {
        v.src_ports = 5..=4;
    }
    assert_eq!(
        refusal(plain, v, one()),
        TunnelConfigError::EmptySourcePorts
    );
    let mut v = vxlan();
    v.port = 0;
    assert_eq!(refusal(plain, v, one()), TunnelConfigError::ZeroPort);
    let mut v = vxlan();
    v.dscp = Dscp::Fixed(64);
    assert_eq!(
        refusal(plain, v, one()),
        TunnelConfigError::Dscp { dscp: 64 }
    );
    let mut v = vxlan();
    v.ttl = 0;
    assert_eq!(refusal(plain, v, one()), TunnelConfigError::ZeroTtl);
}

#[test]
fn an_underlay_mtu_too_small_says_the_least_that_works() {
    // VXLAN over IPv4 takes 14 + 20 + 8 + 8 bytes.
    let caps = NicCaps {
        mtu: 100,
        ..NicCaps::plain()
    };
    let e = refusal(caps, vxlan(), one());
    assert_eq!(
        e,
        TunnelConfigError::Mtu {
            mtu: 100,
            overhead: 50
        }
    );
    assert!(e.to_string().contains("at least 118"), "{e}");
}

#[test]
fn remotes_are_bounded() {
    let mut vni = static_vni(9, REMOTE, MAC_A);
    vni.remotes = (0..=MAX_REMOTES as u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
        .collect();
    assert_eq!(
        refusal(NicCaps::plain(), vxlan(), vec![vni]),
        TunnelConfigError::TooManyRemotes { vni: 9 }
    );
}
