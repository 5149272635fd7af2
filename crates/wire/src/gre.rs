//! (contract stub, replaced by the tunnels branch)
#![allow(missing_docs)]
use crate::error::{Layer, Result};
pub const PROTO_TEB: u16 = 0x6558;
pub struct Packet<T> {
    b: T,
}
impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(b: T) -> Result<Self> {
        crate::error::need(Layer::Gre, b.as_ref(), 8)?;
        Ok(Packet { b })
    }
    pub fn header_len(&self) -> usize {
        8
    }
    pub fn protocol(&self) -> u16 {
        u16::from_be_bytes([self.b.as_ref()[2], self.b.as_ref()[3]])
    }
    pub fn key(&self) -> Option<u32> {
        Some(u32::from_be_bytes(
            self.b.as_ref()[4..8].try_into().unwrap(),
        ))
    }
    pub fn fill_checksum(&mut self)
    where
        T: AsMut<[u8]>,
    {
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub protocol: u16,
    pub checksum: bool,
    pub key: Option<u32>,
    pub sequence: Option<u32>,
}
impl Repr {
    pub const fn nvgre(vsid: u32, flow_id: u8) -> Repr {
        Repr {
            protocol: PROTO_TEB,
            checksum: false,
            key: Some(vsid << 8 | flow_id as u32),
            sequence: None,
        }
    }
    pub const fn buffer_len(&self) -> usize {
        8
    }
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        buf[..4].copy_from_slice(&[0x20, 0, 0x65, 0x58]);
        buf[4..8].copy_from_slice(&self.key.unwrap_or(0).to_be_bytes());
        Ok(8)
    }
}
