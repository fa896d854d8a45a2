//! Shared-memory rings beside a worker's pipes (Linux).
//!
//! A frame crossing a pipe costs a `write` on one side and a `poll` and a
//! `read` on the other: about 2.8 µs on the development VM, against about
//! 0.3 µs through shared memory, and a trivial run sends five frames. So
//! the host makes one sealed memfd per worker, holding two single-producer rings
//! (host to worker, worker to host), and the worker maps it. Frames are
//! the pipe's: a 4-byte little-endian length and the JSON message.
//!
//! The pipes stay, for three things the rings do not do:
//! - **Waking a reader that sleeps.** A reader spins on the ring while it
//!   may ([`super::may_spin`]); then it says it sleeps (a flag in the
//!   ring), looks once more, and blocks reading its pipe. A writer that
//!   finds the flag set after publishing writes a *doorbell*, an empty
//!   frame, to the pipe. Both sides fence between their store and their
//!   load, so at least one of them sees the other's: no wake-up is lost. A
//!   doorbell that comes after the reader found the frame itself is read
//!   and skipped later.
//! - **Frames that do not fit.** A frame larger than the free space, or
//!   than 16 KiB ([`INLINE_MAX`]), goes on the pipe, after a *marker* in
//!   the ring that says so: the reader
//!   takes it from the pipe when it reaches the marker, so the order of
//!   frames holds across both.
//! - **Death.** A worker that dies closes its pipe: the host's blocking
//!   read ends, as before.
//!
//! The worker is not trusted. Each side keeps its own copy of its ring
//! positions and only publishes them; what it reads of the other side's
//! (a position, a length, the bytes) is checked against the ring's size
//! and copied out before it is parsed, so a worker that scribbles on the
//! rings makes the host see a broken protocol (and kill it), never read
//! outside the mapping. The memfd is sealed against shrinking, so the
//! worker cannot make the host's mapping fault either. Each worker gets a
//! region of its own. With rings, the worker's stdin is a Unix socket
//! rather than a pipe, and the host's first frame on it (`Init`) carries
//! the region's descriptor (`SCM_RIGHTS`, [`send_with_descriptor`]), so no
//! other process can be handed it, and the worker is started with
//! `posix_spawn` rather than a fork of the host (which, in a host with a
//! large heap, copies its page tables and makes its next writes fault).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};

/// Bytes of frames each ring holds.
pub(crate) const CAPACITY: usize = 64 << 10;
/// Positions, the sleep flag and the writer's CPU, each on a cache line
/// of its own.
const HEADER: usize = 256;
const HEAD: usize = 0;
const TAIL: usize = 64;
const SLEEPING: usize = 128;
/// The CPU the writer was on when it last published, plus one (0: not
/// known). Only a hint for where the reader should not be
/// ([`Rings::writer_cpu`]).
const WRITER_CPU: usize = 192;
const RING: usize = HEADER + CAPACITY;
/// The whole region: the host's ring, then the worker's.
const REGION: usize = 2 * RING;
/// Larger frames go on the pipe (after a marker): the ring copies a byte
/// at a time (atomically, as memory the other side may write), the pipe
/// with `memcpy`, and a frame this large is rare and costs far more to
/// parse than to send.
const INLINE_MAX: usize = 16 << 10;
/// A length that says "the next frame is on the pipe".
const MARKER: u32 = u32::MAX;

fn broken(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the shared ring is broken: {what}"),
    )
}

/// One mapping of a region, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Region {
    base: *mut u8,
}

// SAFETY: the mapping is process-wide memory, and every access to it goes
// through atomics (`Rings`); the pointer itself is only read.
#[allow(unsafe_code)]
unsafe impl Send for Region {}

