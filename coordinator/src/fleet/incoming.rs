//! An agent's message as the coordinator decodes it (D99): a batch's rows are decoded
//! straight into the [`GlobalRow`]s the collection places on the run's timeline, each in
//! its slot of the batch's vector, sized once. prost's own decoding builds a row on the
//! stack, moves it into a vector that doubles as it grows, and the placement moved each
//! row (584 bytes) once more into a vector of its own: the copies were a tenth of the
//! coordinator's CPU over 150,000 rows. Every other message is decoded by prost into its
//! own type. The wire is the same (`AgentMsg`, `SampleBatch`): this is only how one side
//! reads it.

use crate::fleet::outcome::GlobalRow;
use prost::Message;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType, int64, message, skip_field, uint64};
use surge_proto::{AgentMsg, SampleBatch, agent_msg};

/// `AgentMsg.batch`'s field number.
const BATCH: u32 = 5;

/// A `SampleBatch` whose rows are global rows not placed yet: agent 0, start and intended
/// times still the agent's own (see [`crate::fleet::outcome::AgentReport::place`]).
#[derive(Debug, Clone, Default)]
pub struct RowBatch {
    pub run_id: u64,
    pub seq: u64,
    pub rows: Vec<GlobalRow>,
    pub started_unix_ns: i64,
    /// Wire bytes of the rows decoded so far, keys included (to size the vector for the
    /// rest).
    row_bytes: usize,
}

impl PartialEq for RowBatch {
    fn eq(&self, o: &Self) -> bool {
        (self.run_id, self.seq, self.started_unix_ns, &self.rows) == (o.run_id, o.seq, o.started_unix_ns, &o.rows)
    }
}

/// The most rows a reservation adds once [`FIRST_RESERVE`] rows were read (a batch holds
/// a few thousand).
const MAX_RESERVE: usize = 1 << 16;
/// The most rows the reservation after the first row adds: one row is a poor sample (a
/// failure's row is short, a long reply's is not), so the rest is sized again from this
/// many.
const FIRST_RESERVE: usize = 1024;

impl RowBatch {
    /// Room for the rows `remaining` wire bytes hold, at the size of the rows read so far
    /// (at least one more): a vector that doubled as it grew would copy each row again
    /// on average, as the placement's own vector used to. `remaining` is what is left of
    /// the whole message, so a reservation is bounded by the rows read so far.
    fn reserve_for(&mut self, remaining: usize) {
        let per_row = self.row_bytes.checked_div(self.rows.len()).map(|b| b.max(1));
        let more = per_row.map_or(1, |b| remaining / b + 1);
        let cap = if self.rows.len() < FIRST_RESERVE { FIRST_RESERVE } else { MAX_RESERVE };
        self.rows.reserve_exact(more.min(cap));
    }
}

impl From<SampleBatch> for RowBatch {
    /// A batch already decoded (the embedded agent's, D1): its rows moved once.
    fn from(b: SampleBatch) -> Self {
        let rows = b.rows.into_iter().map(|row| GlobalRow { row, ..GlobalRow::default() }).collect();
        Self { run_id: b.run_id, seq: b.seq, rows, started_unix_ns: b.started_unix_ns, row_bytes: 0 }
    }
}

