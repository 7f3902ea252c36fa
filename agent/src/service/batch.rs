//! Rows on their way to the coordinator: the engine records them into a [`BatchSink`];
//! the session cuts them into [`SampleBatch`]es of at most [`BATCH_ROWS`] rows with
//! consecutive sequence numbers ([`Outbox`]) and keeps each batch until the coordinator
//! acknowledges it; a session resumed on a fresh stream resends them all (D2).

use crate::engine::Sink;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use surge_proto::{Row, SampleBatch};
use tokio::sync::Notify;

/// Rows per batch at most, and the longest a row waits before its batch leaves.
pub(crate) const BATCH_ROWS: usize = 1024;
/// Encoded bytes per batch at most (rows carrying generated text can be large; gRPC
/// refuses messages over 64 MiB): a batch is cut early when its rows reach this. A single
/// row larger than this still goes, alone.
pub(crate) const BATCH_BYTES: usize = 8 << 20;
pub(crate) const BATCH_INTERVAL: Duration = Duration::from_millis(100);

/// Collects a run's rows between flushes; says when a full batch is waiting.
#[derive(Debug, Default)]
pub(crate) struct BatchSink {
    rows: Mutex<Vec<Row>>,
    full: Notify,
}

impl Sink for BatchSink {
    fn record(&self, row: Row) {
        let mut rows = self.rows.lock().expect("sink lock");
        rows.push(row);
        if rows.len() >= BATCH_ROWS {
            self.full.notify_one();
        }
    }
}

impl BatchSink {
    /// Takes the rows recorded so far.
    pub(crate) fn drain(&self) -> Vec<Row> {
        let mut rows = self.rows.lock().expect("sink lock");
        // Room for as many rows as the last flush took: a steady run fills its batches
        // without growing (and copying) them row by row.
        let room = Vec::with_capacity(rows.len().min(BATCH_ROWS));
        std::mem::replace(&mut *rows, room)
    }

    /// Completes once a full batch of rows is waiting.
    pub(crate) async fn full(&self) {
        self.full.notified().await;
    }
}

/// Sequence numbers of a session's batches, and the batches not yet acknowledged.
#[derive(Debug)]
pub(crate) struct Outbox {
    /// Sequence number of the next batch; numbers run on across the runs of a session.
    next_seq: u64,
    /// Sent and not acknowledged, by sequence number.
    unacked: BTreeMap<u64, SampleBatch>,
    /// Whether to keep a copy of each batch for a resumed stream: not on a session that
    /// cannot be resumed (in-process), where the copy of every row would be wasted.
    keep: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Self { next_seq: 0, unacked: BTreeMap::new(), keep: true }
    }
}

impl Outbox {
    /// An outbox that numbers batches and keeps no copies (nothing is ever resent).
    pub(crate) fn without_copies() -> Self {
        Self { keep: false, ..Self::default() }
    }

    /// Cuts `rows` into batches of at most [`BATCH_ROWS`] rows and [`BATCH_BYTES`] bytes
    /// (in order), numbers them and keeps a copy of each until it is acknowledged.
    pub(crate) fn seal(&mut self, run_id: u64, started_unix_ns: i64, mut rows: Vec<Row>) -> Vec<SampleBatch> {
        let mut out = Vec::with_capacity(rows.len().div_ceil(BATCH_ROWS));
        while !rows.is_empty() {
            let cut = cut_at(&rows);
            let rest = if rows.len() > cut { rows.split_off(cut) } else { Vec::new() };
            let batch = SampleBatch { run_id, seq: self.next_seq, rows, started_unix_ns };
            self.next_seq += 1;
            if self.keep {
                self.unacked.insert(batch.seq, batch.clone());
            }
            out.push(batch);
            rows = rest;
        }
        out
    }

    /// The coordinator has batch `seq`; false if it was not waiting for an ack.
    pub(crate) fn ack(&mut self, seq: u64) -> bool {
        self.unacked.remove(&seq).is_some()
    }

    /// Batches numbered so far in this session.
    pub(crate) fn sealed(&self) -> u64 {
        self.next_seq
    }

