//! Where the engine's per-request rows go. The engine knows only this trait: the agent
//! service batches rows onto the gRPC stream, tests collect them in memory.

use std::sync::Mutex;
use surge_proto::Row;

/// Receives every finished request of a run, once, from any task.
pub trait Sink: Send + Sync {
    /// One finished request (success or failure). Must not block.
    fn record(&self, row: Row);
}

/// Keeps every row in memory (tests, embedded use).
#[derive(Debug, Default)]
pub struct VecSink(Mutex<Vec<Row>>);

impl VecSink {
    /// Takes the rows collected so far.
    pub fn take(&self) -> Vec<Row> {
        std::mem::take(&mut self.0.lock().expect("sink lock"))
    }
}

impl Sink for VecSink {
    fn record(&self, row: Row) {
        self.0.lock().expect("sink lock").push(row);
    }
}
