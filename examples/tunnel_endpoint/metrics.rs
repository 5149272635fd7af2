//! Every counter in the Prometheus text exposition format (0.0.4), at
//! `GET /metrics` on `[metrics] listen`.
//!
//! Each scrape asks the replicas for their counters (a job each, between
//! two rounds: see [`crate::server`]) and sums them as the SIGUSR1 dump
//! does, then encodes them with `prometheus-client` (the Prometheus
//! project's own Rust crate: names, escaping, `# HELP` / `# TYPE` lines and
//! the `_total` suffix as the format wants them). The HTTP side is a few
//! dozen lines of `std::net` on one thread: one path, GET only, one scrape
//! every few seconds; an HTTP crate would bring more than it serves here.
//!
//! Names: `linerate_vtep_port_<counter>_total{vni,port}` (each local port),
//! `linerate_vtep_overlay_<counter>_total{vni,tunnel}` (a VNI's side toward
//! the remote VTEPs), `linerate_vtep_fdb_<counter>_total{vni}`,
//! `linerate_vtep_tunnel_<counter>_total{vni,tunnel}` (what a VNI's tunnel
//! did and refused), `linerate_vtep_endpoint_<counter>_total` (refused
//! before a VNI was known), `linerate_vtep_underlay_<counter>_total` (the
//! underlay NIC) and `linerate_vtep_<counter>_total` (the process's own).
//! Counters of bytes end in `_bytes_total`. `<counter>` is the `ethtool -S`
//! style name the SIGUSR1 dump prints.

use crate::server::Server;
use linerate::tunnel::vtep::{Sample, Scope};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// One scrape's counters.
#[derive(Debug)]
struct Scrape(Vec<Sample>);

/// A counter's family name (without unit and `_total`), whether it counts
/// bytes, its help and its labels.
fn family(s: &Sample) -> (String, bool, &'static str, Vec<(&'static str, String)>) {
    let (name, bytes) = match s.name.strip_suffix("_bytes") {
        Some(n) => (n, true),
        None => (s.name.as_str(), false),
    };
    let (prefix, name, help, labels) = match &s.scope {
        Scope::Port { vni, port } => (
            "port",
            name,
            "A local port of a VNI (frames to and from it).",
            vec![("vni", vni.to_string()), ("port", port.clone())],
        ),
        Scope::Overlay { vni, tunnel } => (
            "overlay",
            name,
            "A VNI's side toward its remote VTEPs.",
            vec![("vni", vni.to_string()), ("tunnel", tunnel.clone())],
        ),
        Scope::Fdb { vni } => (
            "fdb",
            name.strip_prefix("fdb_").unwrap_or(name),
            "A VNI's forwarding table.",
            vec![("vni", vni.to_string())],
        ),
        Scope::Tunnel { vni, tunnel } => (
            "tunnel",
            name,
            "A VNI's tunnel: frames encapsulated, decapsulated and refused.",
            vec![("vni", vni.to_string()), ("tunnel", tunnel.clone())],
        ),
        Scope::Vtep => (
            "endpoint",
            name,
            "Underlay frames the VTEP refused before a VNI was known, and its ARP/ND.",
            Vec::new(),
        ),
        Scope::Underlay => ("underlay", name, "The underlay NIC.", Vec::new()),
        Scope::Process => ("", name, "The tunnel endpoint process.", Vec::new()),
    };
    let full = if prefix.is_empty() {
        format!("linerate_vtep_{name}")
    } else {
        format!("linerate_vtep_{prefix}_{name}")
    };
    (full, bytes, help, labels)
}

/// A family's samples: whether it counts bytes, its help, and each
/// sample's labels and value.
type Family<'a> = (bool, &'static str, Vec<(Labels<'a>, u64)>);

/// A sample's labels.
type Labels<'a> = Vec<(&'a str, String)>;

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // One family per name, its samples together.
        let mut families: BTreeMap<String, Family<'_>> = BTreeMap::new();
        for s in &self.0 {
            let (name, bytes, help, labels) = family(s);
            families
                .entry(name)
                .or_insert_with(|| (bytes, help, Vec::new()))
                .2
                .push((labels, s.value));
        }
        for (name, (bytes, help, samples)) in families {
            let unit = bytes.then_some(Unit::Bytes);
            let mut family = encoder.encode_descriptor(
                &name,
                help,
                unit.as_ref(),
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (labels, value) in samples {
                let c = ConstCounter::new(value);
                if labels.is_empty() {
                    c.encode(family.encode_family(&Vec::<(&str, String)>::new())?)?;
                } else {
                    c.encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// The exposition of `samples`.
pub fn encode(samples: Vec<Sample>) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(samples)));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Serves `listener` on a thread of its own.
pub fn serve(listener: TcpListener, server: Arc<Server>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("vtep-metrics".into())
        .spawn(move || {
            for c in listener.incoming().flatten() {
                scrape(c, &server);
            }
        })?;
    Ok(())
}

/// Answers one HTTP request (and closes).
fn scrape(mut conn: TcpStream, server: &Server) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
    // The request head, at most 8 KiB.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut first = text.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET", "/metrics") => match server.samples().map(encode) {
            Ok(Ok(body)) => (
                "200 OK",
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                body,
            ),
            Ok(Err(e)) => ("500 Internal Server Error", "text/plain", format!("{e}\n")),
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        },
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "the counters are at /metrics\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".to_owned(),
        ),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions() {
        let s = |scope, name: &str| Sample {
            scope,
            name: name.into(),
            value: 7,
        };
        let text = encode(vec![
            s(
                Scope::Port {
                    vni: 42,
                    port: "p0".into(),
                },
                "rx_bytes",
            ),
            s(Scope::Fdb { vni: 42 }, "fdb_learned"),
            s(Scope::Underlay, "rx_packets"),
        ])
        .unwrap_or_default();
        for want in [
            "linerate_vtep_port_rx_bytes_total{vni=\"42\",port=\"p0\"} 7",
            "linerate_vtep_fdb_learned_total{vni=\"42\"} 7",
            "linerate_vtep_underlay_rx_packets_total 7",
            "# TYPE linerate_vtep_port_rx_bytes_total counter",
        ] {
            assert!(text.lines().any(|l| l == want), "{want} in\n{text}");
        }
    }
}
