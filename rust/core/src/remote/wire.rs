//! The messages processes of one launch exchange, and their bytes.
//!
//! A frame is `[sender process u32][launch uid u64][launch seq u64][tag
//! u8][fields..]`, little-endian, with variable-length fields prefixed by
//! their length. The transport only moves frames; it never looks inside.

use super::payload::Payload;
use crate::error::{ErrorKind, Result, RtError};
use crate::memory::MemorySpace;
use crate::region::{DimSel, Region};

/// A launch as every process names it: the kernel's uid and how many
/// launches of that uid the joining device made before (the processes of
/// a multi-controller program run the same launches in the same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalKey {
    pub uid: u64,
    pub seq: u64,
}

/// Where a DMA lands: a region of a buffer of (device, core), and the
/// semaphore its arrival signals there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DstSide {
    pub device: u32,
    pub core: u32,
    pub space: MemorySpace,
    pub id: u32,
    pub region: Region,
    pub sem: u32,
}

/// Race detection across processes: the sender's vector clock over the
/// launch's cores (components of DMAs are the sender's own and stay
/// there: the receiver's memory only ever holds its own threads' epochs)
/// and, for a DMA, who started it where (for race reports).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RaceSync {
    pub clock: Vec<u32>,
    pub device: u32,
    pub core: u32,
    pub site: String,
}

/// What one process of a launch reports to another's termination probe.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Status {
    /// The process has the launch (false: it has not called the kernel yet).
    pub joined: bool,
    /// Every local core is blocked or finished and none can continue.
    pub quiescent: bool,
    /// Every local device has left the launch.
    pub left: bool,
    /// Counted messages this process sent / received for the launch.
    pub sent: u64,
    pub received: u64,
    /// Changes whenever the process's state or counts change.
    pub epoch: u64,
    /// The blocked cores, one line each (for the deadlock report).
    pub blocked: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Add `inc` to `sem` on global core `gcore`.
    Signal {
        gcore: u32,
        sem: u32,
        inc: i64,
        sync: Option<RaceSync>,
    },
    /// An eager DMA's bytes: write them, then signal.
    DmaEager {
        dst: DstSide,
        sync: Option<RaceSync>,
        data: Payload,
    },
    /// An on_wait DMA was started: queue its write on the destination
    /// semaphore (`bytes` is what it will signal).
    DmaQueued {
        id: u64,
        dst: DstSide,
        bytes: i64,
        describe: String,
        sync: Option<RaceSync>,
    },
    /// A waiter at the destination needs the data of DMA `id`: read it.
    DmaRead {
        id: u64,
    },
    /// The data of on_wait DMA `id`, read at its source.
    DmaData {
        id: u64,
        data: Payload,
    },
    /// `count` devices of the sender arrived at device barrier `generation`.
    Barrier {
        generation: u64,
        count: u32,
        /// The join of the sender's core clocks (race detection; else empty).
        clock: Vec<u32>,
    },
    /// The launch failed in the sender with this root cause.
    Fail {
        kind: ErrorKind,
        message: String,
        device: Option<u32>,
        core: Option<u32>,
    },
    /// Every device of the sender has left the launch.
    Left,
    /// Termination detection: report your status for `wave`.
    Probe {
        wave: u64,
    },
    Status {
        wave: u64,
        status: Status,
    },
}

impl Msg {
    /// Whether the message counts for termination detection: it can
    /// change what a core waits for (probes and statuses only observe).
    pub fn counted(&self) -> bool {
        !matches!(self, Msg::Probe { .. } | Msg::Status { .. } | Msg::Left)
    }
}

/// A decoded frame: its sender, the launch it belongs to and its message
/// (named apart from the FFI call frame, `mosaic_rt_ffi::frame::Frame`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub from: u32,
    pub key: GlobalKey,
    pub msg: Msg,
}

// ------------------------------------------------------------- encoding

struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
    fn opt(&mut self, v: Option<u32>) {
        self.u8(v.is_some() as u8);
        self.u32(v.unwrap_or(0));
    }
    fn sync(&mut self, s: &Option<RaceSync>) {
        let Some(s) = s else { return self.u8(0) };
        self.u8(1);
        self.u32(s.clock.len() as u32);
        for &c in &s.clock {
            self.u32(c);
        }
        self.u32(s.device);
        self.u32(s.core);
        self.bytes(s.site.as_bytes());
    }
    fn dst(&mut self, d: &DstSide) {
        self.u32(d.device);
        self.u32(d.core);
        self.u8(space_code(d.space));
        self.u32(d.id);
        self.u32(d.sem);
        self.u32(d.region.dims.len() as u32);
        for s in &d.region.dims {
            self.i64(s.start);
            self.i64(s.size);
            self.i64(s.stride);
            self.u8(s.squeezed as u8);
        }
    }
}

fn space_code(s: MemorySpace) -> u8 {
    MemorySpace::ALL.iter().position(|&x| x == s).unwrap_or(0) as u8
}

