//! Byte-exact bulk data for transfers to and from kernel sockets: a seeded
//! pattern made in chunks (256 MiB never sits in memory) and its SHA-256.

use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};

/// Deterministic bytes (xorshift), produced in chunks.
#[derive(Debug, Clone)]
pub struct Pattern {
    x: u64,
    left: usize,
}

impl Pattern {
    /// `len` bytes from `seed`.
    pub fn new(seed: u64, len: usize) -> Pattern {
        Pattern {
            x: seed | 1,
            left: len,
        }
    }

    /// Bytes still to come.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Fills the front of `buf` with the next bytes; returns how many (0 at
    /// the end). Whole 8-byte words except at the very end, so the stream does
    /// not depend on how it is chunked.
    pub fn fill(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.left);
        let n = if n >= 8 { n / 8 * 8 } else { n };
        for chunk in buf.get_mut(..n).unwrap_or_default().chunks_mut(8) {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            for (d, s) in chunk.iter_mut().zip(self.x.to_le_bytes()) {
                *d = s;
            }
        }
        self.left -= n;
        n
    }

    /// SHA-256 of the whole pattern.
    pub fn digest(seed: u64, len: usize) -> [u8; 32] {
        let mut p = Pattern::new(seed, len);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = p.fill(&mut buf);
            if n == 0 {
                return h.finalize().into();
            }
            h.update(buf.get(..n).unwrap_or_default());
        }
    }
}

/// Writes the pattern (`seed`, `len`) to `w` in 256 KiB writes.
pub fn send(w: &mut impl Write, seed: u64, len: usize) -> io::Result<()> {
    let mut p = Pattern::new(seed, len);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = p.fill(&mut buf);
        if n == 0 {
            return Ok(());
        }
        w.write_all(buf.get(..n).unwrap_or_default())?;
    }
}

/// Reads `r` to the end; returns the byte count and SHA-256.
pub fn receive(r: &mut impl Read) -> io::Result<(usize, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok((got, h.finalize().into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(buf.get(..n).unwrap_or_default());
        got += n;
    }
}

/// Writes `len` bytes to `w`, `data` over and over (the last write cut short):
/// bulk without the cost of a pattern, for measuring transfers.
pub fn write_len(w: &mut impl Write, data: &[u8], len: usize) -> io::Result<()> {
    let mut left = len;
    while left > 0 {
        let n = left.min(data.len());
        if n == 0 {
            return Err(io::Error::other("nothing to write with"));
        }
        w.write_all(data.get(..n).unwrap_or_default())?;
        left -= n;
    }
    Ok(())
}

/// Reads `r` to the end without looking at the bytes; returns the count.
pub fn drain(r: &mut impl Read) -> io::Result<usize> {
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A running SHA-256 with a byte count (for data read in pieces).
#[derive(Debug, Clone, Default)]
pub struct Digester {
    h: Sha256,
    /// Bytes so far.
    pub len: usize,
}

impl Digester {
    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.h.update(bytes);
        self.len += bytes.len();
    }

    /// The SHA-256 of everything added.
    pub fn finish(self) -> [u8; 32] {
        self.h.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_does_not_depend_on_the_chunking() {
        let len = 100_003;
        let mut big = Vec::new();
        let mut p = Pattern::new(7, len);
        let mut buf = vec![0u8; 65_536];
        loop {
            let n = p.fill(&mut buf);
            if n == 0 {
                break;
            }
            big.extend_from_slice(&buf[..n]);
        }
        let mut small = Vec::new();
        let mut p = Pattern::new(7, len);
        let mut buf = [0u8; 13];
        loop {
            let n = p.fill(&mut buf);
            if n == 0 {
                break;
            }
            small.extend_from_slice(&buf[..n]);
        }
        assert_eq!(big.len(), len);
        assert_eq!(big, small);
        assert_eq!(
            <[u8; 32]>::from(Sha256::digest(&big)),
            Pattern::digest(7, len)
        );
        assert_ne!(Pattern::digest(7, len), Pattern::digest(8, len));
    }

    #[test]
    fn send_and_receive_agree_with_the_digest() {
        let mut wire = Vec::new();
        send(&mut wire, 3, 300_000).unwrap();
        let (n, d) = receive(&mut &wire[..]).unwrap();
        assert_eq!((n, d), (300_000, Pattern::digest(3, 300_000)));
        let mut dg = Digester::default();
        dg.update(&wire[..5]);
        dg.update(&wire[5..]);
        assert_eq!(dg.len, 300_000);
        assert_eq!(dg.finish(), d);
    }
}
