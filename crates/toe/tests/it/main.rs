//! The engine's integration tests, one binary: each module is one subject
//! (a behaviour, an RFC section, a peer), with the shared set-ups in `common`.
//! One binary links the engine and its dev-dependencies once instead of once
//! per subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod accept_queue;
mod arp;
mod behaviour_ack;
mod behaviour_autotune;
mod behaviour_cc;
mod behaviour_dsack;
mod behaviour_ecn;
mod behaviour_ofo;
mod behaviour_options;
mod behaviour_predicted;
mod behaviour_rack;
mod behaviour_rtt;
mod behaviour_sack;
mod behaviour_sack_batch;
mod behaviour_states;
mod behaviour_stretch;
mod behaviour_supersegment;
mod behaviour_timers;
mod behaviour_undo;
mod bulk;
mod chained_rx;
mod challenge;
mod config;
mod ecn_sim;
mod engine_harness;
mod events;
mod faults;
mod fragments;
mod handshake;
mod icmp;
mod keepalive;
mod net;
mod netconf;
mod ofo_budget;
mod reassembly;
mod recovery;
mod routes;
mod scale;
mod security;
mod sending;
mod sim_determinism;
mod small_writes;
mod smoltcp;
mod smoltcp_memnic;
mod syncookies;
mod throughput;
mod time_wait;
mod timers;
mod transmit_visits;
mod tx_by_ref;
mod udp;
mod uplinks;
mod zero_copy;
