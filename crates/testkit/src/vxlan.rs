//! The Linux kernel's own VXLAN device as a tunnel peer (docs/testing.md), over
//! a TAP whose other end this process owns as the underlay.
//!
//! [`KernelVtep::new`] creates a namespace, opens a TAP (with a `virtio_net_hdr`
//! and the kernel's offloads toward this side on or off), moves it into the
//! namespace with the kernel's underlay address (IPv4 or IPv6), and adds
//! `ip link add vx0 type vxlan id N remote <ours> local <kernel's> dstport P` with
//! the kernel's overlay addresses (IPv4 and IPv6) on it. The [`Tap`] is then
//! linerate's underlay NIC: take it with [`KernelVtep::take_tap`] and put a tunnel
//! over it with [`KernelVtep::ours_underlay`] as its VTEP address.
//!
//! Everything lives in the namespace, so dropping the [`KernelVtep`] (also when a
//! test fails and unwinds) removes the VXLAN device, the TAP and the namespace.
//! Names include the process id ([`crate::netns::unique`]). Root only.
//!
//! Two of them, the second [`VxlanSpec::mirrored`], with a process copying frames
//! between their TAPs, are two kernel VXLAN endpoints talking through this
//! process: the harness's own check, and a capture of what Linux sends.

use crate::netns::{self, Netns};
use linerate_nic::Offloads;
use linerate_nic::tap::{Tap, TapConfig, TapOffloads};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IANA VXLAN port (RFC 7348).
pub const IANA_PORT: u16 = 4789;
/// The port Linux's VXLAN used before the IANA one, still a common default.
pub const LINUX_PORT: u16 = 8472;

/// The kernel's underlay address when the underlay is IPv4.
pub const KERNEL_UNDERLAY_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// linerate's underlay (VTEP) address when the underlay is IPv4.
pub const OUR_UNDERLAY_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// The kernel's underlay address when the underlay is IPv6.
pub const KERNEL_UNDERLAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 1);
/// linerate's underlay (VTEP) address when the underlay is IPv6.
pub const OUR_UNDERLAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 2);
/// The kernel's IPv4 address inside the tunnel (on `vx0`), prefix 24.
pub const KERNEL_OVERLAY_V4: Ipv4Addr = Ipv4Addr::new(192, 168, 42, 1);
/// linerate's IPv4 address inside the tunnel.
pub const OUR_OVERLAY_V4: Ipv4Addr = Ipv4Addr::new(192, 168, 42, 2);
/// The kernel's IPv6 address inside the tunnel (on `vx0`), prefix 64.
pub const KERNEL_OVERLAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 1);
/// linerate's IPv6 address inside the tunnel.
pub const OUR_OVERLAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 2);

/// Bytes VXLAN adds in front of an inner frame (outer Ethernet, IP, UDP, VXLAN):
/// 50 over IPv4, 70 over IPv6.
pub fn encap_len(underlay_v6: bool) -> u16 {
    if underlay_v6 {
        14 + 40 + 8 + 8
    } else {
        14 + 20 + 8 + 8
    }
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// IPv6 underlay (else IPv4).
    pub underlay_v6: bool,
    /// The VNI.
    pub vni: u32,
    /// The UDP destination port `vx0` sends to and listens on.
    pub port: u16,
    /// The kernel's offloads toward this side on the TAP (`TUNSETOFFLOAD`):
    /// [`TapOffloads::ALL`] lets the kernel hand over (tunnel) super-frames with
    /// partial checksums, [`TapOffloads::NONE`] makes it segment and checksum
    /// everything itself.
    pub offloads: TapOffloads,
    /// The transmit offloads the TAP presents to linerate (the kernel then
    /// completes checksums and segments): [`Offloads::ALL`] by default;
    /// [`Offloads::NONE`] leaves it all to a software shim above the TAP, so a
    /// capture on the TAP shows finished frames.
    pub tap_tx: Offloads,
    /// The kernel's outer UDP checksum: `udpcsum` over IPv4, and over IPv6 both
    /// sending and requiring one (`noudp6zerocsumtx noudp6zerocsumrx`); `false`:
    /// zero checksums (`noudpcsum`, `udp6zerocsumtx udp6zerocsumrx`).
    pub udp_csum: bool,
    /// The underlay MTU (TAP and kernel interface); `vx0` gets this minus the
    /// encapsulation.
    pub mtu: u16,
    /// The kernel's underlay address and linerate's (the VXLAN `local` and
    /// `remote`).
    pub kernel_underlay: IpAddr,
    /// linerate's underlay (VTEP) address.
    pub ours_underlay: IpAddr,
    /// The kernel's overlay addresses on `vx0`.
    pub kernel_overlay: (Ipv4Addr, Ipv6Addr),
    /// linerate's overlay addresses.
    pub ours_overlay: (Ipv4Addr, Ipv6Addr),
    /// A multicast group for `vx0` (`group G dev <TAP>` instead of `remote`):
    /// floods go to the group, and the kernel joins it on the TAP.
    pub group: Option<IpAddr>,
    /// The TAP's batched mode: an io_uring of this depth
    /// ([`TapConfig::io_uring`]); `None` (the default): a system call per frame.
    pub io_uring: Option<u32>,
    /// With `io_uring`: receive through a multishot read
    /// ([`TapConfig::io_uring_multishot`]) or reads kept posted (the default).
    pub io_uring_multishot: bool,
}

