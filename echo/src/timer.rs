//! A precise timer for token deadlines.
//!
//! Tokio's timer has a 1 ms tick and fires 0..2 ms after a deadline, which
//! would bias every TTFT and ITL the mock serves. [`Timer`] instead runs one
//! dedicated std thread per server that sleeps on a [`Condvar`] until the
//! earliest registered deadline (a futex wait with the kernel's ~50 µs timer
//! slack) and then wakes the wakers of every due [`PreciseSleep`].
//!
//! # Design
//!
//! - A sleep owns a *slot* (`slots[idx]`, recycled through a free list) that
//!   holds its registered deadline, its waker and a generation number. The
//!   min-heap holds `(deadline, idx, generation)`; an entry whose generation
//!   no longer matches its slot (the sleep was reset or dropped) is stale and
//!   skipped when popped, so reset and drop never search the heap. Stale
//!   entries are purged when they outnumber the live ones.
//! - A sleep polled again before its deadline with the same deadline and an
//!   equivalent waker does not touch the lock at all.
//! - Critical sections are a few heap/slot operations; wakers are woken and
//!   dropped outside the lock. The timer thread is only notified when a new
//!   deadline is earlier than the one it is waiting for.
//! - The thread is started by [`Timer::new`] and stops when the last handle
//!   is dropped: the server's state holds one, and so does every live sleep,
//!   so no sleep can outlive its timer and the thread never outlives the
//!   server's last connection. While idle it is blocked in a futex wait and
//!   uses no CPU.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Instant;

/// Purge stale heap entries when there are more than this many beyond twice
/// the live ones.
const COMPACT_SLACK: usize = 1024;

/// Handle to a timer thread. Cloning is cheap; the thread stops when the
/// last clone (including those held by sleeps) is dropped.
#[derive(Clone)]
pub(crate) struct Timer {
    owner: Arc<Owner>,
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

/// Stops and joins the thread when dropped.
struct Owner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    thread_id: ThreadId,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

struct Slot {
    /// Bumped on every (re-)registration and on release: heap entries with
    /// another generation are stale.
    generation: u64,
    deadline: Instant,
    /// Registered and not yet fired.
    armed: bool,
    waker: Option<Waker>,
}

struct State {
    heap: BinaryHeap<Reverse<(Instant, u32, u64)>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots with `armed` set (live heap entries).
    armed: usize,
    /// The thread is blocked in the condvar.
    waiting: bool,
    /// When it will wake by itself (`None`: never, until notified).
    wait_until: Option<Instant>,
    shutdown: bool,
}

impl State {
    fn lock(shared: &Shared) -> MutexGuard<'_, State> {
        shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_live(&self, idx: u32, generation: u64) -> bool {
        let slot = &self.slots[idx as usize];
        slot.armed && slot.generation == generation
    }

    fn compact(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        let mut entries = heap.into_vec();
        entries.retain(|Reverse((_, idx, generation))| self.is_live(*idx, *generation));
        self.heap = BinaryHeap::from(entries);
    }
}

impl Timer {
    /// Start a timer thread.
    pub fn new() -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                slots: Vec::new(),
                free: Vec::new(),
                armed: 0,
                waiting: false,
                wait_until: None,
                shutdown: false,
            }),
            cond: Condvar::new(),
        });
        let thread = thread::Builder::new().name("surge-echo-timer".to_owned()).spawn({
            let shared = shared.clone();
            move || run(&shared)
        })?;
        Ok(Self { owner: Arc::new(Owner { shared, thread_id: thread.thread().id(), thread: Some(thread) }) })
    }

    fn shared(&self) -> &Shared {
        &self.owner.shared
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        {
            let mut state = State::lock(&self.shared);
            state.shutdown = true;
        }
        self.shared.cond.notify_one();
        if let Some(thread) = self.thread.take() {
            // Never join from the timer thread itself (a waker it drops
            // could in theory hold the last handle); it exits on its own.
            if thread::current().id() != self.thread_id {
                let _ = thread.join();
            }
        }
    }
}

