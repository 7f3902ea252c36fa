//! A row's gaps between token events (`Row.itl_us`): unsigned varints back to back, the
//! wire form of a packed `repeated uint32`. Kept as the bytes received, they cost a row
//! nothing to decode: read them in order with [`Row::gaps`], count them with
//! [`Row::gap_count`] (D80). The varint codec is prost's, the one its generated code uses.

use crate::Row;
use prost::bytes::{Buf, Bytes};
use std::borrow::Cow;

/// Appends one gap, in microseconds, to a row's gaps being built.
pub fn push(gaps: &mut Vec<u8>, us: u32) {
    prost::encoding::encode_varint(u64::from(us), gaps);
}

/// The gaps `us`, packed as a row carries them.
pub fn pack(us: &[u32]) -> Bytes {
    let mut out = Vec::with_capacity(us.len() * 3);
    us.iter().for_each(|&g| push(&mut out, g));
    Bytes::from(out)
}

/// A row's gaps in order: one for each byte that ends a varint (under 0x80), so there are
/// always [`Row::gap_count`] of them. A value past `u32::MAX`, or a varint too long to be
/// one (neither of which an agent writes), reads as `u32::MAX`; bytes after the last
/// varint's end are not a gap.
#[derive(Clone, Debug)]
pub struct Gaps<'a>(&'a [u8]);

/// The varints that end in `bytes`.
fn ends(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b < 0x80).count()
}

impl Iterator for Gaps<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if !self.0.has_remaining() {
            return None;
        }
        let rest = self.0;
        match prost::encoding::decode_varint(&mut self.0) {
            Ok(v) => Some(u32::try_from(v).unwrap_or(u32::MAX)),
            Err(_) => {
                // Too long, or cut short: on to the byte that ends it, if one does.
                let end = rest.iter().position(|&b| b < 0x80);
                self.0 = end.map_or(&[], |e| &rest[e + 1..]);
                end.map(|_| u32::MAX)
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = ends(self.0);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Gaps<'_> {}

impl Row {
    /// The gaps between this row's token events, in microseconds.
    pub fn gaps(&self) -> Gaps<'_> {
        Gaps(&self.itl_us)
    }

    /// How many gaps the row carries: the varints that end in its bytes.
    pub fn gap_count(&self) -> usize {
        ends(&self.itl_us)
    }

    /// The server's response id as text (a byte that is not UTF-8 reads as U+FFFD).
    pub fn response_id_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.response_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn gaps_read_back_as_written_and_count() {
        let us = [0, 1, 127, 128, 16_383, 16_384, 2_000_000, u32::MAX];
        let row = Row { itl_us: pack(&us), ..Default::default() };
        assert_eq!(row.gaps().collect::<Vec<_>>(), us);
        assert_eq!(row.gap_count(), us.len());
        assert_eq!(Row::default().gaps().count(), 0);
    }

    /// The packed `repeated uint32` and the `string` these fields were, as a peer of that
    /// form writes them (prost's own encoders), read as this form reads them, and back.
    #[test]
    fn the_old_fields_form_and_this_one_are_the_same_bytes() {
        let us = [15_000u32, 0, 300, 70_000];
        let mut old = Vec::new();
        prost::encoding::uint32::encode_packed(10, &us, &mut old);
        prost::encoding::string::encode(15, &"chatcmpl-7".to_string(), &mut old);
        let row = Row::decode(old.as_slice()).expect("decodes");
        assert_eq!(row.gaps().collect::<Vec<_>>(), us);
        assert_eq!(row.response_id_str(), "chatcmpl-7");
        assert_eq!(row.encode_to_vec(), old, "and this form writes the old bytes");
    }

    /// Bytes no agent writes read without a panic, as many gaps as `gap_count` says.
    #[test]
    fn malformed_gaps_read_as_many_as_counted() {
        let read = |b: &'static [u8]| {
            let row = Row { itl_us: Bytes::from_static(b), ..Default::default() };
            let gaps: Vec<u32> = row.gaps().collect();
            assert_eq!(gaps.len(), row.gap_count(), "{b:?}");
            assert_eq!(row.gaps().len(), row.gap_count(), "{b:?}");
            gaps
        };
        assert_eq!(read(&[0x05, 0xff, 0xff]), [5], "a varint cut short is not a gap");
        assert_eq!(read(&[0xff; 11]), [] as [u32; 0]);
        // Past 64 bits in its tenth byte, then 7.
        assert_eq!(read(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0x07]), [u32::MAX, 7]);
        // Eleven bytes long, then 5 and 7.
        assert_eq!(read(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x05, 0x07]), [u32::MAX, 7]);
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0x7f, 0x01]), [u32::MAX, 1], "past u32");
    }
}
