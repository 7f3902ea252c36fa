//! When bytes really arrived: a connection's socket reads are timestamped as they happen,
//! so a token is dated by the read that brought it rather than by when its request task
//! got to run. With 2000 streams delivering at once, the task that parses a chunk can run
//! milliseconds after the connection task read it; the read time is the tighter bound.
//!
//! For any chunk, the latest read time seen when the chunk is handled is at or after the
//! read that brought it (reads only move forward) and at or before "now", so it is never
//! worse than `Instant::now()`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// The time of a connection's latest successful socket read.
#[derive(Debug, Clone, Default)]
pub struct ReadClock(Arc<AtomicU64>);

impl ReadClock {
    fn mark(&self) {
        let ns = base().elapsed().as_nanos() as u64;
        self.0.fetch_max(ns.max(1), Ordering::Relaxed);
    }

    /// When the data being handled now arrived, at the latest.
    pub fn arrival(&self) -> Instant {
        let now = Instant::now();
        match self.0.load(Ordering::Relaxed) {
            0 => now,
            ns => (base() + std::time::Duration::from_nanos(ns)).min(now),
        }
    }
}

/// An I/O object that stamps its [`ReadClock`] on every read that returned bytes.
#[derive(Debug)]
pub struct Stamped<I> {
    inner: I,
    clock: ReadClock,
}

impl<I> Stamped<I> {
    pub fn new(inner: I) -> (Self, ReadClock) {
        let clock = ReadClock::default();
        (Self { inner, clock: clock.clone() }, clock)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Stamped<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.mark();
        }
        res
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Stamped<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
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
}