fn kind_code(k: ErrorKind) -> u8 {
    ErrorKind::ALL.iter().position(|&x| x == k).unwrap_or(0) as u8
}

/// An eager DMA this large or larger travels as a header frame and a data
/// message of its own, which the receiver lands in place (one copy less
/// than taking the frame into a buffer and writing it from there).
pub const SPLIT_BYTES: usize = 64 << 10;

/// [`encode`], with the data of a large eager DMA apart: `(header,
/// Some(data))` (see [`SPLIT_BYTES`]), else `(frame, None)`.
pub fn encode_split(from: u32, key: GlobalKey, msg: Msg) -> (Payload, Option<Payload>) {
    match msg {
        Msg::DmaEager { dst, sync, data } if data.len() >= SPLIT_BYTES => {
            (Payload::from_vec(eager_header(from, key, 10, &dst, &sync, data.len()).0), Some(data))
        }
        msg => (encode(from, key, msg), None),
    }
}

/// A frame as received: whole, or an eager DMA's header whose `len` bytes
/// follow as a data message of their own (`Transport::receive_data`); its
/// envelope holds the DMA with no data yet.
#[derive(Debug)]
pub enum Incoming {
    Whole(Envelope),
    DataFollows { envelope: Envelope, len: usize },
}

/// The bytes of `msg` from process `from` for launch `key` (a DMA's data
/// last, in place behind the header when its buffer has room).
pub fn encode(from: u32, key: GlobalKey, msg: Msg) -> Payload {
    match msg {
        Msg::DmaEager { dst, sync, data } => {
            let header = eager_header(from, key, 1, &dst, &sync, data.len());
            data.prefixed(&header.0)
        }
        Msg::DmaData { id, data } => {
            let mut o = envelope_start(from, key);
            o.u8(4);
            o.u64(id);
            o.u64(data.len() as u64);
            data.prefixed(&o.0)
        }
        other => {
            let mut o = envelope_start(from, key);
            encode_fields(&mut o, &other);
            Payload::from_vec(o.0)
        }
    }
}

/// A frame's sender and launch, which every frame begins with.
fn envelope_start(from: u32, key: GlobalKey) -> Out {
    let mut o = Out(Vec::with_capacity(64));
    o.u32(from);
    o.u64(key.uid);
    o.u64(key.seq);
    o
}

/// An eager DMA's frame up to its data: tag 1, the data follows in the
/// same frame; tag 10, as a message of its own.
fn eager_header(from: u32, key: GlobalKey, tag: u8, dst: &DstSide, sync: &Option<RaceSync>, len: usize) -> Out {
    let mut o = envelope_start(from, key);
    o.u8(tag);
    o.dst(dst);
    o.sync(sync);
    o.u64(len as u64);
    o
}

fn encode_fields(o: &mut Out, msg: &Msg) {
    match msg {
        Msg::Signal { gcore, sem, inc, sync } => {
            o.u8(0);
            o.u32(*gcore);
            o.u32(*sem);
            o.i64(*inc);
            o.sync(sync);
        }
        Msg::DmaQueued { id, dst, bytes, describe, sync } => {
            o.u8(2);
            o.u64(*id);
            o.dst(dst);
            o.i64(*bytes);
            o.bytes(describe.as_bytes());
            o.sync(sync);
        }
        Msg::DmaRead { id } => {
            o.u8(3);
            o.u64(*id);
        }
        Msg::Barrier { generation, count, clock } => {
            o.u8(5);
            o.u64(*generation);
            o.u32(*count);
            o.u32(clock.len() as u32);
            for &c in clock {
                o.u32(c);
            }
        }
        Msg::Fail { kind, message, device, core } => {
            o.u8(6);
            o.u8(kind_code(*kind));
            o.bytes(message.as_bytes());
            o.opt(*device);
            o.opt(*core);
        }
        Msg::Left => o.u8(7),
        Msg::Probe { wave } => {
            o.u8(8);
            o.u64(*wave);
        }
        Msg::Status { wave, status } => {
            o.u8(9);
            o.u64(*wave);
            o.u8(status.joined as u8 | (status.quiescent as u8) << 1 | (status.left as u8) << 2);
            o.u64(status.sent);
            o.u64(status.received);
            o.u64(status.epoch);
            o.u32(status.blocked.len() as u32);
            for line in &status.blocked {
                o.bytes(line.as_bytes());
            }
        }
        Msg::DmaEager { .. } | Msg::DmaData { .. } => unreachable!("encoded with their payload"),
    }
}

// ------------------------------------------------------------- decoding

struct In<'a>(&'a [u8], usize);

fn short() -> RtError {
    RtError::internal("a message from another process is truncated")
}

