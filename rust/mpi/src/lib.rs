//! MPI transport of mosaic_rt: moves the frames of launches spanning
//! processes (`mosaic_rt_core::remote`) with two-sided MPI messages.
//!
//! Nothing of MPI is linked or loaded by this crate: the MPI library is
//! the one mpi4py has already loaded and initialised, found through
//! mpi4py's own extension module (`dlopen` with `RTLD_NOLOAD`; `dlsym` on
//! that handle searches its dependencies, libmpi among them). The five
//! functions used are resolved by name. Handles differ between MPI ABIs
//! (Open MPI: pointers; MPICH: ints): they are passed by value as
//! machine words, which both ABIs accept in the same registers, and
//! out-handles land in zeroed words (an int handle fills the low bytes).
//! Statuses are opaque buffers of the size mpi4py reports; only
//! `MPI_Get_count` reads them. The sender of a frame is written in the
//! frame itself, so receives use `MPI_ANY_SOURCE` and no status field.
//!
//! Every MPI call is made under one lock (the progress thread polls, core
//! threads send), with non-blocking sends kept until complete: a blocking
//! send of a large frame could wait for a receive that only the progress
//! thread, waiting for the lock, would post. The MPI library must be
//! initialised with `MPI_THREAD_MULTIPLE` (mpi4py's default), since the
//! user's Python threads may call MPI too.

mod dl;

use mosaic_rt_core::remote::{Payload, Transport};
use mosaic_rt_core::{Result, RtError};
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

/// The tag of every frame (on a communicator of mosaic_rt's own).
const TAG: c_int = 0x4d52;
/// The tag of a split frame's data (received by `receive_data` only, so
/// polls never match it).
const TAG_DATA: c_int = 0x4d53;

/// Frames taken per poll at most (then the caller delivers them).
const MAX_FRAMES_PER_POLL: usize = 256;

type Isend = unsafe extern "C" fn(*const c_void, c_int, usize, c_int, c_int, usize, *mut usize) -> c_int;
type Test = unsafe extern "C" fn(*mut usize, *mut c_int, *mut u8) -> c_int;
type Improbe = unsafe extern "C" fn(c_int, c_int, usize, *mut c_int, *mut usize, *mut u8) -> c_int;
type Mrecv = unsafe extern "C" fn(*mut c_void, c_int, usize, *mut usize, *mut u8) -> c_int;
type GetCount = unsafe extern "C" fn(*const u8, usize, *mut c_int) -> c_int;
type Recv = unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, c_int, usize, *mut u8) -> c_int;

/// The MPI functions used, resolved from the loaded library.
struct Functions {
    isend: Isend,
    test: Test,
    improbe: Improbe,
    mrecv: Mrecv,
    get_count: GetCount,
    recv: Recv,
}

/// What mpi4py tells of the MPI library and the communicator to use.
#[derive(Clone, Debug)]
pub struct MpiSetup {
    /// A loaded object whose dependencies include libmpi (mpi4py's
    /// `MPI` extension module).
    pub library: String,
    /// The communicator (a duplicate of mosaic_rt's own), as a handle word.
    pub comm: usize,
    /// `MPI_BYTE`'s handle word.
    pub byte: usize,
    pub any_source: i32,
    /// `sizeof(MPI_Status)`.
    pub status_size: usize,
    /// This process's index (the launch's process numbering).
    pub process: u32,
    /// The MPI rank of each process index.
    pub ranks: Vec<i32>,
}

struct Pending {
    request: usize,
    _frame: Payload,
}

pub struct MpiTransport {
    f: Functions,
    setup: MpiSetup,
    /// Sends in flight (their buffers must live until complete).
    sends: Mutex<Vec<Pending>>,
    /// MPI is (about to be) finalised: no more calls.
    closed: std::sync::atomic::AtomicBool,
}

fn check(rc: c_int, what: &str) -> Result<()> {
    if rc != 0 {
        return Err(RtError::internal(format!("{what} failed with MPI error code {rc}")));
    }
    Ok(())
}

impl MpiTransport {
    /// Resolves the MPI functions of `setup.library`.
    pub fn open(setup: MpiSetup) -> Result<MpiTransport> {
        if setup.status_size > STATUS_WORDS * 8 {
            return Err(RtError::internal(format!("MPI_Status of {} bytes is too large", setup.status_size)));
        }
        let lib = dl::Library::loaded(&setup.library)?;
        // SAFETY: each symbol is the MPI function of that name, whose C
        // signature the type it is read as spells (handles as words).
        let f = unsafe {
            Functions {
                isend: std::mem::transmute::<*mut c_void, Isend>(lib.symbol("MPI_Isend")?),
                test: std::mem::transmute::<*mut c_void, Test>(lib.symbol("MPI_Test")?),
                improbe: std::mem::transmute::<*mut c_void, Improbe>(lib.symbol("MPI_Improbe")?),
                mrecv: std::mem::transmute::<*mut c_void, Mrecv>(lib.symbol("MPI_Mrecv")?),
                get_count: std::mem::transmute::<*mut c_void, GetCount>(lib.symbol("MPI_Get_count")?),
                recv: std::mem::transmute::<*mut c_void, Recv>(lib.symbol("MPI_Recv")?),
            }
        };
        Ok(MpiTransport { f, setup, sends: Mutex::new(Vec::new()), closed: Default::default() })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.sends.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the sends that completed (call with the lock held).
    fn reap(&self, sends: &mut Vec<Pending>) -> Result<()> {
        let mut status = [0u64; STATUS_WORDS];
        let mut k = 0;
        while k < sends.len() {
            let mut done: c_int = 0;
            // SAFETY: a request word MPI_Isend filled, a flag and a status
            // buffer at least sizeof(MPI_Status) (checked in `open`).
            let rc = unsafe { (self.f.test)(&mut sends[k].request, &mut done, status.as_mut_ptr().cast()) };
            check(rc, "MPI_Test")?;
            if done != 0 {
                sends.swap_remove(k);
            } else {
                k += 1;
            }
        }
        Ok(())
    }
}

/// Words of the status buffer (larger than any MPI's `MPI_Status`).
const STATUS_WORDS: usize = 8;

/// A message's length as MPI counts it.
fn mpi_len(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| RtError::value(format!("a message of {n} bytes is too large for MPI")))
}

