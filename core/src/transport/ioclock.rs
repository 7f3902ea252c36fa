//! When bytes really moved: a connection's socket reads and writes are timestamped as
//! they happen, so a request is dated by the write that sent it and a token by the read
//! that brought it, rather than by when the request task got to run. With 2000 requests
//! starting or streaming at once, the connection task that writes or reads can run
//! milliseconds apart from the request task; the socket times are the tighter bounds.
//!
//! Reads are dated by the kernel: the socket is read with `recvmsg` and
//! `SO_TIMESTAMPNS`, so a read carries the time the kernel queued its bytes, not the
//! time the connection task got to run. The stamp is on the realtime clock and is
//! turned into an [`Instant`] by its age; a read without one (the kernel switches
//! stamping on host-wide lazily, so the first packets may lack it) is dated when it
//! returns. For any chunk, the latest read stamp seen when the chunk is handled is at or
//! after the arrival of its bytes (stamps only move forward) and never after "now".
//!
//! Writes: the request task arms the clock just before handing a request to an HTTP/1.1
//! connection (one request at a time); the first write after that is the request's, and
//! is stamped just before the bytes go to the socket (docs/measurement.md: st is "just before the
//! request is written"). HTTP/2 streams share a connection, so they are not armed.

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;
use std::cell::RefCell;
use std::io::{IoSliceMut, Write as _};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The origin of stored stamps: a minute before first use, so that kernel stamps of
/// bytes that arrived just before are representable.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(60)).unwrap_or(now)
    })
}

/// Write stamp: not armed.
const IDLE: u64 = u64::MAX;
/// Write stamp: armed, no write since.
const ARMED: u64 = 0;

fn ns_of(at: Instant) -> u64 {
    (at.saturating_duration_since(base()).as_nanos() as u64).clamp(1, IDLE - 1)
}

fn now_ns() -> u64 {
    ns_of(Instant::now())
}

fn instant(ns: u64) -> Instant {
    base() + Duration::from_nanos(ns)
}

#[derive(Debug)]
struct Stamps {
    /// Latest successful read (0: none yet).
    read: AtomicU64,
    /// First write since armed, or `IDLE` / `ARMED`.
    write: AtomicU64,
    /// The end of the latest write since the first was stamped (0: none): the request's
    /// last byte handed to the kernel (D35's `sending`).
    written: AtomicU64,
}

/// The socket times of one connection: its latest read and the first write of the
/// request in flight.
#[derive(Debug, Clone)]
pub struct IoClock(Arc<Stamps>);

impl Default for IoClock {
    fn default() -> Self {
        Self(Arc::new(Stamps { read: AtomicU64::new(0), write: AtomicU64::new(IDLE), written: AtomicU64::new(0) }))
    }
}

impl IoClock {
    fn mark_read(&self, at: Instant) {
        self.0.read.fetch_max(ns_of(at), Ordering::Relaxed);
    }

