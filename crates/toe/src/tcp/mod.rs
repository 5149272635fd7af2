//! TCP (RFC 9293) as a sans-IO state machine per connection.
//!
//! * `state`: one type per RFC 9293 section 3.3.2 state.
//! * `input`: segment arrival (RFC 9293 section 3.10.7), with RFC 5961's
//!   challenge ACKs, RFC 7323's PAWS, and ACK processing with RFC 6675 / RFC 6582
//!   loss recovery; `rack`: RACK-TLP loss detection and tail loss probes (RFC 8985).
//! * `output`: what to send next (RFC 9293 section 3.8.6, Nagle per section 3.7.4,
//!   zero-window probes per section 3.8.6.1, one super-segment per call).
//! * `conn`: the connection (buffers, state, timers, application operations).
//! * `keepalive`: keep-alive probes (RFC 9293 section 3.8.4, RFC 1122 section
//!   4.2.3.6), off unless asked for.
//! * [`ecn`]: Explicit Congestion Notification (RFC 3168).
//! * `autotune`: receive-window auto-tuning (dynamic right-sizing, Linux's
//!   `tcp_rcv_space_adjust`).
//! * `cc`, `rtt`, `sack`, `assembler`, `recvbuf`, `ring`, `pool`, `sendbuf`, `seq`:
//!   the parts, private to the engine (tests and benches that measure against
//!   them use `sim::internals`).

pub(crate) mod assembler;
pub(crate) mod autotune;
pub(crate) mod cc;
pub(crate) mod conn;
pub(crate) mod cookie;
pub mod ecn;
pub(crate) mod input;
pub(crate) mod keepalive;
mod output;
pub(crate) mod pool;
pub(crate) mod rack;
pub(crate) mod recvbuf;
pub(crate) mod ring;
pub(crate) mod rtt;
pub(crate) mod sack;
mod sack_owed;
pub(crate) mod segment;
pub(crate) mod sendbuf;
pub(crate) mod seq;
pub(crate) mod state;
mod undo;
mod zero_copy;

pub use ecn::EcnMode;
pub use keepalive::Keepalive;

/// The state of a TCP connection (RFC 9293 section 3.3.2), as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpState {
    /// No connection (never opened, or ended).
    Closed,
    /// Waiting for connections (a listener).
    Listen,
    /// SYN sent, waiting for a matching SYN.
    SynSent,
    /// SYN received and answered, waiting for the ACK of ours.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// We closed; our FIN is not acknowledged yet.
    FinWait1,
    /// We closed and our FIN is acknowledged; the peer may still send.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; waiting for our FIN's acknowledgement.
    Closing,
    /// The peer closed, then we did; waiting for our FIN's acknowledgement.
    LastAck,
    /// Both closed; lingering 2 MSL for stray segments.
    TimeWait,
}