impl Region {
    /// The host's: a new sealed memfd, mapped, and its descriptor (for
    /// [`send_with_descriptor`]).
    #[allow(unsafe_code)]
    pub(crate) fn create() -> io::Result<(Region, OwnedFd)> {
        // SAFETY: a constant NUL-terminated name and flags; the result is
        // checked.
        let fd = unsafe {
            libc::memfd_create(
                c"harness-rings".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain calls on a descriptor we own; results checked.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), REGION as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The worker cannot shrink it under the host's mapping (a
            // SIGBUS in the host), nor change the seals.
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let region = Region::map(fd.as_raw_fd())?;
        Ok((region, fd))
    }

    /// Maps the region open at `fd` (the worker's, from
    /// [`recv_with_descriptor`]).
    #[allow(unsafe_code)]
    pub(crate) fn map(fd: RawFd) -> io::Result<Region> {
        // SAFETY: a shared mapping of REGION bytes of `fd`; the result is
        // checked. A file shorter than that fails here (the host's is
        // sealed at this size).
        let base = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return Err(io::Error::last_os_error());
            }
            if (st.st_size as u64) < REGION as u64 {
                return Err(broken("the region is too small"));
            }
            libc::mmap(
                std::ptr::null_mut(),
                REGION,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region { base: base.cast() })
    }

    /// The 32-bit word at `offset` of ring `ring`'s header.
    #[allow(unsafe_code)]
    fn word(&self, ring: usize, offset: usize) -> &AtomicU32 {
        debug_assert!(ring < 2 && offset + 4 <= HEADER && offset.is_multiple_of(4));
        // SAFETY: in bounds of the mapping (which lives as long as
        // `self`), aligned (the mapping is page-aligned), and only ever
        // accessed atomically.
        unsafe { &*self.base.add(ring * RING + offset).cast::<AtomicU32>() }
    }

    /// Ring `ring`'s frame bytes.
    #[allow(unsafe_code)]
    fn data(&self, ring: usize) -> &[AtomicU8] {
        // SAFETY: as `word`: in bounds, and only accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base.add(ring * RING + HEADER).cast(), CAPACITY) }
    }
}

impl Drop for Region {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), REGION) };
    }
}

/// A connected pair of Unix stream sockets, both close-on-exec: the
/// host's end, and the end that becomes a worker's stdin (`posix_spawn`
/// puts it at descriptor 0, which alone survives the exec).
#[allow(unsafe_code)]
pub(crate) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors; the result is checked.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for one control message carrying one descriptor (`CMSG_SPACE` of
/// an int is 16 or 24 bytes), aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct OneFd([u8; 32]);

/// Sends `bytes` on the Unix socket `sock` with `fd` attached
/// (`SCM_RIGHTS`): how the host hands a worker its region, with the first
/// frame. Says how many bytes went; the rest go as plain writes (the
/// descriptor travels with the first byte).
#[allow(unsafe_code)]
pub(crate) fn send_with_descriptor(sock: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<usize> {
    let mut control = OneFd([0; 32]);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: the header points at `iov` and `control`, which outlive the
    // call; CMSG_SPACE of one int fits in `control` (checked below), so
    // CMSG_FIRSTHDR is not null and its data has room for the int.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        assert!(space <= control.0.len());
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        loop {
            let n = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// The worker's first read of its stdin: what is there (at most `max`
/// bytes, blocking until something is), and the descriptor that came with
/// it, if one did (close-on-exec; any more are closed). A stdin that is
/// not a socket (the host sent no rings) reads nothing here: `(empty,
/// None)`, and the bytes stay for the usual reads.
#[allow(unsafe_code)]
pub(crate) fn recv_with_descriptor(
    sock: RawFd,
    max: usize,
) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut buf = vec![0u8; max];
    let mut control = OneFd([0; 32]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the header points at `iov` (over `buf`) and `control`, which
    // outlive the call; the kernel writes at most their lengths. The
    // control messages read back are the kernel's, walked with the CMSG
    // macros within `msg_controllen`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len() as _;
        let n = loop {
            let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOTSOCK) => return Ok((Vec::new(), None)),
                _ => return Err(e),
            }
        };
        buf.truncate(n);
        let mut given = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    // Each one received is ours to close: keep the first.
                    let fd = OwnedFd::from_raw_fd(fd);
                    given.get_or_insert(fd);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((buf, given))
    }
}

/// Where [`Rings::push`] put a frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// In the ring.
    Ring,
    /// Only a marker fitted: the frame goes on the pipe now.
    Marker,
    /// Not even a marker fitted: the reader has not caught up.
    Full,
}