    fn mark_write(&self) {
        if self.0.write.load(Ordering::Relaxed) == ARMED {
            let _ = self.0.write.compare_exchange(ARMED, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A write of the armed request returned: the latest end of its bytes so far.
    fn mark_written(&self) {
        if !matches!(self.0.write.load(Ordering::Relaxed), IDLE | ARMED) {
            self.0.written.store(now_ns(), Ordering::Relaxed);
        }
    }

    /// When the data being handled now arrived, at the latest.
    pub fn arrival(&self) -> Instant {
        let now = Instant::now();
        match self.0.read.load(Ordering::Relaxed) {
            0 => now,
            ns => instant(ns).min(now),
        }
    }

    /// Stamp the next write: the request about to be handed over is the only one on the
    /// connection.
    pub fn arm_write(&self) {
        self.0.write.store(ARMED, Ordering::Relaxed);
    }

    /// When the first write since [`arm_write`](Self::arm_write) began and when the last
    /// one ended, if there was one; disarms the clock.
    pub fn take_write(&self) -> Option<(Instant, Instant)> {
        let last = self.0.written.swap(0, Ordering::Relaxed);
        match self.0.write.swap(IDLE, Ordering::Relaxed) {
            IDLE | ARMED => None,
            ns => Some((instant(ns), instant(last.max(ns)))),
        }
    }
}

thread_local! {
    /// Where reads land before they are copied to the caller (64 KiB per thread).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; 64 * 1024].into_boxed_slice());
    /// Where the pieces of a small vectored write are joined (see `poll_write_vectored`).
    static JOINED: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(JOIN_MAX));
}

/// Most bytes of a vectored write that are joined and sent with one `write` rather than
/// a `writev`: about where copying them costs what the `writev` would have cost more.
const JOIN_MAX: usize = 8 * 1024;

/// A TCP stream that stamps its [`IoClock`] on every read that returned bytes (with the
/// kernel's receive time) and on the first write after the clock was armed.
///
/// It drives the socket through [`AsyncFd`] rather than tokio's `TcpStream` so that
/// it can read with `recvmsg` and still do what tokio does after a short read: forget
/// the readiness, so the next poll waits for the reactor instead of paying a syscall
/// that would only return `EAGAIN`.
#[derive(Debug)]
pub struct Stamped {
    io: AsyncFd<std::net::TcpStream>,
    clock: IoClock,
    /// Control-message space for one timestamp, reused.
    cmsg: Vec<u8>,
    /// The latest read carried a kernel stamp.
    last_stamped: bool,
}

impl Stamped {
    #[allow(unsafe_code, reason = "AsyncFd registration; the stream owns its descriptor")]
    pub fn new(tcp: TcpStream) -> std::io::Result<(Self, IoClock)> {
        // Without the option every read is dated when it returns (still correct, only
        // later under load).
        let _ = setsockopt(&tcp, sockopt::ReceiveTimestampns, &true);
        // Still non-blocking; from now on registered with the reactor by the AsyncFd.
        let std = tcp.into_std()?;
        // SAFETY: a std::net::TcpStream owns its descriptor: it is open and the same
        // for as long as the stream lives, and the AsyncFd owns the stream.
        let io = unsafe { AsyncFd::register_with_interest(std, Interest::READABLE | Interest::WRITABLE) }?;
        let clock = IoClock::default();
        let cmsg = nix::cmsg_space!(TimeSpec);
        Ok((Self { io, clock: clock.clone(), cmsg, last_stamped: false }, clock))
    }
}

/// One `recvmsg` into `buf`: bytes read and the kernel's stamp of them.
#[expect(clippy::ptr_arg, reason = "nix's recvmsg takes the control buffer as a Vec")]
fn recv(fd: RawFd, buf: &mut [u8], cmsg: &mut Vec<u8>) -> std::io::Result<(usize, Option<Instant>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(fd, &mut iov, Some(cmsg), MsgFlags::MSG_DONTWAIT)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                at = Some(by_age(ts));
            }
        }
    }
    Ok((msg.bytes, at))
}

