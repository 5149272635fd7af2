//! The claims' bookkeeping of [`Steering`]: ports counted by listeners and by
//! flows (the port map holds a port while a listener claims it; the kernel's
//! hold lasts while anything does), 4-tuples once each, a full map refused
//! and counted.

use super::{Steering, delete, flow_key, port_key, update};
use crate::claims::{ClaimError, Claims, L4, Table};
use crate::xdp::hold::hold;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

/// The claims of one local port: by listeners (which put it in the port
/// map) and by flows (which only need the kernel's hold), and the kernel
/// sockets holding it.
#[derive(Debug)]
struct Held {
    listens: u32,
    flows: u32,
    /// Closed (the port given back to the kernel) when the claim goes.
    _sockets: Vec<OwnedFd>,
}

/// The claims of every local port.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Claims of each local port, by listeners and by flows.
    ports: HashMap<(L4, u16), Held>,
}

impl Steering {
    fn full(&self, table: Table, capacity: u32) -> ClaimError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        ClaimError::Full { table, capacity }
    }

    /// One more claim of local `port`, by a listener (`listen`: the port goes
    /// in the port map) or a flow; the first claim holds it in the kernel.
    fn take_port(&self, st: &mut State, l4: L4, port: u16, listen: bool) -> Result<(), ClaimError> {
        let fresh = !st.ports.contains_key(&(l4, port));
        if fresh {
            let mut sockets = Vec::with_capacity(self.hold.len());
            for ip in &self.hold {
                sockets.push(hold(&self.netns, l4, SocketAddr::new(*ip, port))?);
            }
            st.ports.insert(
                (l4, port),
                Held {
                    listens: 0,
                    flows: 0,
                    _sockets: sockets,
                },
            );
        }
        let Some(h) = st.ports.get_mut(&(l4, port)) else {
            return Err(ClaimError::Io(io::Error::other("port claim vanished")));
        };
        if listen
            && h.listens == 0
            && let Err(e) = self.map_port(l4, port)
        {
            if fresh {
                st.ports.remove(&(l4, port));
            }
            return Err(e);
        }
        if listen {
            h.listens += 1;
        } else {
            h.flows += 1;
        }
        Ok(())
    }

    fn map_port(&self, l4: L4, port: u16) -> Result<(), ClaimError> {
        match update(
            &self.ports,
            &port_key(l4, port),
            &1u32.to_ne_bytes(),
            libxdp_sys::BPF_ANY,
        ) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                Err(self.full(Table::Ports, self.ports_max))
            }
            Err(e) => Err(ClaimError::Io(e)),
        }
    }

    /// One claim less of local `port`: the last listener's takes it out of
    /// the port map, the last claim of all lets the kernel have it again.
    fn put_port(&self, st: &mut State, l4: L4, port: u16, listen: bool) {
        let Some(h) = st.ports.get_mut(&(l4, port)) else {
            return;
        };
        if listen {
            h.listens = h.listens.saturating_sub(1);
            if h.listens == 0 {
                delete(&self.ports, &port_key(l4, port));
            }
        } else {
            h.flows = h.flows.saturating_sub(1);
        }
        if h.listens == 0 && h.flows == 0 {
            st.ports.remove(&(l4, port));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Claims for Steering {
    fn claim_port(&self, l4: L4, port: u16) -> Result<(), ClaimError> {
        let mut st = self.lock();
        self.take_port(&mut st, l4, port, true)
    }

    fn release_port(&self, l4: L4, port: u16) {
        let mut st = self.lock();
        self.put_port(&mut st, l4, port, true);
    }

    fn claim_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr) -> Result<(), ClaimError> {
        let key = flow_key(l4, local, remote)?;
        let mut st = self.lock();
        self.take_port(&mut st, l4, local.port(), false)?;
        let r = match update(
            &self.flows,
            &key,
            &1u32.to_ne_bytes(),
            libxdp_sys::BPF_NOEXIST,
        ) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                Err(self.full(Table::Flows, self.flows_max))
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Err(ClaimError::Exists),
            Err(e) => Err(ClaimError::Io(e)),
        };
        if r.is_err() {
            self.put_port(&mut st, l4, local.port(), false);
        }
        r
    }

    fn release_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr) {
        let Ok(key) = flow_key(l4, local, remote) else {
            return;
        };
        let mut st = self.lock();
        delete(&self.flows, &key);
        self.put_port(&mut st, l4, local.port(), false);
    }
}