fn shut_down() -> RtError {
    RtError::new(mosaic_rt_core::ErrorKind::Runtime, "MPI was shut down (the process is exiting)")
}

impl MpiTransport {
    fn rank(&self, process: u32) -> Result<c_int> {
        self.setup
            .ranks
            .get(process as usize)
            .copied()
            .ok_or_else(|| RtError::internal(format!("no MPI rank for process {process}")))
    }

    /// Starts sending `frame` with `tag` (call with the lock held); it is
    /// kept in `sends` until complete.
    fn isend(&self, sends: &mut Vec<Pending>, rank: c_int, tag: c_int, frame: Payload) -> Result<()> {
        let len = mpi_len(frame.len())?;
        let mut request: usize = 0;
        // SAFETY: `frame` stays alive in `sends` until MPI_Test reports the
        // send complete; handles are the words mpi4py gave for this MPI.
        let rc = unsafe {
            (self.f.isend)(frame.as_ptr().cast(), len, self.setup.byte, rank, tag, self.setup.comm, &mut request)
        };
        check(rc, "MPI_Isend")?;
        sends.push(Pending { request, _frame: frame });
        Ok(())
    }
}

impl Transport for MpiTransport {
    fn process(&self) -> u32 {
        self.setup.process
    }

    fn send(&self, to: u32, frame: Payload) -> Result<()> {
        let rank = self.rank(to)?;
        let mut sends = self.lock();
        if self.is_closed() {
            return Err(shut_down());
        }
        self.isend(&mut sends, rank, TAG, frame)?;
        // Testing every send, this one included, also pushes it along now;
        // completed sends give their (large, pooled) buffers back early.
        self.reap(&mut sends)
    }

    fn send_split(&self, to: u32, header: Payload, data: Payload) -> Result<()> {
        let rank = self.rank(to)?;
        let mut sends = self.lock();
        if self.is_closed() {
            return Err(shut_down());
        }
        // Both under one hold of the lock: once the header can be polled,
        // its data has been posted behind it.
        self.isend(&mut sends, rank, TAG, header)?;
        self.isend(&mut sends, rank, TAG_DATA, data)?;
        self.reap(&mut sends)
    }

    fn receive_data(&self, from: u32, into: &mut [u8]) -> Result<()> {
        let rank = self.rank(from)?;
        let len = mpi_len(into.len())?;
        let _sends = self.lock();
        if self.is_closed() {
            return Err(shut_down());
        }
        let mut status = [0u64; STATUS_WORDS];
        // SAFETY: `into` is writable for `len` bytes and MPI writes at most
        // that many; a status buffer at least sizeof(MPI_Status). Blocking
        // here is bounded: the sender posted this data with the header.
        let rc = unsafe {
            (self.f.recv)(
                into.as_mut_ptr().cast(),
                len,
                self.setup.byte,
                rank,
                TAG_DATA,
                self.setup.comm,
                status.as_mut_ptr().cast(),
            )
        };
        check(rc, "MPI_Recv")?;
        let mut count: c_int = 0;
        // SAFETY: the status MPI_Recv just filled.
        check(unsafe { (self.f.get_count)(status.as_ptr().cast(), self.setup.byte, &mut count) }, "MPI_Get_count")?;
        if count != len {
            return Err(RtError::internal(format!("a DMA's data arrived with {count} bytes, {len} expected")));
        }
        Ok(())
    }

    fn close(&self) {
        // Under the lock: no MPI call is in progress once this returns.
        let _sends = self.lock();
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn poll(&self) -> Result<Vec<Payload>> {
        let mut sends = self.lock();
        if self.is_closed() {
            return Ok(Vec::new());
        }
        if !sends.is_empty() {
            self.reap(&mut sends)?;
        }
        let mut frames = Vec::new();
        let mut status = [0u64; STATUS_WORDS];
        while frames.len() < MAX_FRAMES_PER_POLL {
            let (mut flag, mut message): (c_int, usize) = (0, 0);
            // SAFETY: out-words for the flag and message handle, a status
            // buffer at least sizeof(MPI_Status).
            let rc = unsafe {
                (self.f.improbe)(
                    self.setup.any_source,
                    TAG,
                    self.setup.comm,
                    &mut flag,
                    &mut message,
                    status.as_mut_ptr().cast(),
                )
            };
            check(rc, "MPI_Improbe")?;
            if flag == 0 {
                break;
            }
            let mut count: c_int = 0;
            // SAFETY: the status MPI_Improbe just filled.
            check(unsafe { (self.f.get_count)(status.as_ptr().cast(), self.setup.byte, &mut count) }, "MPI_Get_count")?;
            let mut buf = Payload::for_receive(count.max(0) as usize);
            // SAFETY: a buffer of exactly the probed size and the matched
            // message handle MPI_Improbe returned (consumed here).
            let rc = unsafe {
                (self.f.mrecv)(
                    buf.as_mut_slice().as_mut_ptr().cast(),
                    count,
                    self.setup.byte,
                    &mut message,
                    status.as_mut_ptr().cast(),
                )
            };
            check(rc, "MPI_Mrecv")?;
            frames.push(buf);
        }
        Ok(frames)
    }
}
