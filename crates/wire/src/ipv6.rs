//! (being written)
pub mod ext;
