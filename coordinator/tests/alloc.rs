//! Allocations on the coordinator's ingest path, counted (a regression guard for the
//! per-row cost): a counting allocator around the system's; batches of rows decoded from
//! the wire and placed on the run's timeline; a run's rows folded one by one into the
//! aggregator as they arrive. The count per row, once the run's buffers have grown, must
//! stay at or under the stated constant; an allocation added to the path fails it. The
//! tests take turns (`ONE_AT_A_TIME`), so nothing else allocates while one counts.

use prost::Message;
use prost::bytes::BytesMut;
use std::sync::Mutex;
use surge_coordinator::analysis::aggregate::{Aggregator, GlobalRow};
use surge_coordinator::analysis::folds::Wanted;
use surge_coordinator::fleet::incoming::{Incoming, Said};
use surge_coordinator::fleet::outcome::AgentReport;
use surge_core::alloc_count::Counting;
use surge_proto::{AgentMsg, Row, SampleBatch, agent_msg};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations per folded row, at most: none per row; what the count finds (0.0053 here)
/// is per time-series slice (its closed histograms' encodings, three a second; its open
/// histograms are reused from the slice closed before it, D90) and per chunk of kept
/// values written to disk (one per 16 K values).
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
            itl_us: surge_proto::gaps::pack(&[2_000; 7]),
            ..Default::default()
        },
    }
}

#[test]
fn a_folded_row_allocates_no_more_than_stated() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Allocations per row decoded from the wire and placed on the run's timeline, at most:
/// none per row. A row's gaps and response id are bytes borrowed from the received buffer
/// (D80), and a row is decoded in its slot of the batch's global rows and placed there
/// (D99). What the count finds is per 1,024-row batch: the rows' vector, sized for the
/// whole batch after its first row, and the buffer's one shared header (0.0029 a row
/// here; 0.0107 when prost grew the vector by doubling and the placed rows took one of
/// their own).
const PER_WIRE_ROW: f64 = 0.005;

/// A full batch as an agent sends it: 1,024 rows of 8 tokens, each with its response id.
fn wire_batch(seq: u64) -> Vec<u8> {
    let rows = (0..1024)
        .map(|k| Row {
            index: seq * 1024 + k,
            start_us: k as i64 * 1_000,
            intended_us: -1,
            ttft_us: 100_000,
            latency_us: 114_000,
            output_tokens: 8,
            input_tokens: 64,
            itl_us: surge_proto::gaps::pack(&[2_000; 7]),
            response_id: format!("chatcmpl-{seq}-{k}").into_bytes().into(),
            ..Default::default()
        })
        .collect();
    let batch = SampleBatch { run_id: 1, seq, rows, started_unix_ns: 1 };
    AgentMsg { msg: Some(agent_msg::Msg::Batch(batch)) }.encode_to_vec()
}

#[test]
fn a_row_from_the_wire_allocates_nothing_of_its_own() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const WARM: u64 = 5;
    const COUNTED: u64 = 20;
    // Each batch in a buffer of its own, as tonic hands a message to prost to decode.
    let wire: Vec<BytesMut> = (0..WARM + COUNTED).map(|s| BytesMut::from(wire_batch(s).as_slice())).collect();
    let mut agent = AgentReport::default();
    let mut placed = 0usize;
    let mut take = |bytes: BytesMut| {
        let Some(Said::Batch(mut b)) = Incoming::decode(bytes).expect("decodes").said() else { panic!("a batch") };
        agent.place(0, &mut b.rows, b.started_unix_ns, 0);
        placed += b.rows.len();
    };
    let mut wire = wire.into_iter();
    wire.by_ref().take(WARM as usize).for_each(&mut take);
    let before = Counting::count();
    wire.for_each(&mut take);
    let n = Counting::count() - before;
    assert!(n > 0, "the counting allocator counts");
    assert_eq!(placed, ((WARM + COUNTED) * 1024) as usize);
    let per_row = n as f64 / (COUNTED * 1024) as f64;
    assert!(
        per_row <= PER_WIRE_ROW,
        "{per_row:.4} allocations per row from the wire ({n} over {} rows), more than the stated {PER_WIRE_ROW}",
        COUNTED * 1024
    );
    eprintln!("allocations per row from the wire: {per_row:.4} ({n} over {})", COUNTED * 1024);
}
