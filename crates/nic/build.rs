//! Builds linerate's steering XDP program (`src/xdp/steer.bpf.c`) with
//! `clang -target bpf` when the `af-xdp` feature is on; the object is embedded
//! in the library (`include_bytes!`), so nothing prebuilt is checked in.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/xdp/steer.bpf.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    let af_xdp = std::env::var_os("CARGO_FEATURE_AF_XDP").is_some();
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if !(af_xdp && linux) {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("cargo did not set OUT_DIR");
    };
    let clang = std::env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    let obj = out.join("steer.bpf.o");
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-c"])
        .arg("src/xdp/steer.bpf.c")
        .arg("-o")
        .arg(&obj)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("clang -target bpf failed ({s}) on src/xdp/steer.bpf.c"),
        Err(e) => panic!(
            "the af-xdp feature builds an XDP program with clang ({}): {e}; install clang \
             or point CLANG at it",
            clang.to_string_lossy()
        ),
    }
}
