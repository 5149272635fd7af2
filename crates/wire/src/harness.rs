//! Fuzz harness entry points (being written).