/// The timer thread: wake due wakers, then wait for the earliest deadline.
fn run(shared: &Shared) {
    let mut due: Vec<Waker> = Vec::new();
    let mut state = State::lock(shared);
    loop {
        if state.shutdown {
            return;
        }
        let now = Instant::now();
        while let Some(&Reverse((deadline, idx, generation))) = state.heap.peek() {
            if deadline > now {
                break;
            }
            state.heap.pop();
            if state.is_live(idx, generation) {
                state.armed -= 1;
                let slot = &mut state.slots[idx as usize];
                slot.armed = false;
                if let Some(waker) = slot.waker.take() {
                    due.push(waker);
                }
            }
        }
        if !due.is_empty() {
            drop(state);
            for waker in due.drain(..) {
                waker.wake();
            }
            state = State::lock(shared);
            continue;
        }
        let next = state.heap.peek().map(|Reverse((deadline, _, _))| *deadline);
        state.waiting = true;
        state.wait_until = next;
        state = match next {
            None => shared.cond.wait(state).unwrap_or_else(PoisonError::into_inner),
            Some(deadline) => {
                shared
                    .cond
                    .wait_timeout(state, deadline.saturating_duration_since(now))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
        state.waiting = false;
    }
}

/// A future that resolves once `Instant::now() >= deadline`.
///
/// It is `Unpin` and can be re-armed with [`PreciseSleep::reset`].
pub(crate) struct PreciseSleep {
    timer: Timer,
    deadline: Instant,
    /// The slot, allocated at the first registration.
    slot: Option<u32>,
    /// The deadline and waker last registered (lets re-polls skip the lock).
    registered: Option<(Instant, Waker)>,
}

impl fmt::Debug for PreciseSleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreciseSleep").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl PreciseSleep {
    pub fn new(timer: Timer, deadline: Instant) -> Self {
        Self { timer, deadline, slot: None, registered: None }
    }

    /// Wait for `deadline` instead (earlier or later); takes effect at the
    /// next poll.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// Register `waker` for `self.deadline`. Returns the waker it replaced,
    /// to be dropped by the caller outside the lock.
    fn register(&mut self, waker: &Waker) -> Option<Waker> {
        let deadline = self.deadline;
        let shared = self.timer.shared();
        let mut state = State::lock(shared);
        let idx = match self.slot {
            Some(idx) => idx,
            None => {
                let idx = match state.free.pop() {
                    Some(idx) => idx,
                    None => {
                        let idx = u32::try_from(state.slots.len()).expect("too many sleeps");
                        state.slots.push(Slot { generation: 0, deadline, armed: false, waker: None });
                        idx
                    }
                };
                self.slot = Some(idx);
                idx
            }
        };
        let slot = &mut state.slots[idx as usize];
        let old = match &slot.waker {
            Some(w) if w.will_wake(waker) => None,
            _ => slot.waker.replace(waker.clone()),
        };
        let mut notify = false;
        if !slot.armed || slot.deadline != deadline {
            let was_armed = slot.armed;
            slot.generation += 1;
            slot.deadline = deadline;
            slot.armed = true;
            let generation = slot.generation;
            if !was_armed {
                state.armed += 1;
            }
            state.heap.push(Reverse((deadline, idx, generation)));
            if state.waiting && state.wait_until.is_none_or(|at| deadline < at) {
                // Notify once; later inserts compare with this deadline.
                state.wait_until = Some(deadline);
                notify = true;
            }
            if state.heap.len() > 2 * state.armed + COMPACT_SLACK {
                state.compact();
            }
        }
        drop(state);
        if notify {
            shared.cond.notify_one();
        }
        old
    }
}

impl Future for PreciseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            return Poll::Ready(());
        }
        // Not due yet, so a registration of this deadline has not fired.
        if let Some((at, waker)) = &this.registered
            && *at == this.deadline
            && waker.will_wake(cx.waker())
        {
            return Poll::Pending;
        }
        let old = this.register(cx.waker());
        let prev = this.registered.replace((this.deadline, cx.waker().clone()));
        drop((old, prev));
        Poll::Pending
    }
}

