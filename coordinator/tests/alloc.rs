//! Allocations on the coordinator's ingest path, counted (a regression guard for the
//! per-row cost): a counting allocator around the system's, and a run's rows folded one by
//! one into the aggregator as they arrive. The count per row, once the run's buffers have
//! grown, must stay at or under the stated constant; an allocation added to the path fails
//! it. This binary holds this one test, so nothing else allocates while it counts.

use surge_coordinator::analysis::aggregate::{Aggregator, GlobalRow};
use surge_coordinator::analysis::folds::Wanted;
use surge_core::alloc_count::Counting;
use surge_proto::Row;

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
    assert!(Counting::count() >= rows.len() as u64, "the counting allocator counts");
    let mut agg = Aggregator::new(Default::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
    for r in &rows[..WARM as usize] {
        agg.add(r);
    }
    let before = Counting::count();
    for r in &rows[WARM as usize..] {
        agg.add(r);
    }
    let n = Counting::count() - before;
    let per_row = n as f64 / COUNTED as f64;
    assert!(
        per_row <= PER_ROW,
        "{per_row:.4} allocations per row ({n} over {COUNTED} rows), more than the stated {PER_ROW}"
    );
    eprintln!("allocations per folded row: {per_row:.4} ({n} over {COUNTED})");
}