/// What [`Rings::pop`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Popped {
    Empty,
    /// A frame, now in the caller's buffer.
    Frame,
    /// The next frame is on the pipe.
    OnPipe,
}

/// One side's view of a region: the ring it writes and the ring it reads,
/// with its own copies of its positions (never read back from the
/// region, where the other side could change them).
#[derive(Debug)]
pub(crate) struct Rings {
    region: Region,
    out: usize,
    inp: usize,
    head: u32,
    tail: u32,
}

impl Rings {
    /// The host's side of a region it created (both rings are empty).
    pub(crate) fn host(region: Region) -> Rings {
        Rings {
            region,
            out: 0,
            inp: 1,
            head: 0,
            tail: 0,
        }
    }

    /// The worker's side.
    pub(crate) fn worker(region: Region) -> Rings {
        Rings {
            region,
            out: 1,
            inp: 0,
            head: 0,
            tail: 0,
        }
    }

    /// Writes `frame` (length and body) into the outgoing ring, or a
    /// marker when only that fits, and publishes it. Says where it went,
    /// and whether the reader sleeps and needs a doorbell.
    pub(crate) fn push(&mut self, body: &[u8]) -> io::Result<(Pushed, bool)> {
        let tail = self.region.word(self.out, TAIL).load(Ordering::Acquire);
        let used = self.head.wrapping_sub(tail) as usize;
        if used > CAPACITY {
            return Err(broken("the reader's position is out of range"));
        }
        let free = CAPACITY - used;
        let pushed = if body.len() <= INLINE_MAX && body.len() + 4 <= free {
            self.put(&(body.len() as u32).to_le_bytes());
            self.put(body);
            Pushed::Ring
        } else if free >= 4 {
            self.put(&MARKER.to_le_bytes());
            Pushed::Marker
        } else {
            return Ok((Pushed::Full, false));
        };
        let cpu = crate::spin::current_cpu().map_or(0, |c| c.wrapping_add(1));
        self.region
            .word(self.out, WRITER_CPU)
            .store(cpu, Ordering::Relaxed);
        self.region
            .word(self.out, HEAD)
            .store(self.head, Ordering::Release);
        // Publish, then look for a sleeper (see the module docs).
        fence(Ordering::SeqCst);
        let sleeping = self.region.word(self.out, SLEEPING);
        let doorbell =
            sleeping.load(Ordering::SeqCst) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0;
        Ok((pushed, doorbell))
    }

