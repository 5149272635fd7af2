//! Classic pcap files with the Ethernet link type.

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

fn to_io(e: pcap_file::PcapError) -> io::Error {
    io::Error::other(e.to_string())
}

/// Writes `frames` to `path`, one packet each, timestamps a millisecond apart.
pub fn write<'a>(path: &Path, frames: impl IntoIterator<Item = &'a [u8]>) -> io::Result<()> {
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 262_144,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(File::create(path)?, header).map_err(to_io)?;
    for (i, f) in frames.into_iter().enumerate() {
        let len = u32::try_from(f.len()).map_err(io::Error::other)?;
        let ts = Duration::from_millis(i as u64);
        w.write_packet(&PcapPacket::new(ts, len, f))
            .map_err(to_io)?;
    }
    Ok(())
}

/// Reads every packet of the pcap file at `path`.
pub fn read(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let mut r = PcapReader::new(File::open(path)?).map_err(to_io)?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.map_err(to_io)?.data.into_owned());
    }
    Ok(out)
}
