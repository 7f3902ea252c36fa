//! vLLM's per-request `latencies` and `queue_times` arrays (D3) without keeping them in
//! memory: each row is written, as it arrives, at the file position of its request index
//! (so the file is in request order whatever order rows arrive in), and the arrays are
//! streamed from the file into the result JSON when it is written. A run of N prompts costs
//! 17 bytes per request on disk and nothing per request in memory. Records are gathered in
//! a few blocks of consecutive indices (at most `BLOCKS` x `BLOCK` records, ~4.5 MB)
//! and a block is written when a newer one needs its room or the run ends, one write per
//! run of present records: one system call per 16 Ki requests rather than one each (a
//! write per row cost ~10 us of the client's core, in-process, at 50 k requests/s). The file's name is
//! removed as soon as it is opened, so nothing is left behind even when the process is
//! killed; the space goes with the last result holding it.
//!
//! Values as vLLM's: `latencies` is the E2E latency of a successful request and 0.0 for a
//! failed one (vLLM sets it only on success); `queue_times` is the send time minus the
//! request's arrival (its intended send in an open loop, the start in a closed loop, where
//! vLLM has every request arrive at once). Requests never sent (an interrupted run) are
//! left out, as vLLM's outputs leave them out.

use crate::analysis::metrics::GlobalRow;
use serde::ser::{Error, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// Records per block, and blocks held before the oldest is written.
const BLOCK: u64 = 16_384;
const BLOCKS: usize = 16;

/// One request: a present flag, then latency and queue time (f64 seconds, little endian).
const RECORD: u64 = 17;

/// The file being written during a run.
#[derive(Debug)]
pub struct Spill {
    file: Arc<SpillFile>,
    /// Requests of the run: indices 0..n.
    n: u64,
    /// Records not yet written, by block (index / BLOCK); absent records are all zero.
    blocks: BTreeMap<u64, Vec<u8>>,
}

#[derive(Debug)]
struct SpillFile {
    /// Where it was created (named in errors; already unlinked).
    path: PathBuf,
    file: File,
}

impl Spill {
    /// A spill for a run of `n` requests, in the system's temporary directory.
    pub fn create(n: u64) -> std::io::Result<Self> {
        let (file, path) = crate::analysis::spilled::unlinked_temp("arrays")?;
        file.set_len(n.saturating_mul(RECORD))?;
        Ok(Self { file: Arc::new(SpillFile { path, file }), n, blocks: BTreeMap::new() })
    }

    /// Records one row at its index (rows outside 0..n are not vLLM's requests: ignored).
    pub fn write(&mut self, r: &GlobalRow) -> std::io::Result<()> {
        let i = r.row.index;
        if i >= self.n {
            return Ok(());
        }
        let key = i / BLOCK;
        if !self.blocks.contains_key(&key)
            && self.blocks.len() >= BLOCKS
            && let Some((&oldest, _)) = self.blocks.first_key_value()
        {
            // Runs move up the indices: the lowest block is the one done with.
            let block = self.blocks.remove(&oldest).unwrap_or_default();
            self.flush(oldest, &block)?;
        }
        let block = self.blocks.entry(key).or_insert_with(|| vec![0u8; (BLOCK * RECORD) as usize]);
        let at = ((i % BLOCK) * RECORD) as usize;
        let rec = &mut block[at..at + RECORD as usize];
        rec[0] = 1;
        rec[1..9].copy_from_slice(&r.vllm_latency_s().to_le_bytes());
        rec[9..17].copy_from_slice(&r.queue_s().to_le_bytes());
        Ok(())
    }

    /// Writes block `key`'s present records, one write per run of consecutive ones (so a
    /// block seen again later never overwrites what an earlier write put in the file).
    fn flush(&self, key: u64, block: &[u8]) -> std::io::Result<()> {
        let present = |k: usize| block[k * RECORD as usize] == 1;
        let n = block.len() / RECORD as usize;
        let mut k = 0;
        while k < n {
            if !present(k) {
                k += 1;
                continue;
            }
            let start = k;
            while k < n && present(k) {
                k += 1;
            }
            let bytes = &block[start * RECORD as usize..k * RECORD as usize];
            self.file.file.write_all_at(bytes, (key * BLOCK + start as u64) * RECORD)?;
        }
        Ok(())
    }

    /// The arrays, for the result: every record still held is written first.
    pub fn arrays(mut self) -> std::io::Result<VllmArrays> {
        for (key, block) in std::mem::take(&mut self.blocks) {
            self.flush(key, &block)?;
        }
        Ok(VllmArrays { file: Arc::clone(&self.file) })
    }
}

/// `latencies` and `queue_times`, serialized from the spill file.
#[derive(Debug, Clone)]
pub struct VllmArrays {
    file: Arc<SpillFile>,
}

impl PartialEq for VllmArrays {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
    }
}

