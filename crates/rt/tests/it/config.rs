//! The driver and the runtime refuse an engine configuration that breaks a
//! rule of `linerate_toe::Config::validate`, with the engine's typed error.

use linerate_nic::{MemNic, NicCaps};
use linerate_rt::{Driver, RtError, Runtime, RuntimeConfig};
use linerate_toe::{Config, ConfigError, Engine};
use std::net::Ipv4Addr;

fn host() -> Config {
    Config::new([2, 0, 0, 0, 0, 1]).with_ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
}

#[test]
fn runtime_and_driver_refuse_a_bad_config() {
    let mut bad = host();
    bad.tcp.backlog = 0;
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    match Runtime::start(a, RuntimeConfig::new(bad.clone())) {
        Err(RtError::Config(ConfigError::Zero {
            field: "tcp.backlog",
        })) => {}
        other => panic!("expected a config error, got {:?}", other.map(|_| ())),
    }
    match Driver::new(Engine::new(bad, 1), b, 0) {
        Err(RtError::Config(ConfigError::Zero {
            field: "tcp.backlog",
        })) => {}
        other => panic!("expected a config error, got {:?}", other.map(|_| ())),
    }
    let e = RtError::Config(ConfigError::Zero { field: "x" });
    assert!(std::error::Error::source(&e).is_some());
}
