//! Recording frames as they are on the wire: the [`Recorder`] hook, a pcap writer
//! ([`PcapRecorder`]) and an in-memory one for tests ([`MemoryRecorder`]).
//!
//! A backend calls its recorder for every frame it puts on the wire or takes off
//! it ([`crate::Nic::set_recorder`]), so a pcap shows what a capture on the link
//! would: super-frames where the backend carries them whole (TAP with TSO, the
//! memory wire), segments where software segmented them. Timestamps are the
//! backend's clock: wall time for TAP, the (possibly virtual) clock of the memory
//! backend.

use crate::buf::lock;
use linerate_offload::OffloadMeta;
use pcap_file::pcap::PcapHeader;
use pcap_file::{DataLink, Endianness, TsResolution};
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Which way a recorded frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received from the wire.
    Rx,
    /// Sent to the wire.
    Tx,
}

/// One frame as a backend saw it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Which way it went.
    pub dir: Direction,
    /// The queue it went through.
    pub queue: usize,
    /// The frame's bytes.
    pub frame: &'a [u8],
    /// Its metadata.
    pub meta: &'a OffloadMeta,
    /// The backend's clock.
    pub time: Duration,
}

/// Receives every frame a backend sends or receives.
pub trait Recorder: Send + Sync {
    /// Records one frame. Must not block for long: it runs on the data path.
    fn record(&self, record: &Record<'_>);
}

/// Largest frame a pcap record holds whole; longer ones are cut (their original
/// length is kept).
pub const SNAPLEN: u32 = 262_144;

struct PcapState<W: Write> {
    writer: Option<W>,
    error: Option<String>,
    frames: u64,
}

/// Writes frames to a classic pcap stream (Ethernet link type, nanosecond
/// timestamps, native byte order), optionally one direction only.
///
/// A write error stops the recording; [`PcapRecorder::error`] says what it was.
pub struct PcapRecorder<W: Write + Send> {
    state: Mutex<PcapState<W>>,
    only: Option<Direction>,
}

impl PcapRecorder<std::io::BufWriter<std::fs::File>> {
    /// Records to a new file at `path`.
    pub fn create(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        PcapRecorder::new(std::io::BufWriter::new(std::fs::File::create(path)?))
    }
}

impl<W: Write + Send> PcapRecorder<W> {
    /// Records to `writer` (the pcap header is written now).
    pub fn new(mut writer: W) -> std::io::Result<Self> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
            ..Default::default()
        };
        // pcap-file's error, kept whole as the I/O error's source.
        header
            .write_to(&mut writer)
            .map_err(std::io::Error::other)?;
        Ok(PcapRecorder {
            state: Mutex::new(PcapState {
                writer: Some(writer),
                error: None,
                frames: 0,
            }),
            only: None,
        })
    }

    /// Records only frames going `dir`.
    pub fn only(mut self, dir: Direction) -> Self {
        self.only = Some(dir);
        self
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        lock(&self.state).frames
    }

    /// The error that stopped the recording, if one did.
    pub fn error(&self) -> Option<String> {
        lock(&self.state).error.clone()
    }

    /// Flushes the underlying writer.
    pub fn flush(&self) -> std::io::Result<()> {
        match lock(&self.state).writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Stops recording and returns the writer, flushed, unless an error stopped
    /// the recording (then that error).
    pub fn finish(self) -> std::io::Result<W> {
        let s = self
            .state
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (s.writer, s.error) {
            (Some(mut w), _) => {
                w.flush()?;
                Ok(w)
            }
            (None, e) => Err(std::io::Error::other(
                e.unwrap_or_else(|| "recording stopped".into()),
            )),
        }
    }
}

/// One pcap record: timestamp, captured and original length (native order, as
/// the header says), then the bytes.
fn write_record<W: Write>(w: &mut W, time: Duration, frame: &[u8]) -> std::io::Result<()> {
    let incl = frame
        .get(..frame.len().min(SNAPLEN as usize))
        .unwrap_or_default();
    let secs = u32::try_from(time.as_secs()).unwrap_or(u32::MAX);
    let mut head = [0u8; 16];
    for (chunk, v) in head.chunks_exact_mut(4).zip([
        secs,
        time.subsec_nanos(),
        incl.len() as u32,
        u32::try_from(frame.len()).unwrap_or(u32::MAX),
    ]) {
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    w.write_all(&head)?;
    w.write_all(incl)
}

impl<W: Write + Send> Recorder for PcapRecorder<W> {
    fn record(&self, r: &Record<'_>) {
        if self.only.is_some_and(|d| d != r.dir) {
            return;
        }
        let mut s = lock(&self.state);
        let Some(w) = s.writer.as_mut() else {
            return;
        };
        match write_record(w, r.time, r.frame) {
            Ok(()) => s.frames += 1,
            Err(e) => {
                s.error = Some(e.to_string());
                s.writer = None;
            }
        }
    }
}

/// A frame kept by a [`MemoryRecorder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Which way it went.
    pub dir: Direction,
    /// The queue it went through.
    pub queue: usize,
    /// The frame's bytes.
    pub frame: Vec<u8>,
    /// Its metadata.
    pub meta: OffloadMeta,
    /// The backend's clock.
    pub time: Duration,
}

/// Keeps every frame in memory (it allocates per frame: for tests).
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    frames: Mutex<Vec<Recorded>>,
}

impl MemoryRecorder {
    /// An empty recorder.
    pub fn new() -> MemoryRecorder {
        MemoryRecorder::default()
    }

    /// Takes the frames recorded so far.
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *lock(&self.frames))
    }

    /// Number of frames recorded so far.
    pub fn len(&self) -> usize {
        lock(&self.frames).len()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Recorder for MemoryRecorder {
    fn record(&self, r: &Record<'_>) {
        lock(&self.frames).push(Recorded {
            dir: r.dir,
            queue: r.queue,
            frame: r.frame.to_vec(),
            meta: *r.meta,
            time: r.time,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_round_trip_with_direction_filter() {
        let rec = PcapRecorder::new(Vec::new()).unwrap().only(Direction::Tx);
        let meta = OffloadMeta::plain();
        for (i, dir) in [Direction::Tx, Direction::Rx, Direction::Tx]
            .into_iter()
            .enumerate()
        {
            rec.record(&Record {
                dir,
                queue: 0,
                frame: &[i as u8; 60],
                meta: &meta,
                time: Duration::from_nanos(1_000_000_123 * i as u64),
            });
        }
        assert_eq!(rec.frames(), 2);
        assert!(rec.error().is_none());
        rec.flush().unwrap();
        let bytes = rec.finish().unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        let a = r.next_packet().unwrap().unwrap();
        assert_eq!(&a.data[..], &[0u8; 60][..]);
        let b = r.next_packet().unwrap().unwrap();
        assert_eq!(&b.data[..], &[2u8; 60][..]);
        assert_eq!(b.timestamp, Duration::from_nanos(2_000_000_246));
        assert!(r.next_packet().is_none());
    }

    #[test]
    fn memory_recorder_keeps_frames() {
        let rec = MemoryRecorder::new();
        assert!(rec.is_empty());
        rec.record(&Record {
            dir: Direction::Rx,
            queue: 3,
            frame: b"abc",
            meta: &OffloadMeta::plain(),
            time: Duration::ZERO,
        });
        let got = rec.take();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].queue, &got[0].frame[..]), (3, &b"abc"[..]));
        assert!(rec.is_empty());
    }
}
