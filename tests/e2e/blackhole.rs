//! A TCP proxy on loopback that can go silent in both directions, as a network partition
//! does: bytes are held (not lost, not refused) while it is blocked, new connections wait
//! unanswered, and everything flows again when it is unblocked, or, released with
//! `drop_old`, the connections that were open are closed and the bytes held for them
//! discarded (a middlebox that lost its state): only a resume with a resend then keeps
//! every row. [`Blackhole::first_answer_held`] holds what the upstream says on the first
//! connection for good (a path that broke as that connection's session opened, where new
//! connections get through).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

pub struct Blackhole {
    pub addr: String,
    blocked: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
}

impl Blackhole {
    /// Forwards `127.0.0.1:PORT` to `upstream` (HOST:PORT).
    pub fn new(upstream: &str) -> Self {
        Self::start(upstream, false)
    }

    /// [`Blackhole::new`], where nothing the upstream sends on the first connection gets
    /// through, ever; the other direction and every later connection flow.
    pub fn first_answer_held(upstream: &str) -> Self {
        Self::start(upstream, true)
    }

    fn start(upstream: &str, hold_first: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr").to_string();
        let (blocked, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let generation = Arc::new(AtomicU64::new(0));
        let (b, d, g, up) = (Arc::clone(&blocked), Arc::clone(&done), Arc::clone(&generation), upstream.to_string());
        thread::spawn(move || {
            let mut first = hold_first;
            while !d.load(Ordering::Relaxed) {
                // A blocked proxy leaves new connections in the backlog, unanswered.
                if b.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                }
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect(&up) else { continue };
                        pipe(client, server, &b, &d, &g, std::mem::take(&mut first));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
                    Err(_) => return,
                }
            }
        });
        Self { addr, blocked, done, generation }
    }

    /// Holds every byte from now on.
    pub fn block(&self) {
        self.blocked.store(true, Ordering::SeqCst);
    }

    /// Lets bytes flow again; with `drop_old`, the connections open until now are closed
    /// and what was held for them is lost.
    pub fn release(&self, drop_old: bool) {
        if drop_old {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        self.blocked.store(false, Ordering::SeqCst);
    }
}

/// Copies `a` to `b` and back; with `mute`, nothing from `b` reaches `a`.
fn pipe(
    a: TcpStream,
    b: TcpStream,
    blocked: &Arc<AtomicBool>,
    done: &Arc<AtomicBool>,
    generation: &Arc<AtomicU64>,
    mute: bool,
) {
    let born = generation.load(Ordering::SeqCst);
    for (back, (from, to)) in [(false, (a.try_clone(), b.try_clone())), (true, (b.try_clone(), a.try_clone()))] {
        let (Ok(from), Ok(to)) = (from, to) else { return };
        let (blocked, done, generation) = (Arc::clone(blocked), Arc::clone(done), Arc::clone(generation));
        // Never read: held for good, as by a path that broke.
        let blocked = if back && mute { Arc::new(AtomicBool::new(true)) } else { blocked };
        thread::spawn(move || copy(from, to, &blocked, &done, || generation.load(Ordering::SeqCst) != born));
    }
}

/// Copies until either side ends; a chunk read while blocked waits until unblocked, and
/// is dropped with the connection if it went `stale` meanwhile.
fn copy(mut from: TcpStream, mut to: TcpStream, blocked: &AtomicBool, done: &AtomicBool, stale: impl Fn() -> bool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(10)));
    let _ = to.set_nodelay(true);
    let mut buf = vec![0u8; 64 << 10];
    while !done.load(Ordering::Relaxed) {
        if blocked.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        if stale() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        while blocked.load(Ordering::Relaxed) && !done.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(5));
        }
        if stale() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
