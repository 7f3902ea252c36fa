//! The codec of the `Agent` service: prost's encoder, and a decoder that hands prost
//! each received message as one `Bytes` (D82). tonic gives a decoder the message inside
//! its receive buffer; prost decoding straight from that `BytesMut` pays its bookkeeping
//! on every field it advances over (about a quarter of a row's decoding). Split off and
//! frozen, the message is the same bytes without a copy, every field advances over a
//! plain slice, and a `bytes` field (a row's gaps, its id, D80) is still a slice of the
//! received buffer.

use prost::Message;
use prost::bytes::Buf;
use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Encodes `T` as prost does; decodes `U` from the message's bytes frozen whole.
#[derive(Debug, Clone)]
pub struct FrozenCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for FrozenCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for FrozenCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = FrozenDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        FrozenDecoder(PhantomData)
    }
}

/// Decodes `U` from the message split off its receive buffer and frozen.
#[derive(Debug, Clone)]
pub struct FrozenDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for FrozenDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        frozen(buf).map(Some)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// The rest of `buf` as one message: split off, frozen, decoded. A message that does not
/// parse is INTERNAL, as in tonic's prost codec.
fn frozen<U: Message + Default>(buf: &mut impl Buf) -> Result<U, Status> {
    let message = buf.copy_to_bytes(buf.remaining());
    U::decode(message).map_err(|e| Status::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentMsg, Row, SampleBatch, agent_msg};
    use prost::bytes::BytesMut;

    fn batch() -> AgentMsg {
        let rows = (0..3u64)
            .map(|k| Row {
                index: k,
                latency_us: 1_000 + k,
                itl_us: crate::gaps::pack(&[5, 300, 70_000]),
                response_id: format!("cmpl-{k}").into_bytes().into(),
                ..Default::default()
            })
            .collect();
        AgentMsg { msg: Some(agent_msg::Msg::Batch(SampleBatch { run_id: 7, seq: 2, rows, started_unix_ns: 9 })) }
    }

    #[test]
    fn a_message_decodes_as_prost_decodes_it_and_its_bytes_stay_in_the_buffer() {
        let sent = batch();
        let mut buf = BytesMut::from(sent.encode_to_vec().as_slice());
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let got: AgentMsg = frozen(&mut buf).expect("decodes");
        assert_eq!(got, sent);
        assert!(buf.is_empty(), "the whole message is taken");
        let Some(agent_msg::Msg::Batch(b)) = got.msg else { panic!("a batch") };
        for r in &b.rows {
            for field in [&r.itl_us, &r.response_id] {
                assert!(range.contains(&(field.as_ptr() as usize)), "a bytes field is a slice of the received buffer");
            }
        }
    }

    #[test]
    fn a_message_that_does_not_parse_is_internal() {
        let mut bytes = batch().encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        let err = frozen::<AgentMsg>(&mut BytesMut::from(bytes.as_slice())).expect_err("cut short");
        assert_eq!(err.code(), tonic::Code::Internal);
    }
}