impl Drop for PreciseSleep {
    fn drop(&mut self) {
        let Some(idx) = self.slot else { return };
        let waker = {
            let mut state = State::lock(self.timer.shared());
            let slot = &mut state.slots[idx as usize];
            let was_armed = slot.armed;
            slot.generation += 1;
            slot.armed = false;
            let waker = slot.waker.take();
            if was_armed {
                state.armed -= 1;
            }
            state.free.push(idx);
            waker
        };
        drop(waker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::task::JoinSet;
    use tokio::time::timeout;

    const LIMIT: Duration = Duration::from_secs(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test]
    async fn sleep_resolves_not_before_its_deadline() {
        let timer = Timer::new().unwrap();
        for delay in [0, 1, 5, 20] {
            let deadline = Instant::now() + ms(delay);
            timeout(LIMIT, PreciseSleep::new(timer.clone(), deadline)).await.unwrap();
            assert!(Instant::now() >= deadline);
        }
        // A deadline in the past is ready at once.
        let past = Instant::now();
        timeout(ms(1), PreciseSleep::new(timer.clone(), past)).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thousand_concurrent_sleeps_all_resolve() {
        let timer = Timer::new().unwrap();
        let start = Instant::now();
        let mut set = JoinSet::new();
        for i in 0..1000u64 {
            let deadline = start + ms(10) + Duration::from_micros(i * 37 % 20_000);
            let sleep = PreciseSleep::new(timer.clone(), deadline);
            set.spawn(async move {
                sleep.await;
                let now = Instant::now();
                assert!(now >= deadline);
                now - deadline
            });
        }
        let mut done = 0;
        while let Some(r) = timeout(LIMIT, set.join_next()).await.unwrap() {
            r.unwrap();
            done += 1;
        }
        assert_eq!(done, 1000);
        // Every slot was released and none is armed.
        let state = State::lock(timer.shared());
        assert_eq!(state.armed, 0);
        assert_eq!(state.free.len(), state.slots.len());
    }

    #[tokio::test]
    async fn reset_to_earlier_and_later_deadlines() {
        let timer = Timer::new().unwrap();
        let mut sleep = PreciseSleep::new(timer.clone(), Instant::now() + Duration::from_secs(3600));
        // Register the far deadline.
        assert!(timeout(ms(5), &mut sleep).await.is_err());
        let t0 = Instant::now();
        let earlier = t0 + ms(20);
        sleep.reset(earlier);
        timeout(LIMIT, &mut sleep).await.unwrap();
        let now = Instant::now();
        assert!(now >= earlier);
        assert!(now - t0 < Duration::from_secs(2), "{:?}", now - t0);
        // Reset to a later deadline while an earlier one is registered: the
        // stale entry must not wake it early.
        // (The first deadline is far enough that a host stalling for milliseconds does not
        // let it pass before the 1 ms timeout's poll.)
        let mut sleep = PreciseSleep::new(timer.clone(), Instant::now() + ms(100));
        assert!(timeout(ms(1), &mut sleep).await.is_err());
        let later = Instant::now() + ms(130);
        sleep.reset(later);
        timeout(LIMIT, &mut sleep).await.unwrap();
        assert!(Instant::now() >= later);
        // Re-arming after it fired works too (the SSE body does this).
        let again = Instant::now() + ms(5);
        sleep.reset(again);
        timeout(LIMIT, &mut sleep).await.unwrap();
        assert!(Instant::now() >= again);
    }

    #[tokio::test]
    async fn dropped_sleeps_free_their_slots() {
        let timer = Timer::new().unwrap();
        for _ in 0..3 {
            let mut sleeps: Vec<PreciseSleep> =
                (0..100).map(|_| PreciseSleep::new(timer.clone(), Instant::now() + Duration::from_secs(60))).collect();
            for s in &mut sleeps {
                assert!(timeout(Duration::ZERO, s).await.is_err());
            }
            drop(sleeps);
        }
        {
            let state = State::lock(timer.shared());
            assert_eq!(state.armed, 0);
            assert_eq!(state.slots.len(), 100);
            assert_eq!(state.free.len(), 100);
        }
        // A sleep registered after all that still fires.
        let deadline = Instant::now() + ms(5);
        timeout(LIMIT, PreciseSleep::new(timer.clone(), deadline)).await.unwrap();
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn dropping_the_last_handle_stops_the_thread() {
        let timer = Timer::new().unwrap();
        let shared = Arc::downgrade(&timer.owner.shared);
        drop(timer);
        // `Owner::drop` joined the thread, which held the other reference.
        assert!(shared.upgrade().is_none());
    }

    /// Lateness (resolution time minus deadline) of many 20 ms sleeps,
    /// staggered, on a two-worker runtime: the median must be well under the
    /// 1 ms tick of tokio's timer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lateness_is_sub_millisecond() {
        let timer = Timer::new().unwrap();
        let mut set = JoinSet::new();
        for i in 0..400u64 {
            let timer = timer.clone();
            set.spawn(async move {
                // Stagger the starts so the deadlines are spread over 400 ms: one stall of
                // the host then makes a few of them late, not the median.
                tokio::time::sleep(Duration::from_micros(i * 997 % 400_000)).await;
                let deadline = Instant::now() + ms(20);
                PreciseSleep::new(timer, deadline).await;
                Instant::now() - deadline
            });
        }
        let mut late = Vec::new();
        while let Some(r) = timeout(LIMIT, set.join_next()).await.unwrap() {
            late.push(r.unwrap());
        }
        late.sort();
        let median = late[late.len() / 2];
        let p99 = late[late.len() * 99 / 100];
        eprintln!(
            "precise timer lateness over {} sleeps of 20 ms: median {median:?}, p99 {p99:?}, max {:?}",
            late.len(),
            late[late.len() - 1]
        );
        assert!(median < ms(1), "median lateness {median:?}");
    }
}