impl VxlanSpec {
    /// VNI `vni` on `port`, the constants' addresses, MTU 1500, offloads on,
    /// the kernel's default outer checksums (none over IPv4, computed over IPv6).
    pub fn new(underlay_v6: bool, vni: u32, port: u16) -> VxlanSpec {
        let (kernel_underlay, ours_underlay) = if underlay_v6 {
            (KERNEL_UNDERLAY_V6.into(), OUR_UNDERLAY_V6.into())
        } else {
            (KERNEL_UNDERLAY_V4.into(), OUR_UNDERLAY_V4.into())
        };
        VxlanSpec {
            underlay_v6,
            vni,
            port,
            offloads: TapOffloads::ALL,
            tap_tx: Offloads::ALL,
            udp_csum: underlay_v6,
            mtu: 1500,
            kernel_underlay,
            ours_underlay,
            kernel_overlay: (KERNEL_OVERLAY_V4, KERNEL_OVERLAY_V6),
            ours_overlay: (OUR_OVERLAY_V4, OUR_OVERLAY_V6),
            group: None,
            io_uring: None,
            io_uring_multishot: false,
        }
    }

    /// The same with the kernel's and linerate's addresses swapped: a second
    /// kernel endpoint standing where linerate would.
    pub fn mirrored(&self) -> VxlanSpec {
        VxlanSpec {
            kernel_underlay: self.ours_underlay,
            ours_underlay: self.kernel_underlay,
            kernel_overlay: self.ours_overlay,
            ours_overlay: self.kernel_overlay,
            ..self.clone()
        }
    }

    /// `vx0`'s MTU: the underlay's minus the encapsulation (outer IP, UDP and
    /// VXLAN headers, and the inner Ethernet header the overlay MTU does not
    /// count): 1450 over IPv4, 1430 over IPv6 at 1500.
    pub fn overlay_mtu(&self) -> u16 {
        self.mtu.saturating_sub(encap_len(self.underlay_v6))
    }
}

/// The kernel's VXLAN endpoint in a namespace, and the TAP that is its underlay.
#[derive(Debug)]
pub struct KernelVtep {
    // Field order matters: the TAP closes before the namespace goes.
    tap: Option<Tap>,
    /// The namespace holding the TAP's kernel side and `vx0`.
    pub ns: Netns,
    /// What was built.
    pub spec: VxlanSpec,
    /// The TAP's name (inside the namespace).
    pub tap_name: String,
    /// The VXLAN device's name (inside the namespace).
    pub vxlan_name: String,
}