/// The instant of a realtime kernel stamp, by its age; never after now.
fn by_age(ts: TimeSpec) -> Instant {
    let now = Instant::now();
    let stamp = UNIX_EPOCH + Duration::new(ts.tv_sec().max(0) as u64, ts.tv_nsec().clamp(0, 999_999_999) as u32);
    let age = SystemTime::now().duration_since(stamp).unwrap_or_default();
    now.checked_sub(age).unwrap_or(now)
}

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.io.poll_read_ready(cx))?;
            // Received into this thread's scratch buffer and copied out: the caller's
            // buffer is uninitialised memory, which would otherwise be zeroed in full
            // before every read.
            let got = SCRATCH.with_borrow_mut(|scratch| {
                let len = buf.remaining().min(scratch.len());
                let got = guard.try_io(|io| recv(io.as_raw_fd(), &mut scratch[..len], &mut this.cmsg));
                if let Ok(Ok((n, _))) = got {
                    buf.put_slice(&scratch[..n]);
                    if n > 0 && n < len {
                        // Drained (as tokio assumes after a short read).
                        guard.clear_ready();
                    }
                }
                got
            });
            match got {
                Ok(Ok((n, at))) => {
                    if n > 0 {
                        this.last_stamped = at.is_some();
                        this.clock.mark_read(at.unwrap_or_else(Instant::now));
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.clock.mark_write();
        loop {
            let mut guard = ready!(this.io.poll_write_ready(cx))?;
            match guard.try_io(|io| io.get_ref().write(data)) {
                Ok(result) => {
                    this.clock.mark_written();
                    return Poll::Ready(result);
                }
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.clock.mark_write();
        // hyper hands over a request as its head and its body. Linux's `write` of one
        // buffer is cheaper than a `writev` of several (bench/RESULTS.md: 6 % more
        // requests per second on one core with small bodies), so small pieces are joined
        // and written at once; large bodies still go without a copy.
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        loop {
            let mut guard = ready!(this.io.poll_write_ready(cx))?;
            let written = match bufs {
                [one] => guard.try_io(|io| io.get_ref().write(one)),
                _ if total <= JOIN_MAX => JOINED.with_borrow_mut(|joined| {
                    joined.clear();
                    for b in bufs {
                        joined.extend_from_slice(b);
                    }
                    guard.try_io(|io| io.get_ref().write(joined))
                }),
                _ => guard.try_io(|io| io.get_ref().write_vectored(bufs)),
            };
            match written {
                Ok(result) => {
                    this.clock.mark_written();
                    return Poll::Ready(result);
                }
                Err(_would_block) => continue,
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.io.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A stamped client stream and the server end of a loopback connection.
    async fn pair() -> (Stamped, IoClock, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (stamped, clock) = Stamped::new(client).unwrap();
        (stamped, clock, server)
    }

    #[tokio::test]
    async fn reads_are_dated_by_the_kernel_and_never_after_now() {
        let (mut stamped, clock, mut server) = pair().await;
        let before = Instant::now();
        assert!(clock.arrival() >= before, "no read yet: arrival is now");
        // Stamping is switched on host-wide after a short delay: wait for a stamped read.
        let mut one = [0u8; 1];
        for _ in 0..200 {
            server.write_all(b"w").await.unwrap();
            stamped.read_exact(&mut one).await.unwrap();
            if stamped.last_stamped {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(stamped.last_stamped, "no kernel stamp within 2 s");
        let before = Instant::now();
        server.write_all(b"hello").await.unwrap();
        let sent = Instant::now();
        // Read well after the bytes arrived: the stamp is still their arrival.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut buf = [0u8; 5];
        stamped.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        let t = clock.arrival();
        // The realtime-to-monotonic conversion has microseconds of slack.
        let slack = Duration::from_millis(2);
        assert!(t + slack >= before && t <= sent + slack, "dated at arrival, {:?} after the send", t - before);
        assert!(t <= Instant::now());
    }

    /// Vectored writes reach the peer whole and in order, joined (small) or not (large),
    /// and are stamped like plain writes.
    #[tokio::test]
    async fn vectored_writes_arrive_in_order_joined_or_not() {
        let (mut stamped, clock, mut server) = pair().await;
        let big: Vec<u8> = (0..JOIN_MAX + 100).map(|i| (i % 251) as u8).collect();
        let cases: [&[&[u8]]; 4] = [&[b"POST / HTTP/1.1\r\n\r\n", b"body"], &[b"one"], &[b"head:", &big], &[]];
        for pieces in cases {
            clock.arm_write();
            let want: Vec<u8> = pieces.concat();
            let mut sent = 0;
            while sent < want.len() {
                // The pieces not yet written, as a caller would pass them again.
                let mut skip = sent;
                let rest: Vec<std::io::IoSlice<'_>> = pieces
                    .iter()
                    .filter_map(|p| {
                        let from = skip.min(p.len());
                        skip -= from;
                        (from < p.len()).then(|| std::io::IoSlice::new(&p[from..]))
                    })
                    .collect();
                sent += stamped.write_vectored(&rest).await.unwrap();
            }
            let mut got = vec![0u8; want.len()];
            server.read_exact(&mut got).await.unwrap();
            assert_eq!(got, want, "{} piece(s)", pieces.len());
            assert_eq!(clock.take_write().is_some(), !want.is_empty(), "stamped when bytes were written");
        }
    }

    #[tokio::test]
    async fn only_the_first_write_after_arming_is_stamped() {
        let (mut stamped, clock, mut server) = pair().await;
        stamped.write_all(b"unarmed").await.unwrap();
        assert_eq!(clock.take_write(), None, "writes before arming are not stamped");
        clock.arm_write();
        assert_eq!(clock.take_write(), None, "armed without a write: nothing to report");
        clock.arm_write();
        let before = Instant::now();
        stamped.write_all(b"req").await.unwrap();
        let after_first = Instant::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before_last = Instant::now();
        stamped.write_all(b"more").await.unwrap();
        let (w, last) = clock.take_write().expect("stamped");
        assert!(w >= before && w <= after_first, "the first write counts, not the later one");
        assert!(last >= before_last && last <= Instant::now(), "the last write's end is kept too");
        assert_eq!(clock.take_write(), None, "taking disarms");
        let mut buf = [0u8; 14];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"unarmedreqmore");
    }
}