impl Message for RowBatch {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.run_id != 0 {
            uint64::encode(1, &self.run_id, buf);
        }
        if self.seq != 0 {
            uint64::encode(2, &self.seq, buf);
        }
        for r in &self.rows {
            message::encode(3, &r.row, buf);
        }
        if self.started_unix_ns != 0 {
            int64::encode(4, &self.started_unix_ns, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => uint64::merge(wire_type, &mut self.run_id, buf, ctx),
            2 => uint64::merge(wire_type, &mut self.seq, buf, ctx),
            3 => {
                if self.rows.len() == self.rows.capacity() {
                    self.reserve_for(buf.remaining());
                }
                // Decoded in its slot: no row is built elsewhere and moved in.
                self.rows.push(GlobalRow::default());
                let slot = self.rows.last_mut().map(|g| &mut g.row).expect("just pushed");
                let before = buf.remaining();
                let read = message::merge(wire_type, slot, buf, ctx);
                // With the field's key (one byte, read before this call).
                self.row_bytes += before - buf.remaining() + 1;
                read
            }
            4 => int64::merge(wire_type, &mut self.started_unix_ns, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let rows: usize = self.rows.iter().map(|r| message::encoded_len(3, &r.row)).sum();
        (if self.run_id != 0 { uint64::encoded_len(1, &self.run_id) } else { 0 })
            + (if self.seq != 0 { uint64::encoded_len(2, &self.seq) } else { 0 })
            + rows
            + (if self.started_unix_ns != 0 { int64::encoded_len(4, &self.started_unix_ns) } else { 0 })
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// What an agent said: a batch of rows, or any other message (never a batch: decoding
/// puts every batch in the first arm).
#[derive(Debug, Clone)]
pub enum Said {
    Batch(RowBatch),
    Msg(agent_msg::Msg),
}

/// `AgentMsg` read with its batch as a [`RowBatch`]; its `oneof` keeps the last field
/// read, as prost's does.
#[derive(Debug, Default)]
pub struct Incoming {
    other: AgentMsg,
    batch: Option<RowBatch>,
}

impl Incoming {
    /// What the message said; `None` for an empty one.
    pub fn said(self) -> Option<Said> {
        match (self.batch, self.other.msg) {
            (Some(b), _) => Some(Said::Batch(b)),
            (None, Some(m)) => Some(Said::Msg(m)),
            (None, None) => None,
        }
    }
}

impl From<Said> for Incoming {
    fn from(s: Said) -> Self {
        match s {
            Said::Batch(b) => Self { other: AgentMsg::default(), batch: Some(b) },
            Said::Msg(m) => Self { other: AgentMsg { msg: Some(m) }, batch: None },
        }
    }
}

impl Message for Incoming {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match &self.batch {
            Some(b) => message::encode(BATCH, b, buf),
            None => self.other.encode_raw(buf),
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag == BATCH {
            self.other.msg = None;
            message::merge(wire_type, self.batch.get_or_insert_with(RowBatch::default), buf, ctx)
        } else {
            self.other.merge_field(tag, wire_type, buf, ctx)?;
            // A batch read clears the other arm, so an arm set now is a field of the
            // oneof read after the batch, which replaces it (an unknown field is skipped).
            if self.other.msg.is_some() {
                self.batch = None;
            }
            Ok(())
        }
    }

    fn encoded_len(&self) -> usize {
        match &self.batch {
            Some(b) => message::encoded_len(BATCH, b),
            None => self.other.encoded_len(),
        }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Health, Row};

    fn batch() -> SampleBatch {
        let rows = (0..3u64)
            .map(|k| Row {
                index: k,
                start_us: 10 * k as i64,
                intended_us: -1,
                latency_us: 1_000 + k,
                itl_us: surge_proto::gaps::pack(&[5, 300, 70_000]),
                response_id: prost::bytes::Bytes::from_static(b"cmpl-1"),
                error_message: if k == 1 { "boom".into() } else { String::new() },
                ..Default::default()
            })
            .collect();
        SampleBatch { run_id: 7, seq: 3, rows, started_unix_ns: 1_234 }
    }

    fn read(m: &AgentMsg) -> Option<Said> {
        Incoming::decode(prost::bytes::Bytes::from(m.encode_to_vec())).expect("decodes").said()
    }

    #[test]
    fn a_batch_reads_as_the_rows_prost_reads_each_in_a_global_row() {
        let b = batch();
        let Some(Said::Batch(got)) = read(&AgentMsg { msg: Some(agent_msg::Msg::Batch(b.clone())) }) else {
            panic!("not a batch")
        };
        assert_eq!(got, RowBatch::from(b.clone()));
        assert_eq!(got.rows.iter().map(|g| g.row.clone()).collect::<Vec<_>>(), b.rows);
        // And back: what it encodes is what the agent sent.
        let again = AgentMsg::decode(Incoming::from(Said::Batch(got)).encode_to_vec().as_slice()).unwrap();
        assert_eq!(again, AgentMsg { msg: Some(agent_msg::Msg::Batch(b)) });
    }

    #[test]
    fn other_messages_read_as_prost_reads_them() {
        let h = agent_msg::Msg::Health(Health { sent_unix_ns: 5, cpu_percent: 12.5, ..Default::default() });
        let Some(Said::Msg(m)) = read(&AgentMsg { msg: Some(h.clone()) }) else { panic!("not a message") };
        assert_eq!(m, h);
        assert!(read(&AgentMsg { msg: None }).is_none(), "an empty message says nothing");
        let again = AgentMsg::decode(Incoming::from(Said::Msg(h.clone())).encode_to_vec().as_slice()).unwrap();
        assert_eq!(again.msg, Some(h));
    }

    #[test]
    fn the_last_field_of_the_oneof_wins_as_in_prost() {
        let b = AgentMsg { msg: Some(agent_msg::Msg::Batch(batch())) }.encode_to_vec();
        let h = AgentMsg { msg: Some(agent_msg::Msg::Health(Health { sent_unix_ns: 9, ..Default::default() })) }
            .encode_to_vec();
        for (first, second) in [(&b, &h), (&h, &b)] {
            let joined = [first.as_slice(), second.as_slice()].concat();
            let ours = Incoming::decode(joined.as_slice()).unwrap().said();
            let prost = AgentMsg::decode(joined.as_slice()).unwrap().msg;
            match (ours, prost) {
                (Some(Said::Batch(r)), Some(agent_msg::Msg::Batch(p))) => assert_eq!(r, RowBatch::from(p)),
                (Some(Said::Msg(m)), Some(p)) => assert_eq!(m, p),
                (o, p) => panic!("read {o:?}, prost read {p:?}"),
            }
        }
    }

    fn decoded(n: u64) -> RowBatch {
        let rows: Vec<Row> = (0..n).map(|k| Row { index: 1_000_000 + k, ..Default::default() }).collect();
        let b = SampleBatch { run_id: 1, seq: 0, rows, started_unix_ns: 1 };
        let Some(Said::Batch(got)) = read(&AgentMsg { msg: Some(agent_msg::Msg::Batch(b)) }) else { panic!() };
        assert_eq!(got.rows.len(), n as usize);
        got
    }

    #[test]
    fn a_batch_is_read_into_a_vector_sized_at_most_twice() {
        let c = decoded(1000).rows.capacity();
        assert!(c <= 1002, "sized from the first row: {c}");
        let c = decoded(5000).rows.capacity();
        assert!(c <= 5002, "sized from the first row, then from the first 1,024: {c}");
        // A first row of one byte before 64 MB of anything else: the room taken is bounded
        // by the rows read, then by the most a reservation adds.
        let mut b = RowBatch::default();
        b.rows.push(GlobalRow::default());
        b.row_bytes = 1;
        b.reserve_for(64 << 20);
        assert!(b.rows.capacity() <= 1 + FIRST_RESERVE, "{}", b.rows.capacity());
        b.rows.resize(b.rows.capacity(), GlobalRow::default());
        b.row_bytes = b.rows.len();
        b.reserve_for(64 << 20);
        assert!(b.rows.capacity() <= b.rows.len() + MAX_RESERVE, "{}", b.rows.capacity());
    }

    #[test]
    fn a_cut_batch_is_an_error_not_a_short_batch() {
        let mut bytes = AgentMsg { msg: Some(agent_msg::Msg::Batch(batch())) }.encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        assert!(Incoming::decode(bytes.as_slice()).is_err());
        assert!(AgentMsg::decode(bytes.as_slice()).is_err(), "as prost");
    }
}
