//! When a request really arrived: the kernel's receive timestamp of the bytes.
//!
//! A token schedule starts when the request arrived. With 2000 requests landing at
//! once, the connection task that parses a request can run many milliseconds after
//! its bytes reached the socket; anchoring the schedule there would add the server's
//! own queueing to every TTFT it serves. [`Arrival`] reads the socket with `recvmsg`
//! and `SO_TIMESTAMPNS`, so each read carries the time the kernel queued its bytes,
//! and keeps the latest one in an [`ArrivalClock`] the request handler reads.
//!
//! The kernel stamp is on the realtime clock; it is turned into an [`Instant`] by
//! its age (realtime now minus stamp), so a clock step cannot move it into the
//! future. Where the socket gives no stamp, the read is dated by `Instant::now()`:
//! the kernel turns receive stamping on for the whole host lazily, so the first
//! packets after the first socket asks for it can come without one.

use std::cell::RefCell;
use std::io::{self, IoSlice, IoSliceMut, Write as _};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The origin of stored stamps: a minute before the first use, so that bytes which
/// arrived before the first connection was set up are still representable.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(60)).unwrap_or(now)
    })
}

/// The arrival time of a connection's latest bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct ArrivalClock(Arc<AtomicU64>);

impl ArrivalClock {
    /// A clock that says `at` (bytes read in user space, e.g. from a QUIC stream).
    pub fn at(at: Instant) -> Self {
        let clock = Self::default();
        clock.mark(at);
        clock
    }

    fn mark(&self, at: Instant) {
        let ns = at.saturating_duration_since(base()).as_nanos() as u64;
        self.0.fetch_max(ns.max(1), Ordering::Relaxed);
    }

    /// When the bytes being handled now arrived, at the latest: never after now.
    pub fn latest(&self) -> Instant {
        let now = Instant::now();
        match self.0.load(Ordering::Relaxed) {
            0 => now,
            ns => (base() + Duration::from_nanos(ns)).min(now),
        }
    }
}

thread_local! {
    /// Where reads land before they are copied to the caller (64 KiB per thread).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; 64 * 1024].into_boxed_slice());
}

/// A TCP stream whose reads stamp an [`ArrivalClock`] with the kernel's receive time.
///
/// The socket is driven through [`AsyncFd`] rather than tokio's `TcpStream` so that it
/// can be read with `recvmsg` and still forget its readiness after a short read, as
/// tokio does, instead of paying a syscall that would only return `EAGAIN`.
#[derive(Debug)]
pub(crate) struct Arrival {
    io: AsyncFd<std::net::TcpStream>,
    clock: ArrivalClock,
    /// Control-message space for one timestamp, reused.
    cmsg: Vec<u8>,
    /// The latest read carried a kernel stamp.
    last_stamped: bool,
}

impl Arrival {
    #[allow(unsafe_code, reason = "AsyncFd registration; the stream owns its descriptor")]
    pub fn new(tcp: TcpStream) -> io::Result<(Self, ArrivalClock)> {
        // Without the option every read is dated when it returns (still correct, only
        // later under load).
        let _ = setsockopt(&tcp, sockopt::ReceiveTimestampns, &true);
        // Still non-blocking; from now on registered with the reactor by the AsyncFd.
        let std = tcp.into_std()?;
        // SAFETY: a std::net::TcpStream owns its descriptor: it is open and the same
        // for as long as the stream lives, and the AsyncFd owns the stream.
        let io = unsafe { AsyncFd::register_with_interest(std, Interest::READABLE | Interest::WRITABLE) }?;
        let clock = ArrivalClock::default();
        let cmsg = nix::cmsg_space!(TimeSpec);
        Ok((Self { io, clock: clock.clone(), cmsg, last_stamped: false }, clock))
    }
}

/// One `recvmsg` into `buf`: bytes read and the kernel's stamp of them.
#[expect(clippy::ptr_arg, reason = "nix's recvmsg takes the control buffer as a Vec")]
fn recv(fd: RawFd, buf: &mut [u8], cmsg: &mut Vec<u8>) -> io::Result<(usize, Option<Instant>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(fd, &mut iov, Some(cmsg), MsgFlags::MSG_DONTWAIT)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                at = Some(age_to_instant(ts));
            }
        }
    }
    Ok((msg.bytes, at))
}

/// The instant of a realtime kernel stamp, by its age; never after now.
fn age_to_instant(ts: TimeSpec) -> Instant {
    let now = Instant::now();
    let stamp = UNIX_EPOCH + Duration::new(ts.tv_sec().max(0) as u64, ts.tv_nsec().clamp(0, 999_999_999) as u32);
    let age = SystemTime::now().duration_since(stamp).unwrap_or_default();
    now.checked_sub(age).unwrap_or(now)
}

impl AsyncRead for Arrival {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
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
                        this.clock.mark(at.unwrap_or_else(Instant::now));
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Arrival {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.io.poll_write_ready(cx))?;
            match guard.try_io(|io| io.get_ref().write(data)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.io.poll_write_ready(cx))?;
            match guard.try_io(|io| io.get_ref().write_vectored(bufs)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.io.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn reads_are_dated_by_the_kernel_not_by_the_reader() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (mut server, clock) = Arrival::new(server).unwrap();
        // Stamping is switched on host-wide after a short delay: wait for a stamped read.
        let mut one = [0u8; 1];
        for _ in 0..200 {
            client.write_all(b"w").await.unwrap();
            server.read_exact(&mut one).await.unwrap();
            if server.last_stamped {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(server.last_stamped, "no kernel stamp within 2 s");
        let before = Instant::now();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let sent = Instant::now();
        // Read well after the bytes arrived: the stamp is still their arrival.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut buf = [0u8; 18];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"GET / HTTP/1.1\r\n\r\n");
        let at = clock.latest();
        // The realtime-to-monotonic conversion has microseconds of slack.
        let slack = Duration::from_millis(2);
        assert!(at + slack >= before && at <= sent + slack, "stamped at arrival: {:?} after send", at - before);
        // Writes pass through.
        server.write_all(b"ok").await.unwrap();
        let mut two = [0u8; 2];
        client.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"ok");
    }

    #[test]
    fn no_read_yet_means_now() {
        let clock = ArrivalClock::default();
        let before = Instant::now();
        assert!(clock.latest() >= before);
    }
}
