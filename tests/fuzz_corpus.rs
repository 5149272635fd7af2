//! Replays every fuzz target's corpus (fuzz/corpus/<target>/) through the same
//! harness the fuzzer runs, so what the fuzzer found stays fixed in ordinary tests.
//! The seeds come from the frame catalogue and, for the engine, from structured
//! inputs of a peer and an application (`regenerate_seeds`); cargo-fuzz grew the
//! rest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::toe::harness as toe_harness;
use linerate::tunnel::harness as tunnel_harness;
use linerate::wire::harness::TARGETS;
use linerate::wire::layout;
use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

#[test]
fn replay_corpus() {
    for (name, run) in TARGETS
        .iter()
        .chain(toe_harness::TARGETS)
        .chain(tunnel_harness::TARGETS)
        .chain(linerate::tunnel::bridge::harness::TARGETS)
        .chain(linerate::offload::harness::TARGETS)
        .chain(linerate::dns::harness::TARGETS)
        .chain(linerate::dhcp::harness::TARGETS)
    {
        let dir = corpus_dir(name);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            run(&data);
            n += 1;
        }
        assert!(n >= 10, "corpus for {name} has only {n} inputs");
    }
}

/// Writes the seed inputs: every catalogue frame for `layout`, and the tunnel header
/// plus inner frame of every tunnel sample for the codec targets.
#[test]
#[ignore = "rewrites fuzz/corpus seeds; run by hand"]
fn regenerate_seeds() {
    let engine = corpus_dir("engine");
    std::fs::create_dir_all(&engine).unwrap();
    for (i, steps) in [20usize, 40, 60, 80, 120, 160, 200, 250, 300, 400, 50, 100]
        .into_iter()
        .enumerate()
    {
        let data = toe_harness::engine_input(1_000 + i as u64, steps);
        std::fs::write(engine.join(format!("seed-engine-{i:02}")), data).unwrap();
    }
    for s in linerate_testkit::catalog::all() {
        let dir = corpus_dir("layout");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{}", s.name)), &s.frame).unwrap();
        let l = layout::parse(&s.frame).unwrap();
        // Every header of the innermost stack, from its L3 on, seeds the views target.
        let views = corpus_dir("views");
        std::fs::create_dir_all(&views).unwrap();
        let h = l.innermost();
        for (what, at) in [("l3", h.l3_offset), ("l4", h.l4_offset)] {
            let name = format!("seed-{}-{what}", s.name);
            std::fs::write(views.join(name), &s.frame[usize::from(at)..]).unwrap();
        }
        if let Some(t) = l.tunnel {
            let target = match t.kind {
                layout::TunnelKind::Vxlan => "vxlan",
                layout::TunnelKind::Geneve => "geneve",
                layout::TunnelKind::Nvgre => "nvgre",
            };
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).unwrap();
            let bytes = &s.frame[usize::from(t.offset)..];
            std::fs::write(dir.join(format!("seed-{}", s.name)), bytes).unwrap();
        }
    }
}