    /// The batches sent and not yet acknowledged, in order (resent on resume).
    pub(crate) fn pending(&self) -> impl Iterator<Item = &SampleBatch> + '_ {
        self.unacked.values()
    }

    /// Sequence numbers sent and not yet acknowledged, in order.
    #[cfg(test)]
    pub(crate) fn unacked(&self) -> impl Iterator<Item = u64> + '_ {
        self.unacked.keys().copied()
    }
}

/// How many of `rows` go in the next batch: at most [`BATCH_ROWS`], and fewer when their
/// encoded size reaches [`BATCH_BYTES`] (at least one).
fn cut_at(rows: &[Row]) -> usize {
    let mut bytes = 0;
    for (i, r) in rows.iter().take(BATCH_ROWS).enumerate() {
        bytes += prost::Message::encoded_len(r);
        if bytes > BATCH_BYTES {
            return i.max(1);
        }
    }
    rows.len().min(BATCH_ROWS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_long_texts_are_cut_by_size() {
        let text = "x".repeat(3 << 20);
        let rows: Vec<Row> =
            (0..5).map(|index| Row { index, generated_text: text.clone(), ..Default::default() }).collect();
        let b = Outbox::default().seal(1, 5, rows);
        // 3 MiB each, 8 MiB per batch: 2 + 2 + 1, in order.
        assert_eq!(b.iter().map(|b| b.rows.len()).collect::<Vec<_>>(), [2, 2, 1]);
        let big = vec![Row { index: 0, generated_text: "y".repeat(9 << 20), ..Default::default() }];
        assert_eq!(Outbox::default().seal(1, 5, big)[0].rows.len(), 1);
    }

    fn rows(n: usize) -> Vec<Row> {
        (0..n as u64).map(|index| Row { index, ..Default::default() }).collect()
    }

    #[test]
    fn rows_are_cut_in_order_into_numbered_batches() {
        let mut o = Outbox::default();
        let b = o.seal(1, 5, rows(2 * BATCH_ROWS + 3));
        assert_eq!(
            b.iter().map(|b| (b.seq, b.rows.len())).collect::<Vec<_>>(),
            [(0, BATCH_ROWS), (1, BATCH_ROWS), (2, 3)]
        );
        let indexes: Vec<u64> = b.iter().flat_map(|b| b.rows.iter().map(|r| r.index)).collect();
        assert_eq!(indexes, (0..(2 * BATCH_ROWS + 3) as u64).collect::<Vec<_>>());
        assert!(b.iter().all(|b| b.run_id == 1 && b.started_unix_ns == 5));
        assert!(o.seal(1, 5, Vec::new()).is_empty(), "no empty batch");
        assert_eq!(o.seal(2, 6, rows(1))[0].seq, 3, "numbers run on across runs");
        assert_eq!(o.sealed(), 4);
    }

    #[test]
    fn an_outbox_without_copies_numbers_batches_and_keeps_none() {
        let mut o = Outbox::without_copies();
        let b = o.seal(1, 5, rows(BATCH_ROWS + 1));
        assert_eq!(b.iter().map(|b| (b.seq, b.rows.len())).collect::<Vec<_>>(), [(0, BATCH_ROWS), (1, 1)]);
        assert_eq!(o.pending().count(), 0, "nothing kept to resend");
        assert!(!o.ack(0), "nothing waits for an ack");
        assert_eq!(o.seal(2, 6, rows(1))[0].seq, 2);
        let mut kept = Outbox::default();
        kept.seal(1, 5, rows(1));
        assert_eq!(kept.pending().count(), 1);
    }

    #[test]
    fn sink_signals_a_full_batch() {
        let s = BatchSink::default();
        for r in rows(BATCH_ROWS) {
            s.record(r);
        }
        // notify_one stored a permit: the next wait completes at once.
        let waited = futures_now(s.full());
        assert!(waited);
        assert_eq!(s.drain().len(), BATCH_ROWS);
        assert!(s.drain().is_empty());
    }

    /// Whether `f` completes on its first poll.
    fn futures_now(f: impl std::future::Future<Output = ()>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        f.as_mut().poll(&mut cx).is_ready()
    }
}
