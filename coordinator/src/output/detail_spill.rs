//! `--save-detailed` without holding the run in memory: vLLM's per-request arrays
//! (`input_lens`, `output_lens`, `ttfts`, `e2els`, `itls`, `start_times`, `errors`,
//! `generated_texts`, with surge's `agent_indices`, and `latencies`/`queue_times` for a
//! run without a request cap) are written to disk as rows arrive and streamed into the
//! result JSON when it is written.
//!
//! Two unlinked temporary files (nothing is left behind when the process dies): one of
//! fixed `RECORD`-byte records at the position of each request index, so the arrays come
//! out in request order whatever order rows arrived in; one that rows' variable parts (the
//! gaps between tokens, the error, the generated text) are appended to, each record holding
//! where its part is. Memory does not grow with the run: a write buffer of the appended
//! file, and one record at a time.

use crate::analysis::metrics::{GlobalRow, kind_name};
use serde::ser::{Error, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// present u8 | input u32 | output u32 | ttft f64 | e2el f64 | start f64 | agent u32 |
/// part offset u64 | part length u32 | latency f64 | queue f64 (little endian).
const RECORD: u64 = 65;

/// The files being written during a run.
#[derive(Debug)]
pub struct DetailSpill {
    files: Arc<Files>,
    parts: BufWriter<File>,
    parts_len: u64,
}

#[derive(Debug)]
struct Files {
    /// Where they were created (named in errors; already unlinked).
    path: PathBuf,
    records: File,
    parts: File,
}

/// The arrays, streamed from the files when serialized (a result keeps them alive).
#[derive(Debug, Clone)]
pub struct DetailedArrays {
    files: Arc<Files>,
    /// `latencies` and `queue_times` too (a run without a request cap: no other spill has them).
    vllm_arrays: bool,
}

impl PartialEq for DetailedArrays {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.files, &other.files)
    }
}

impl DetailSpill {
    pub fn create() -> std::io::Result<Self> {
        let (records, path) = crate::analysis::spilled::unlinked_temp("detailed")?;
        let (parts, _) = crate::analysis::spilled::unlinked_temp("detailed-parts")?;
        let writer = BufWriter::with_capacity(1 << 20, parts.try_clone()?);
        Ok(Self { files: Arc::new(Files { path, records, parts }), parts: writer, parts_len: 0 })
    }

    /// Records one row at its request index.
    pub fn write(&mut self, r: &GlobalRow) -> std::io::Result<()> {
        let mut part = Vec::with_capacity(16 + r.row.gap_count() * 8 + r.row.generated_text.len());
        part.extend_from_slice(&0u32.to_le_bytes());
        let mut gaps = 0u32;
        for g in r.row.gaps() {
            part.extend_from_slice(&(f64::from(g) / 1e6).to_le_bytes());
            gaps += 1;
        }
        // The count of the gaps written, whatever the row's bytes said.
        part[..4].copy_from_slice(&gaps.to_le_bytes());
        let error = if r.ok() { String::new() } else { kind_name(r.row.error()) };
        part.extend_from_slice(&(error.len() as u32).to_le_bytes());
        part.extend_from_slice(error.as_bytes());
        part.extend_from_slice(&(r.row.generated_text.len() as u32).to_le_bytes());
        part.extend_from_slice(r.row.generated_text.as_bytes());
        self.parts.write_all(&part)?;
        let mut rec = [0u8; RECORD as usize];
        rec[0] = 1;
        rec[1..5].copy_from_slice(&r.row.input_tokens.to_le_bytes());
        rec[5..9].copy_from_slice(&r.row.output_tokens.to_le_bytes());
        rec[9..17].copy_from_slice(&r.ttft_s().to_le_bytes());
        rec[17..25].copy_from_slice(&r.e2el_s().to_le_bytes());
        rec[25..33].copy_from_slice(&r.start_s.to_le_bytes());
        rec[33..37].copy_from_slice(&(r.agent as u32).to_le_bytes());
        rec[37..45].copy_from_slice(&self.parts_len.to_le_bytes());
        rec[45..49].copy_from_slice(&(part.len() as u32).to_le_bytes());
        rec[49..57].copy_from_slice(&r.vllm_latency_s().to_le_bytes());
        rec[57..65].copy_from_slice(&r.queue_s().to_le_bytes());
        self.parts_len += part.len() as u64;
        self.files.records.write_all_at(&rec, r.row.index.saturating_mul(RECORD))
    }

    /// The arrays of the rows written (`vllm_arrays`: with `latencies` and `queue_times`).
    pub fn arrays(mut self, vllm_arrays: bool) -> std::io::Result<DetailedArrays> {
        self.parts.flush()?;
        Ok(DetailedArrays { files: self.files, vllm_arrays })
    }
}

/// What one array reads from a present record (and its part).
#[derive(Clone, Copy)]
enum Field {
    U32(usize),
    F64(usize),
    Itls,
    Error,
    Text,
}

struct Column<'a> {
    files: &'a Files,
    field: Field,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn f64_at(b: &[u8], at: usize) -> f64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    f64::from_le_bytes(x)
}

