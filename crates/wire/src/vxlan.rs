//! (contract stub, replaced by the tunnels branch)
#![allow(missing_docs)]
use crate::error::{Error, Layer, Result};
pub const HEADER_LEN: usize = 8;
pub const PORT: u16 = 4789;
pub const LINUX_PORT: u16 = 8472;
pub struct Packet<T> {
    b: T,
}
impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(b: T) -> Result<Self> {
        crate::error::need(Layer::Vxlan, b.as_ref(), 8)?;
        Ok(Packet { b })
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub vni: u32,
}
impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let b = p.b.as_ref();
        if b[0] != 8 {
            return Err(Error::invalid(Layer::Vxlan, "flags", b[0].into()));
        }
        Ok(Repr {
            vni: u32::from_be_bytes([0, b[4], b[5], b[6]]),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        8
    }
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        buf[..8].copy_from_slice(&[
            8,
            0,
            0,
            0,
            (self.vni >> 16) as u8,
            (self.vni >> 8) as u8,
            self.vni as u8,
            0,
        ]);
        Ok(8)
    }
}