impl Serialize for VllmArrays {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("latencies", &Column { file: &self.file, offset: 1 })?;
        m.serialize_entry("queue_times", &Column { file: &self.file, offset: 9 })?;
        m.end()
    }
}

/// One array: the f64 at `offset` of every present record, in index order.
struct Column<'a> {
    file: &'a SpillFile,
    offset: usize,
}

impl Serialize for Column<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let err = |e: std::io::Error| S::Error::custom(format!("spill {}: {e}", self.file.path.display()));
        let len = self.file.file.metadata().map_err(err)?.len();
        let mut seq = s.serialize_seq(None)?;
        // Whole records, 64 Ki at a time, read at their offsets (the fd is shared).
        let mut buf = vec![0u8; (RECORD * 65_536) as usize];
        let mut at = 0u64;
        while at < len {
            let want = ((len - at) as usize).min(buf.len());
            self.file.file.read_exact_at(&mut buf[..want], at).map_err(err)?;
            for rec in buf[..want].chunks_exact(RECORD as usize).filter(|r| r[0] == 1) {
                let mut b = [0u8; 8];
                b.copy_from_slice(&rec[self.offset..self.offset + 8]);
                seq.serialize_element(&f64::from_le_bytes(b))?;
            }
            at += want as u64;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row};

    #[test]
    fn blocks_written_early_and_late_keep_every_record() {
        // Two agents' slices interleaved, more blocks than are held, stragglers of blocks
        // already written, and requests never sent: every record lands at its index.
        let n = BLOCK * (BLOCKS as u64 + 6);
        let mut spill = Spill::create(n).unwrap();
        let half = n / 2;
        let skipped = |i: u64| i % 1000 == 7;
        let late = |i: u64| i % 5000 == 3;
        for k in 0..half {
            for i in [k, half + k] {
                if !skipped(i) && !late(i) {
                    spill.write(&row(i, 0.0, Some(0.0), i + 1, true)).unwrap();
                }
            }
        }
        for i in (0..n).filter(|&i| late(i) && !skipped(i)) {
            spill.write(&row(i, 0.0, Some(0.0), i + 1, true)).unwrap();
        }
        let v = serde_json::to_value(spill.arrays().unwrap()).unwrap();
        let want: Vec<f64> = (0..n).filter(|&i| !skipped(i)).map(|i| (i + 1) as f64 / 1e6).collect();
        let got: Vec<f64> = v["latencies"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12), "a record out of place");
    }

    fn row(index: u64, start_s: f64, intended_s: Option<f64>, latency_us: u64, ok: bool) -> GlobalRow {
        let mut row = Row { index, latency_us, ttft_us: latency_us / 2, ..Default::default() };
        if !ok {
            row.set_error(ErrorKind::HttpStatus);
        }
        GlobalRow { agent: 0, start_s, intended_s, row }
    }

    #[test]
    fn arrays_in_index_order_whatever_the_arrival_and_no_file_left_behind() {
        let mut spill = Spill::create(4).unwrap();
        // Arrival order 2, 0, 3; request 1 never sent.
        spill.write(&row(2, 1.0, Some(0.5), 300_000, true)).unwrap();
        spill.write(&row(0, 0.1, Some(0.1), 100_000, true)).unwrap();
        spill.write(&row(3, 2.0, Some(1.0), 400_000, false)).unwrap();
        spill.write(&row(9, 2.0, None, 1, true)).unwrap();
        let arrays = spill.arrays().unwrap();
        let v = serde_json::to_value(&arrays).unwrap();
        assert_eq!(v["latencies"], serde_json::json!([0.1, 0.3, 0.0]));
        assert_eq!(v["queue_times"], serde_json::json!([0.0, 0.5, 1.0]));
        assert!(!arrays.file.path.exists(), "unlinked at once: nothing left if the process dies");
        let again = serde_json::to_value(&arrays).unwrap();
        assert_eq!(again, v, "the result still reads it");
    }
}