/// The `(itls, error, text)` of a record's part.
fn part(p: &[u8]) -> (Vec<f64>, String, String) {
    let n = u32_at(p, 0) as usize;
    let itls = (0..n).map(|k| f64_at(p, 4 + 8 * k)).collect();
    let mut at = 4 + 8 * n;
    let e = u32_at(p, at) as usize;
    let error = String::from_utf8_lossy(&p[at + 4..at + 4 + e]).into_owned();
    at += 4 + e;
    let t = u32_at(p, at) as usize;
    let text = String::from_utf8_lossy(&p[at + 4..at + 4 + t]).into_owned();
    (itls, error, text)
}

impl Serialize for Column<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let err = |e: std::io::Error| S::Error::custom(format!("spill {}: {e}", self.files.path.display()));
        let len = self.files.records.metadata().map_err(err)?.len();
        let mut seq = s.serialize_seq(None)?;
        let mut buf = vec![0u8; (RECORD * 16_384) as usize];
        let mut at = 0u64;
        while at < len {
            let want = ((len - at) as usize).min(buf.len());
            let got = &mut buf[..want];
            // The file may end inside the last record only if it was cut: read what is whole.
            self.files.records.read_exact_at(got, at).map_err(err)?;
            for rec in got.chunks_exact(RECORD as usize).filter(|r| r[0] == 1) {
                match self.field {
                    Field::U32(o) => seq.serialize_element(&u32_at(rec, o))?,
                    Field::F64(o) => seq.serialize_element(&f64_at(rec, o))?,
                    Field::Itls | Field::Error | Field::Text => {
                        let mut p = vec![0u8; u32_at(rec, 45) as usize];
                        let off = u64::from_le_bytes(rec[37..45].try_into().expect("8 bytes"));
                        self.files.parts.read_exact_at(&mut p, off).map_err(err)?;
                        let (itls, error, text) = part(&p);
                        match self.field {
                            Field::Itls => seq.serialize_element(&itls)?,
                            Field::Error => seq.serialize_element(&error)?,
                            _ => seq.serialize_element(&text)?,
                        }
                    }
                }
            }
            at += want as u64;
        }
        seq.end()
    }
}

impl Serialize for DetailedArrays {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = &*self.files;
        let col = |field| Column { files: f, field };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("input_lens", &col(Field::U32(1)))?;
        m.serialize_entry("output_lens", &col(Field::U32(5)))?;
        m.serialize_entry("ttfts", &col(Field::F64(9)))?;
        m.serialize_entry("e2els", &col(Field::F64(17)))?;
        m.serialize_entry("itls", &col(Field::Itls))?;
        m.serialize_entry("start_times", &col(Field::F64(25)))?;
        m.serialize_entry("agent_indices", &col(Field::U32(33)))?;
        m.serialize_entry("errors", &col(Field::Error))?;
        m.serialize_entry("generated_texts", &col(Field::Text))?;
        if self.vllm_arrays {
            m.serialize_entry("latencies", &col(Field::F64(49)))?;
            m.serialize_entry("queue_times", &col(Field::F64(57)))?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row};

    fn row(index: u64, agent: usize, ok: bool) -> GlobalRow {
        let mut row = Row {
            index,
            input_tokens: 10 + index as u32,
            output_tokens: 3,
            ttft_us: 1_000 * (index + 1),
            latency_us: 5_000 * (index + 1),
            itl_us: surge_proto::gaps::pack(&[1_500, 2_500]),
            generated_text: format!("text {index}"),
            ..Default::default()
        };
        if !ok {
            row.set_error(ErrorKind::Timeout);
            row.itl_us = Default::default();
            row.generated_text.clear();
        }
        GlobalRow { agent, start_s: index as f64 / 10.0, intended_s: None, row }
    }

    /// The spilled arrays equal those built in memory from the same rows (the
    /// `--save-detailed` path that held every row), in request order whatever the arrival.
    #[test]
    fn spilled_arrays_equal_the_in_memory_ones() {
        let rows: Vec<GlobalRow> = [3u64, 0, 2, 5].iter().map(|&i| row(i, (i % 2) as usize, i != 2)).collect();
        let mut spill = DetailSpill::create().unwrap();
        for r in &rows {
            spill.write(r).unwrap();
        }
        let arrays = spill.arrays(true).unwrap();
        let got = serde_json::to_value(&arrays).unwrap();
        let m = crate::analysis::aggregate::compute_kept(&rows, &Default::default(), true);
        let want = serde_json::to_value(super::super::build::detailed_of(&m, true)).unwrap();
        for key in [
            "input_lens",
            "output_lens",
            "ttfts",
            "e2els",
            "itls",
            "start_times",
            "agent_indices",
            "errors",
            "generated_texts",
            "latencies",
            "queue_times",
        ] {
            assert_eq!(got[key], want[key], "{key}");
        }
        assert_eq!(got["itls"][0], serde_json::json!([0.0015, 0.0025]));
        assert_eq!(got["errors"], serde_json::json!(["", "timeout", "", ""]));
        assert!(!arrays.files.path.exists(), "unlinked at once");
    }
}
