//! Allocations on the coordinator's ingest path, counted (a regression guard for the
//! per-row cost): a counting allocator around the system's, and a run's rows folded one by
//! one into the aggregator as they arrive. The count per row, once the run's buffers have
//! grown, must stay at or under the stated constant; an allocation added to the path fails
//! it. This binary holds this one test, so nothing else allocates while it counts.

// The counting allocator: the only unsafe code of the test, each call handed to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use surge_coordinator::analysis::aggregate::{Aggregator, GlobalRow};
use surge_coordinator::analysis::folds::Wanted;
use surge_proto::Row;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations per folded row, at most: none per row; what the count finds (0.0092 here)
/// is per time-series slice (its histograms, one a second) and per chunk of kept values
/// written to disk (one per 16 K values).
const PER_ROW: f64 = 0.01;

/// Row `k` of a closed-loop run: 1,000 rows a second, 8 tokens each.
fn row(k: u64) -> GlobalRow {
    let ms = 1_000 + k % 50;
    GlobalRow {
        agent: (k % 3) as usize,
        start_s: k as f64 / 1_000.0,
        intended_s: None,
        row: Row {
            index: k,
            ttft_us: ms * 100,
            latency_us: ms * 100 + 7 * 2_000,
            output_tokens: 8,
            input_tokens: 64,
            itl_us: vec![2_000; 7],
            ..Default::default()
        },
    }
}

#[test]
fn a_folded_row_allocates_no_more_than_stated() {
    const WARM: u64 = 20_000;
    const COUNTED: u64 = 20_000;
    let rows: Vec<GlobalRow> = (0..WARM + COUNTED).map(row).collect();
    let mut agg = Aggregator::new(Default::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
    for r in &rows[..WARM as usize] {
        agg.add(r);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for r in &rows[WARM as usize..] {
        agg.add(r);
    }
    let n = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let per_row = n as f64 / COUNTED as f64;
    assert!(
        per_row <= PER_ROW,
        "{per_row:.4} allocations per row ({n} over {COUNTED} rows), more than the stated {PER_ROW}"
    );
    eprintln!("allocations per folded row: {per_row:.4} ({n} over {COUNTED})");
}