impl In<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        self.1 += n;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| short())?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| short())?))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = usize::try_from(self.u64()?).map_err(|_| short())?;
        Ok(self.take(n)?.to_vec())
    }
    fn text(&mut self) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.bytes()?).into_owned())
    }
    fn opt(&mut self) -> Result<Option<u32>> {
        let some = self.u8()? != 0;
        let v = self.u32()?;
        Ok(some.then_some(v))
    }
    fn sync(&mut self) -> Result<Option<RaceSync>> {
        if self.u8()? == 0 {
            return Ok(None);
        }
        let n = self.u32()? as usize;
        let clock = (0..n).map(|_| self.u32()).collect::<Result<Vec<_>>>()?;
        Ok(Some(RaceSync { clock, device: self.u32()?, core: self.u32()?, site: self.text()? }))
    }
    fn dst(&mut self) -> Result<DstSide> {
        let (device, core) = (self.u32()?, self.u32()?);
        let space = MemorySpace::from_code(self.u8()? as i64)?;
        let (id, sem) = (self.u32()?, self.u32()?);
        let n = self.u32()? as usize;
        let mut dims = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let (start, size, stride) = (self.i64()?, self.i64()?, self.i64()?);
            dims.push(DimSel { start, size, stride, squeezed: self.u8()? != 0 });
        }
        Ok(DstSide { device, core, space, id, region: Region::new(dims), sem })
    }
}

/// The frame `bytes` holds (a DMA's data stays in its buffer); a header
/// whose data follows apart is an error here (see [`decode_incoming`]).
pub fn decode(bytes: Payload) -> Result<Envelope> {
    match decode_incoming(bytes)? {
        Incoming::Whole(e) => Ok(e),
        Incoming::DataFollows { .. } => Err(RtError::internal("a DMA header whose data follows apart")),
    }
}

/// The frame `bytes` holds, or the header of data that follows apart.
pub fn decode_incoming(bytes: Payload) -> Result<Incoming> {
    let mut i = In(&bytes, 0);
    // The data of a DMA frame: the rest of the buffer, checked against its length.
    let payload = |i: &mut In| -> Result<(usize, usize)> {
        let n = usize::try_from(i.u64()?).map_err(|_| short())?;
        if i.0.len() != n {
            return Err(short());
        }
        Ok((i.1, i.1 + n))
    };
    let from = i.u32()?;
    let key = GlobalKey { uid: i.u64()?, seq: i.u64()? };
    let msg = match i.u8()? {
        0 => Msg::Signal { gcore: i.u32()?, sem: i.u32()?, inc: i.i64()?, sync: i.sync()? },
        1 => {
            let dst = i.dst()?;
            let sync = i.sync()?;
            let (a, b) = payload(&mut i)?;
            return Ok(Incoming::Whole(Envelope {
                from,
                key,
                msg: Msg::DmaEager { dst, sync, data: bytes.slice(a, b) },
            }));
        }
        2 => Msg::DmaQueued { id: i.u64()?, dst: i.dst()?, bytes: i.i64()?, describe: i.text()?, sync: i.sync()? },
        3 => Msg::DmaRead { id: i.u64()? },
        4 => {
            let id = i.u64()?;
            let (a, b) = payload(&mut i)?;
            return Ok(Incoming::Whole(Envelope { from, key, msg: Msg::DmaData { id, data: bytes.slice(a, b) } }));
        }
        5 => {
            let (generation, count) = (i.u64()?, i.u32()?);
            let n = i.u32()? as usize;
            Msg::Barrier { generation, count, clock: (0..n).map(|_| i.u32()).collect::<Result<Vec<_>>>()? }
        }
        6 => {
            let kind = *ErrorKind::ALL.get(i.u8()? as usize).ok_or_else(short)?;
            Msg::Fail { kind, message: i.text()?, device: i.opt()?, core: i.opt()? }
        }
        7 => Msg::Left,
        8 => Msg::Probe { wave: i.u64()? },
        9 => {
            let wave = i.u64()?;
            let flags = i.u8()?;
            let (sent, received, epoch) = (i.u64()?, i.u64()?, i.u64()?);
            let n = i.u32()? as usize;
            let blocked = (0..n).map(|_| i.text()).collect::<Result<Vec<_>>>()?;
            let status = Status {
                joined: flags & 1 != 0,
                quiescent: flags & 2 != 0,
                left: flags & 4 != 0,
                sent,
                received,
                epoch,
                blocked,
            };
            Msg::Status { wave, status }
        }
        10 => {
            let (dst, sync) = (i.dst()?, i.sync()?);
            let len = usize::try_from(i.u64()?).map_err(|_| short())?;
            let msg = Msg::DmaEager { dst, sync, data: Payload::from_vec(Vec::new()) };
            return Ok(Incoming::DataFollows { envelope: Envelope { from, key, msg }, len });
        }
        t => return Err(RtError::internal(format!("a message from another process has unknown tag {t}"))),
    };
    Ok(Incoming::Whole(Envelope { from, key, msg }))
}
