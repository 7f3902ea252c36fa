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

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;
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

/// A TCP stream whose reads stamp an [`ArrivalClock`] with the kernel's receive time.
#[derive(Debug)]
pub(crate) struct Arrival {
    inner: TcpStream,
    clock: ArrivalClock,
    /// Control-message space for one timestamp, reused.
    cmsg: Vec<u8>,
    kernel_stamps: bool,
    /// The latest read carried a kernel stamp.
    last_stamped: bool,
}

impl Arrival {
    pub fn new(inner: TcpStream) -> (Self, ArrivalClock) {
        // Without kernel stamps every read is dated when it returns (still correct,
        // only later under load).
        let kernel_stamps = setsockopt(&inner, sockopt::ReceiveTimestampns, &true).is_ok();
        let clock = ArrivalClock::default();
        let cmsg = nix::cmsg_space!(TimeSpec);
        (Self { inner, clock: clock.clone(), cmsg, kernel_stamps, last_stamped: false }, clock)
    }

    /// One `recvmsg`: bytes read and the kernel's stamp of them.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<Instant>)> {
        let fd = self.inner.as_raw_fd();
        let cmsg = &mut self.cmsg;
        self.inner.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(buf)];
            let msg = recvmsg::<()>(fd, &mut iov, Some(&mut *cmsg), MsgFlags::MSG_DONTWAIT)?;
            let mut at = None;

            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmTimestampns(ts) = c {
                        at = Some(age_to_instant(ts));
                    }
                }
            }
            Ok((msg.bytes, at))
        })
    }
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
        if !this.kernel_stamps {
            let before = buf.filled().len();
            let res = Pin::new(&mut this.inner).poll_read(cx, buf);
            if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
                this.clock.mark(Instant::now());
            }
            return res;
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            match this.recv(buf.initialize_unfilled()) {
                Ok((n, at)) => {
                    buf.advance(n);
                    if n > 0 {
                        this.last_stamped = at.is_some();
                        this.clock.mark(at.unwrap_or_else(Instant::now));
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Arrival {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
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
        let (mut server, clock) = Arrival::new(server);
        assert!(server.kernel_stamps, "SO_TIMESTAMPNS is available on Linux TCP sockets");
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
