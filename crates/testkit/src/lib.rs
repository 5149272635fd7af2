//! Test support for linerate (being written).