    fn put(&mut self, bytes: &[u8]) {
        let data = self.region.data(self.out);
        let at = self.head as usize % CAPACITY;
        for (i, b) in bytes.iter().enumerate() {
            data[(at + i) % CAPACITY].store(*b, Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(bytes.len() as u32);
    }

    /// Whether the incoming ring has something (a frame or a marker).
    pub(crate) fn ready(&self) -> bool {
        self.region.word(self.inp, HEAD).load(Ordering::Acquire) != self.tail
    }

    /// Takes the next frame's body into `body`, or the marker.
    pub(crate) fn pop(&mut self, body: &mut Vec<u8>) -> io::Result<Popped> {
        let head = self.region.word(self.inp, HEAD).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tail) as usize;
        if avail == 0 {
            return Ok(Popped::Empty);
        }
        if !(4..=CAPACITY).contains(&avail) {
            return Err(broken("the writer's position is out of range"));
        }
        let data = self.region.data(self.inp);
        let at = self.tail as usize % CAPACITY;
        let byte = |i: usize| data[(at + i) % CAPACITY].load(Ordering::Relaxed);
        let len = u32::from_le_bytes([byte(0), byte(1), byte(2), byte(3)]);
        let popped = if len == MARKER {
            self.tail = self.tail.wrapping_add(4);
            Popped::OnPipe
        } else {
            let len = len as usize;
            if len + 4 > avail {
                return Err(broken("a frame runs past what was written"));
            }
            body.clear();
            body.extend((4..4 + len).map(byte));
            self.tail = self.tail.wrapping_add(4 + len as u32);
            Popped::Frame
        };
        self.region
            .word(self.inp, TAIL)
            .store(self.tail, Ordering::Release);
        Ok(popped)
    }

    /// About to block on the pipe: says so, then looks once more. True:
    /// still nothing, block (a writer will ring); false: something came,
    /// take it.
    pub(crate) fn sleep(&self) -> bool {
        let sleeping = self.region.word(self.inp, SLEEPING);
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.region.word(self.inp, HEAD).load(Ordering::SeqCst) != self.tail {
            sleeping.store(0, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Awake again (after a read from the pipe).
    pub(crate) fn awake(&self) {
        self.region
            .word(self.inp, SLEEPING)
            .store(0, Ordering::SeqCst);
    }

    /// The CPU the other side was on when it last published a frame, if
    /// it said. The host's word is only a hint to the worker; the host
    /// never acts on the worker's.
    pub(crate) fn writer_cpu(&self) -> Option<u32> {
        let cpu = self
            .region
            .word(self.inp, WRITER_CPU)
            .load(Ordering::Relaxed);
        cpu.checked_sub(1)
    }

    /// Whether the outgoing ring has room for a marker again.
    pub(crate) fn has_room(&self) -> bool {
        let tail = self.region.word(self.out, TAIL).load(Ordering::Acquire);
        let used = self.head.wrapping_sub(tail) as usize;
        used > CAPACITY || CAPACITY - used >= 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host's and a worker's view of one region, as two processes have.
    fn pair() -> (Rings, Rings) {
        let (region, fd) = Region::create().unwrap();
        let other = Region::map(fd.as_raw_fd()).unwrap();
        (Rings::host(region), Rings::worker(other))
    }

    #[test]
    fn frames_come_out_in_order_across_the_wrap() {
        let (mut host, mut worker) = pair();
        let mut body = Vec::new();
        // Over five times round the ring, in sizes that do not divide it.
        for i in 0..4000u32 {
            let frame = vec![(i % 251) as u8; (i as usize * 37) % 300 + 1];
            assert_eq!(host.push(&frame).unwrap().0, Pushed::Ring);
            assert_eq!(worker.pop(&mut body).unwrap(), Popped::Frame);
            assert_eq!(body, frame);
        }
        assert_eq!(worker.pop(&mut body).unwrap(), Popped::Empty);
        // And the other way.
        worker.push(b"ready").unwrap();
        assert_eq!(host.pop(&mut body).unwrap(), Popped::Frame);
        assert_eq!(body, b"ready");
    }

    #[test]
    fn a_frame_that_does_not_fit_leaves_a_marker_and_a_full_ring_says_so() {
        let (mut host, mut worker) = pair();
        let mut body = Vec::new();
        // Over the inline limit: a marker even in an empty ring.
        assert_eq!(
            host.push(&vec![1u8; INLINE_MAX + 1]).unwrap().0,
            Pushed::Marker
        );
        assert_eq!(worker.pop(&mut body).unwrap(), Popped::OnPipe);
        // Fill it to the last 3 bytes: not even a marker fits.
        let frame = vec![2u8; 8 << 10];
        let frames = CAPACITY / (frame.len() + 4);
        for _ in 0..frames {
            assert_eq!(host.push(&frame).unwrap().0, Pushed::Ring);
        }
        let rest = CAPACITY - frames * (frame.len() + 4);
        assert_eq!(host.push(&vec![3u8; rest - 4 - 3]).unwrap().0, Pushed::Ring);
        assert!(!host.has_room());
        assert_eq!(host.push(b"x").unwrap().0, Pushed::Full);
        assert_eq!(worker.pop(&mut body).unwrap(), Popped::Frame);
        assert_eq!(body, frame);
        assert!(host.has_room());
        // Room for a small frame again, not for one 4 bytes larger than
        // what was freed.
        assert_eq!(
            host.push(&vec![4u8; frame.len() + 4]).unwrap().0,
            Pushed::Marker
        );
        assert_eq!(host.push(b"x").unwrap().0, Pushed::Ring);
    }

    #[test]
    fn a_sleeping_reader_gets_one_doorbell() {
        let (mut host, worker) = pair();
        assert!(worker.sleep(), "nothing to read yet");
        assert_eq!(host.push(b"a").unwrap(), (Pushed::Ring, true));
        assert_eq!(host.push(b"b").unwrap(), (Pushed::Ring, false));
        worker.awake();
        // Something is there: the reader does not sleep.
        assert!(!worker.sleep());
        assert_eq!(host.push(b"c").unwrap(), (Pushed::Ring, false));
    }

    #[test]
    fn each_side_says_which_cpu_it_published_from() {
        let (mut host, mut worker) = pair();
        assert_eq!(worker.writer_cpu(), None, "nothing published yet");
        host.push(b"a").unwrap();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        // The CPU numbers the kernel uses may run past the count where
        // some are offline; it is only a hint, so a loose check.
        assert!(worker.writer_cpu().is_some_and(|c| c < cpus.max(1024)));
        assert_eq!(host.writer_cpu(), None, "the worker has not published");
        worker.push(b"b").unwrap();
        assert!(host.writer_cpu().is_some());
    }

    #[test]
    fn positions_and_lengths_written_by_the_other_side_are_checked() {
        let (mut host, worker) = pair();
        let mut body = Vec::new();
        let region = &worker.region;
        // The worker claims more than the ring holds.
        region
            .word(1, HEAD)
            .store(CAPACITY as u32 + 1, Ordering::Release);
        assert_eq!(
            host.pop(&mut body).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // A frame longer than what was published.
        region.data(1)[0].store(200, Ordering::Relaxed);
        for i in 1..4 {
            region.data(1)[i].store(0, Ordering::Relaxed);
        }
        region.word(1, HEAD).store(10, Ordering::Release);
        assert_eq!(
            host.pop(&mut body).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // Fewer bytes than a length.
        region.word(1, HEAD).store(2, Ordering::Release);
        assert!(host.pop(&mut body).is_err());
        // It says it read past what the host wrote.
        region.word(0, TAIL).store(12345, Ordering::Release);
        assert_eq!(
            host.push(b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    /// Whatever the worker writes into the region, the host's reads and
    /// writes end in a frame within what was published, an empty ring or
    /// an error: never a panic, never a read outside the ring.
    #[test]
    fn the_host_survives_any_bytes_in_the_region() {
        let (mut host, worker) = pair();
        let region = &worker.region;
        // xorshift: reproducible, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut body = Vec::new();
        for round in 0..20_000 {
            // Positions anywhere, near the edges, or near the host's own.
            let pick = |r: u64, near: u32| match r % 4 {
                0 => r as u32,
                1 => near.wrapping_add((r >> 8) as u32 % 16),
                2 => near.wrapping_sub((r >> 8) as u32 % 16),
                _ => near
                    .wrapping_add(CAPACITY as u32)
                    .wrapping_sub((r >> 8) as u32 % 8),
            };
            region
                .word(1, HEAD)
                .store(pick(next(), host.tail), Ordering::Release);
            region
                .word(0, TAIL)
                .store(pick(next(), host.head), Ordering::Release);
            region
                .word(0, SLEEPING)
                .store(next() as u32 % 3, Ordering::Release);
            for _ in 0..8 {
                let at = next() as usize % CAPACITY;
                region.data(1)[at].store(next() as u8, Ordering::Relaxed);
            }
            // A length at the host's read position, now and then plausible.
            let len = match next() % 3 {
                0 => next() as u32,
                1 => next() as u32 % 64,
                _ => MARKER,
            };
            let at = host.tail as usize % CAPACITY;
            for (i, b) in len.to_le_bytes().into_iter().enumerate() {
                region.data(1)[(at + i) % CAPACITY].store(b, Ordering::Relaxed);
            }
            let published = region
                .word(1, HEAD)
                .load(Ordering::Acquire)
                .wrapping_sub(host.tail);
            if let Ok(Popped::Frame) = host.pop(&mut body) {
                assert!(body.len() + 4 <= published as usize, "round {round}");
            }
            let _ = host.push(&vec![7u8; next() as usize % 300]);
            let _ = host.has_room();
            let _ = host.ready();
            let _ = host.sleep();
        }
    }

    #[test]
    fn a_region_too_small_is_refused() {
        // SAFETY: a memfd of one page, checked, closed on drop.
        #[allow(unsafe_code)]
        let fd = unsafe {
            let fd = libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, 4096), 0);
            OwnedFd::from_raw_fd(fd)
        };
        assert!(Region::map(fd.as_raw_fd()).is_err());
    }

    #[test]
    fn the_region_cannot_be_shrunk_under_the_host() {
        let (_region, fd) = Region::create().unwrap();
        // SAFETY: ftruncate on a descriptor we own.
        #[allow(unsafe_code)]
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 0) };
        assert_ne!(r, 0, "the seal must refuse");
    }

    #[test]
    fn the_region_travels_with_the_first_frame_and_nothing_else_does() {
        use std::io::Write;
        let (region, fd) = Region::create().unwrap();
        let (host, worker) = socket_pair().unwrap();
        let frame = b"\x05\0\0\0hello";
        let sent = send_with_descriptor(host.as_raw_fd(), frame, fd.as_raw_fd()).unwrap();
        assert_eq!(sent, frame.len());
        drop(fd);
        // Bytes sent later come without a descriptor, and stay for the
        // usual reads.
        std::fs::File::from(host.try_clone().unwrap())
            .write_all(b"later")
            .unwrap();
        let (first, given) = recv_with_descriptor(worker.as_raw_fd(), 4096).unwrap();
        assert!(first.starts_with(frame));
        let given = given.expect("the descriptor came with the frame");
        // Close-on-exec in the receiver, and the same region: what one
        // mapping writes, the other reads.
        // SAFETY: fcntl on a descriptor we own.
        #[allow(unsafe_code)]
        let flags = unsafe { libc::fcntl(given.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        let (mut a, mut b) = (
            Rings::host(region),
            Rings::worker(Region::map(given.as_raw_fd()).unwrap()),
        );
        a.push(b"through the region").unwrap();
        let mut body = Vec::new();
        assert_eq!(b.pop(&mut body).unwrap(), Popped::Frame);
        assert_eq!(body, b"through the region");
        if first.len() == frame.len() {
            let (rest, none) = recv_with_descriptor(worker.as_raw_fd(), 4096).unwrap();
            assert_eq!(rest, b"later");
            assert!(none.is_none());
        }
        // A pipe is not a socket: nothing is read from it here.
        let mut fds = [0; 2];
        // SAFETY: pipe fills the two descriptors, which we then own.
        #[allow(unsafe_code)]
        let (r, w) = unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        std::fs::File::from(w).write_all(b"x").unwrap();
        let (nothing, none) = recv_with_descriptor(r.as_raw_fd(), 4096).unwrap();
        assert!(nothing.is_empty() && none.is_none());
        assert!(
            super::super::readable(r.as_raw_fd()),
            "the byte is still there"
        );
    }
}
