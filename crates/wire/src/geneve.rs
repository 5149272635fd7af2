//! (contract stub, replaced by the tunnels branch)
#![allow(missing_docs)]
use crate::error::{Layer, Result};
pub const PORT: u16 = 6081;
pub const HEADER_LEN: usize = 8;
pub struct Packet<T> {
    b: T,
}
impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_checked(b: T) -> Result<Self> {
        crate::error::need(Layer::Geneve, b.as_ref(), 8)?;
        Ok(Packet { b })
    }
    pub fn header_len(&self) -> usize {
        8 + usize::from(self.b.as_ref()[0] & 0x3f) * 4
    }
    pub fn protocol(&self) -> u16 {
        u16::from_be_bytes([self.b.as_ref()[2], self.b.as_ref()[3]])
    }
    pub fn vni(&self) -> u32 {
        u32::from_be_bytes([
            0,
            self.b.as_ref()[4],
            self.b.as_ref()[5],
            self.b.as_ref()[6],
        ])
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveOption<'a> {
    pub class: u16,
    pub kind: u8,
    pub data: &'a [u8],
}
pub fn emit_options(opts: &[GeneveOption<'_>], buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    for o in opts {
        buf[n..n + 2].copy_from_slice(&o.class.to_be_bytes());
        buf[n + 2] = o.kind;
        buf[n + 3] = (o.data.len() / 4) as u8;
        buf[n + 4..n + 4 + o.data.len()].copy_from_slice(o.data);
        n += 4 + o.data.len();
    }
    Ok(n)
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub vni: u32,
    pub protocol: u16,
    pub oam: bool,
    pub critical: bool,
    pub options: &'a [u8],
}
impl<'a> Repr<'a> {
    pub fn new(vni: u32, options: &'a [u8]) -> Self {
        Repr {
            vni,
            protocol: 0x6558,
            oam: false,
            critical: false,
            options,
        }
    }
    pub const fn buffer_len(&self) -> usize {
        8 + self.options.len()
    }
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        buf[..8].copy_from_slice(&[
            (self.options.len() / 4) as u8,
            0,
            0x65,
            0x58,
            (self.vni >> 16) as u8,
            (self.vni >> 8) as u8,
            self.vni as u8,
            0,
        ]);
        buf[8..8 + self.options.len()].copy_from_slice(self.options);
        Ok(8 + self.options.len())
    }
}
