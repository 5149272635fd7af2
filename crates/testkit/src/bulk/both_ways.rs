//! Bulk transfer in both directions at once (the papers' bidirectional runs): one
//! connection each way between the same two engines, every byte checked.

use super::{
    BulkError, Clock, Host, Measurement, PORT, READ_LEN, STALL, Source, WireCount, socket_error,
};
use crate::cpu::thread_cpu_time;
use linerate_nic::Nic;
use linerate_toe::{Engine, Instant, ListenerHandle, SocketHandle};
use std::net::{Ipv4Addr, SocketAddr};

/// One direction: the sending engine's connection and the receiving engine's.
struct Flow {
    client: SocketHandle,
    listener: ListenerHandle,
    server: Option<SocketHandle>,
    sent: u64,
    got: u64,
}

impl Flow {
    /// Writes as much as the sender takes, in `write`-byte calls.
    fn send(&mut self, tx: &mut Engine, write: usize, total: u64, source: &Source) {
        while self.sent < total {
            let len = write.min((total - self.sent) as usize);
            match tx.tcp_send(self.client, source.chunk(self.sent, len)) {
                Ok(n) if n > 0 => self.sent += n as u64,
                _ => break,
            }
        }
    }

    /// Reads and checks what the receiver has; true if anything was read.
    fn recv(
        &mut self,
        rx: &mut Engine,
        buf: &mut [u8],
        source: &Source,
    ) -> Result<bool, BulkError> {
        if self.server.is_none() {
            self.server = rx.tcp_accept(self.listener).ok();
        }
        let Some(s) = self.server else {
            return Ok(false);
        };
        let mut any = false;
        while let Ok(n) = rx.tcp_recv(s, buf) {
            if n == 0 {
                break;
            }
            source.check(self.got, buf.get(..n).unwrap_or_default())?;
            self.got += n as u64;
            any = true;
        }
        Ok(any)
    }
}

fn open(
    from: &mut Engine,
    to: &mut Engine,
    to_ip: Ipv4Addr,
    port: u16,
    now: Instant,
) -> Result<Flow, BulkError> {
    let listener = to.tcp_listen(port).map_err(socket_error)?;
    let client = from
        .tcp_connect(now, SocketAddr::from((to_ip, port)))
        .map_err(socket_error)?;
    Ok(Flow {
        client,
        listener,
        server: None,
        sent: 0,
        got: 0,
    })
}

/// `total` bytes from `a` to `b` and `total` from `b` to `a`, at once.
pub(super) fn both_ways<N: Nic + WireCount>(
    mut a: Host<N>,
    mut b: Host<N>,
    write: usize,
    total: u64,
    source: &Source,
) -> Result<Measurement, BulkError> {
    let mut buf = vec![0u8; READ_LEN];
    let cpu0 = thread_cpu_time();
    let mut clock = Clock::new();
    let now = clock.now();
    let mut ab = open(
        &mut a.engine,
        &mut b.engine,
        Ipv4Addr::new(10, 0, 0, 2),
        PORT,
        now,
    )?;
    let mut ba = open(
        &mut b.engine,
        &mut a.engine,
        Ipv4Addr::new(10, 0, 0, 1),
        PORT + 1,
        now,
    )?;
    let mut last_progress = now;
    while ab.got < total || ba.got < total {
        let now = clock.now();
        ab.send(&mut a.engine, write, total, source);
        ba.send(&mut b.engine, write, total, source);
        let mut moved = a.transmit(now)? + b.transmit(now)?;
        moved += b.receive(now)? + a.receive(now)?;
        if ab.recv(&mut b.engine, &mut buf, source)? | ba.recv(&mut a.engine, &mut buf, source)? {
            last_progress = now;
        }
        moved += b.transmit(now)? + a.transmit(now)?;
        moved += a.receive(now)? + b.receive(now)?;
        if moved == 0 {
            let next = [a.engine.poll_timeout(), b.engine.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            clock.idle_until(next);
            let now = clock.now();
            a.engine.handle_timeout(now);
            b.engine.handle_timeout(now);
        }
        if clock.now().saturating_duration_since(last_progress) > STALL {
            return Err(BulkError::Stalled {
                received: ab.got + ba.got,
            });
        }
    }
    Ok(Measurement {
        bytes: ab.got + ba.got,
        wall: clock.start.elapsed(),
        cpu: thread_cpu_time().since(cpu0),
        wire_frames: a.nic.wire_frames() + b.nic.wire_frames(),
        stack_frames: a.delivered + b.delivered,
        skipped: clock.skipped,
        by_ref: a.engine.counters().tcp_out_by_ref + b.engine.counters().tcp_out_by_ref,
        chained: a.engine.counters().rx_chained + b.engine.counters().rx_chained,
    })
}