impl KernelVtep {
    /// Builds the namespace (named after `prefix`, at most 4 characters), the
    /// TAP and the VXLAN device; see the [module documentation](self).
    pub fn new(prefix: &str, spec: &VxlanSpec) -> io::Result<KernelVtep> {
        if !netns::is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a kernel VXLAN endpoint needs root",
            ));
        }
        let ns = Netns::new(prefix)?;
        let tap = Tap::open(&TapConfig {
            offloads: spec.offloads,
            mtu: spec.mtu,
            tx: spec.tap_tx,
            io_uring: spec.io_uring,
            io_uring_multishot: spec.io_uring_multishot,
            ..TapConfig::new(netns::unique(prefix))
        })
        .map_err(io::Error::other)?;
        let tap_name = tap.name().to_owned();
        // Moved into the namespace, the TAP goes with it; until then the Tap's
        // drop removes it.
        netns::ip(&["link", "set", &tap_name, "netns", ns.name()])?;
        let vtep = KernelVtep {
            tap: Some(tap),
            ns,
            spec: spec.clone(),
            tap_name,
            vxlan_name: "vx0".to_owned(),
        };
        vtep.configure()?;
        Ok(vtep)
    }

    /// The same over a TAP another process opened (a VTEP binary's
    /// underlay): `dev`, found in namespace `from`, is moved into a new
    /// namespace and configured there as [`KernelVtep::new`] configures its
    /// own. Dropping it removes the namespace; the device goes when its
    /// owner closes it.
    pub fn adopt(
        prefix: &str,
        spec: &VxlanSpec,
        from: &Netns,
        dev: &str,
    ) -> io::Result<KernelVtep> {
        let ns = Netns::new(prefix)?;
        from.ip(&["link", "set", dev, "netns", ns.name()])?;
        let vtep = KernelVtep {
            tap: None,
            ns,
            spec: spec.clone(),
            tap_name: dev.to_owned(),
            vxlan_name: "vx0".to_owned(),
        };
        vtep.configure()?;
        Ok(vtep)
    }

    fn configure(&self) -> io::Result<()> {
        let s = &self.spec;
        let ns = &self.ns;
        let (tap, vx) = (self.tap_name.as_str(), self.vxlan_name.as_str());
        let (plen, nodad): (u8, &[&str]) = if s.underlay_v6 {
            (64, &["nodad"])
        } else {
            (24, &[])
        };
        let mtu = s.mtu.to_string();
        ns.ip(&["link", "set", tap, "mtu", &mtu])?;
        let cidr = format!("{}/{plen}", s.kernel_underlay);
        ns.ip(&[&["addr", "add", cidr.as_str(), "dev", tap], nodad].concat())?;
        ns.ip(&["link", "set", tap, "up"])?;

        let (vni, port) = (s.vni.to_string(), s.port.to_string());
        let (remote, local) = (s.ours_underlay.to_string(), s.kernel_underlay.to_string());
        let csum: &[&str] = match (s.underlay_v6, s.udp_csum) {
            (false, true) => &["udpcsum"],
            (false, false) => &["noudpcsum"],
            (true, true) => &["noudp6zerocsumtx", "noudp6zerocsumrx"],
            (true, false) => &["udp6zerocsumtx", "udp6zerocsumrx"],
        };
        let group = s.group.map(|g| g.to_string());
        let (peer_kind, peer) = match &group {
            Some(g) => ("group", g.as_str()),
            None => ("remote", remote.as_str()),
        };
        let add = [
            &[
                "link", "add", vx, "type", "vxlan", "id", &vni, peer_kind, peer, "local", &local,
                "dstport", &port, "dev", tap,
            ][..],
            csum,
        ]
        .concat();
        ns.ip(&add)?;
        let vx_mtu = s.overlay_mtu().to_string();
        ns.ip(&["link", "set", vx, "mtu", &vx_mtu])?;
        let v4 = format!("{}/24", s.kernel_overlay.0);
        let v6 = format!("{}/64", s.kernel_overlay.1);
        ns.ip(&["addr", "add", &v4, "dev", vx])?;
        ns.ip(&["addr", "add", &v6, "dev", vx, "nodad"])?;
        ns.ip(&["link", "set", vx, "up"])?;
        Ok(())
    }

    /// The TAP, to be linerate's underlay NIC (once: later calls return `None`).
    /// Keep the [`KernelVtep`] alive while it is used.
    pub fn take_tap(&mut self) -> Option<Tap> {
        self.tap.take()
    }

    /// The TAP, while it has not been taken.
    pub fn tap(&self) -> Option<&Tap> {
        self.tap.as_ref()
    }

    /// linerate's underlay (VTEP) address: `vx0`'s `remote`.
    pub fn ours_underlay(&self) -> IpAddr {
        self.spec.ours_underlay
    }

    /// The MAC address of `dev` inside the namespace.
    pub fn mac(&self, dev: &str) -> io::Result<[u8; 6]> {
        let out = self.ns.ip(&["-o", "link", "show", "dev", dev])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let hex = text
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .ok_or_else(|| io::Error::other(format!("no MAC in {text:?}")))?;
        let mut mac = [0u8; 6];
        let mut parts = hex.split(':');
        for b in &mut mac {
            let p = parts
                .next()
                .ok_or_else(|| io::Error::other(format!("bad MAC {hex}")))?;
            *b = u8::from_str_radix(p, 16).map_err(io::Error::other)?;
        }
        Ok(mac)
    }

    /// The kernel's underlay MAC (the TAP's kernel side): the underlay next hop.
    pub fn kernel_underlay_mac(&self) -> io::Result<[u8; 6]> {
        self.mac(&self.tap_name)
    }

    /// The kernel's overlay MAC (`vx0`).
    pub fn kernel_overlay_mac(&self) -> io::Result<[u8; 6]> {
        self.mac(&self.vxlan_name)
    }

    /// `ip -s -d link show` of `vx0` (its counters), for messages.
    pub fn vxlan_stats(&self) -> String {
        self.ns
            .ip(&["-s", "-d", "link", "show", "dev", &self.vxlan_name])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_mtu_and_mirror() {
        let v4 = VxlanSpec::new(false, 7, LINUX_PORT);
        let v6 = VxlanSpec::new(true, 7, IANA_PORT);
        assert_eq!((v4.overlay_mtu(), v6.overlay_mtu()), (1450, 1430));
        assert!(!v4.udp_csum && v6.udp_csum, "Linux's defaults");
        let m = v6.mirrored();
        assert_eq!(m.kernel_underlay, IpAddr::from(OUR_UNDERLAY_V6));
        assert_eq!(m.ours_overlay.0, KERNEL_OVERLAY_V4);
        assert_eq!(m.mirrored(), v6);
    }
}
