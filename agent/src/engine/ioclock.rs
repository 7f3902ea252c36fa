//! When bytes really moved: a connection's socket reads and writes are timestamped as
//! they happen, so a request is dated by the write that sent it and a token by the read
//! that brought it, rather than by when the request task got to run. With 2000 requests
//! starting or streaming at once, the connection task that writes or reads can run
//! milliseconds apart from the request task; the socket times are the tighter bounds.
//!
//! Reads: for any chunk, the latest read time seen when the chunk is handled is at or
//! after the read that brought it (reads only move forward) and at or before "now", so
//! it is never worse than `Instant::now()`.
//!
//! Writes: the request task arms the clock just before handing a request to an HTTP/1.1
//! connection (one request at a time); the first write after that is the request's, and
//! is stamped just before the bytes go to the socket (DESIGN.md: st is "just before the
//! request is written"). HTTP/2 streams share a connection, so they are not armed.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Write stamp: not armed.
const IDLE: u64 = u64::MAX;
/// Write stamp: armed, no write since.
const ARMED: u64 = 0;

fn now_ns() -> u64 {
    (base().elapsed().as_nanos() as u64).clamp(1, IDLE - 1)
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
}

/// The socket times of one connection: its latest read and the first write of the
/// request in flight.
#[derive(Debug, Clone)]
pub struct IoClock(Arc<Stamps>);

impl Default for IoClock {
    fn default() -> Self {
        Self(Arc::new(Stamps { read: AtomicU64::new(0), write: AtomicU64::new(IDLE) }))
    }
}

impl IoClock {
    fn mark_read(&self) {
        self.0.read.fetch_max(now_ns(), Ordering::Relaxed);
    }

    fn mark_write(&self) {
        if self.0.write.load(Ordering::Relaxed) == ARMED {
            let _ = self.0.write.compare_exchange(ARMED, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
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

    /// When the first write since [`arm_write`](Self::arm_write) began, if there was one;
    /// disarms the clock.
    pub fn take_write(&self) -> Option<Instant> {
        match self.0.write.swap(IDLE, Ordering::Relaxed) {
            IDLE | ARMED => None,
            ns => Some(instant(ns)),
        }
    }
}

/// An I/O object that stamps its [`IoClock`] on every read that returned bytes and on
/// the first write after the clock was armed.
#[derive(Debug)]
pub struct Stamped<I> {
    inner: I,
    clock: IoClock,
}

impl<I> Stamped<I> {
    pub fn new(inner: I) -> (Self, IoClock) {
        let clock = IoClock::default();
        (Self { inner, clock: clock.clone() }, clock)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Stamped<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.mark_read();
        }
        res
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Stamped<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        self.clock.mark_write();
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.clock.mark_write();
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_are_stamped_and_arrival_never_exceeds_now() {
        let (a, b) = tokio::io::duplex(64);
        let (mut stamped, clock) = Stamped::new(a);
        let before = Instant::now();
        assert!(clock.arrival() >= before, "no read yet: arrival is now");
        let mut b = b;
        b.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        stamped.read_exact(&mut buf).await.unwrap();
        let after_read = Instant::now();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let t = clock.arrival();
        assert!(t >= before && t <= after_read, "arrival is the read, not the later handling");
    }

    #[tokio::test]
    async fn only_the_first_write_after_arming_is_stamped() {
        let (a, mut b) = tokio::io::duplex(64);
        let (mut stamped, clock) = Stamped::new(a);
        stamped.write_all(b"unarmed").await.unwrap();
        assert_eq!(clock.take_write(), None, "writes before arming are not stamped");
        clock.arm_write();
        assert_eq!(clock.take_write(), None, "armed without a write: nothing to report");
        clock.arm_write();
        let before = Instant::now();
        stamped.write_all(b"req").await.unwrap();
        let after_first = Instant::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        stamped.write_all(b"more").await.unwrap();
        let w = clock.take_write().expect("stamped");
        assert!(w >= before && w <= after_first, "the first write counts, not the later one");
        assert_eq!(clock.take_write(), None, "taking disarms");
        let mut buf = [0u8; 14];
        b.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"unarmedreqmore");
    }
}
