//! Jute's binary encoding, the primitives every ZooKeeper record is made of
//! (`BinaryOutputArchive` / `BinaryInputArchive`): `int` and `long` big-endian,
//! `boolean` one byte, `buffer` and `ustring` an int length then the bytes
//! (-1 = null), `vector` an int count then the elements (-1 = null). A record
//! is its fields in declaration order, with no tags.
//!
//! The [`Reader`] never panics and never allocates more than the bytes it has
//! been given: every length is checked against the remaining input (and a
//! sanity limit) before anything is allocated.
//!
//! Null handling: our model has no null strings, buffers or lists, so a
//! null (-1) decodes as empty and the [`Writer`] writes empty values with
//! length 0. (ZooKeeper echoes a node created with null data as null; we
//! answer empty, which every client reads as "no data".)
//!
//! Strings: the [`Writer`] writes standard UTF-8. Java clients write strings
//! UTF-16 unit by unit, so a character outside the BMP arrives as two 3-byte
//! surrogate sequences (CESU-8); the [`Reader`] accepts that form and decodes
//! the pair into the one character it stands for. Any other invalid byte
//! sequence is rejected with [`JuteError::InvalidUtf8`] rather than replaced
//! by U+FFFD as Java would do: silently renaming a node is worse than refusing
//! the request, and a refused request (MARSHALLINGERROR) keeps the connection.

use super::cesu8;
use crate::data::Data;
use bytes::Bytes;

/// The largest length a single buffer, string or vector may claim:
/// ZooKeeper's `jute.maxbuffer` (0xfffff) plus its default extra size of the
/// same amount (`BinaryInputArchive.checkLength`).
pub const DEFAULT_MAX_FIELD_LEN: usize = 2 * 0xfffff;

/// Why bytes could not be decoded; `field` names the record field being read
/// (`"CreateRequest.path"`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JuteError {
    /// The input ended inside a field.
    #[error("{field}: truncated, needs {needed} bytes but only {remaining} remain")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// A length or count below -1.
    #[error("{field}: negative length {len}")]
    NegativeLength {
        /// The field being read.
        field: &'static str,
        /// The length found.
        len: i32,
    },
    /// A length or count above the sanity limit.
    #[error("{field}: length {len} exceeds the limit of {limit}")]
    TooLong {
        /// The field being read.
        field: &'static str,
        /// The length found.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// A string that is neither UTF-8 nor Java's CESU-8 form of it.
    #[error("{field}: invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// The field being read.
        field: &'static str,
        /// Offset of the first bad byte within the string.
        offset: usize,
    },
    /// A well-formed number that is not a valid value for its field.
    #[error("{field}: invalid value {value}")]
    InvalidValue {
        /// The field being read.
        field: &'static str,
        /// The value found.
        value: i64,
    },
}

/// Reads jute primitives from a byte slice, front to back.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    max_field_len: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` with the default sanity limit.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0, max_field_len: DEFAULT_MAX_FIELD_LEN }
    }

    /// A reader whose buffers, strings and vectors may claim at most `max_field_len`.
    pub fn with_limit(buf: &'a [u8], max_field_len: usize) -> Reader<'a> {
        Reader { buf, pos: 0, max_field_len }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], JuteError> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(JuteError::Truncated { field, needed: n, remaining });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Takes exactly `N` bytes as an array.
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], JuteError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    /// A jute `int`.
    pub fn int(&mut self, field: &'static str) -> Result<i32, JuteError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// A jute `long`.
    pub fn long(&mut self, field: &'static str) -> Result<i64, JuteError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// A jute `boolean`; like Java's `readBoolean`, any non-zero byte is true.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, JuteError> {
        Ok(self.array::<1>(field)?[0] != 0)
    }

    /// A length or count prefix: `None` for null (-1), checked against the
    /// sanity limit. Callers still check it against the remaining bytes.
    fn length(&mut self, field: &'static str) -> Result<Option<usize>, JuteError> {
        let len = self.int(field)?;
        if len == -1 {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(len) else {
            return Err(JuteError::NegativeLength { field, len });
        };
        if len > self.max_field_len {
            return Err(JuteError::TooLong { field, len, limit: self.max_field_len });
        }
        Ok(Some(len))
    }

    /// The raw bytes of a jute `buffer`; `None` for null.
    pub fn buffer_opt(&mut self, field: &'static str) -> Result<Option<&'a [u8]>, JuteError> {
        match self.length(field)? {
            None => Ok(None),
            Some(len) => self.take(len, field).map(Some),
        }
    }

    /// A jute `buffer`; null reads as empty.
    pub fn buffer(&mut self, field: &'static str) -> Result<Bytes, JuteError> {
        Ok(self.buffer_opt(field)?.map_or_else(Bytes::new, Bytes::copy_from_slice))
    }

    /// A jute `ustring`; `None` for null.
    pub fn ustring_opt(&mut self, field: &'static str) -> Result<Option<String>, JuteError> {
        let Some(raw) = self.buffer_opt(field)? else { return Ok(None) };
        cesu8::decode(raw).map(Some).map_err(|offset| JuteError::InvalidUtf8 { field, offset })
    }

    /// A jute `ustring`; null reads as empty.
    pub fn ustring(&mut self, field: &'static str) -> Result<String, JuteError> {
        Ok(self.ustring_opt(field)?.unwrap_or_default())
    }

    /// The count of a jute `vector` whose elements take at least
    /// `min_element_len` bytes each; 0 for null. A count the remaining bytes
    /// cannot hold is refused here, before the caller allocates for it.
    pub fn vector_len(&mut self, field: &'static str, min_element_len: usize) -> Result<usize, JuteError> {
        let Some(count) = self.length(field)? else { return Ok(0) };
        let needed = count.saturating_mul(min_element_len.max(1));
        let remaining = self.remaining();
        if needed > remaining {
            return Err(JuteError::Truncated { field, needed, remaining });
        }
        Ok(count)
    }
}

/// Appends jute primitives to a byte vector.
#[derive(Clone, Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// Where the open frame's length prefix starts (frames only).
    frame_start: usize,
}

/// Converts a length to jute's `int`. Lengths beyond `i32::MAX` cannot occur:
/// every value we encode came from, or goes into, a frame capped at a few MiB.
/// Saturating keeps the encoder total instead of panicking on the impossible.
fn wire_len(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

impl Writer {
    /// An empty writer, for unframed bytes ([`Writer::into_bytes`]).
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A writer that starts a frame: 4 placeholder bytes for the length
    /// prefix, patched by [`Writer::into_frame`].
    pub fn frame() -> Writer {
        Writer::frame_after(Vec::with_capacity(64))
    }

    /// A writer that starts a frame after the bytes already in `buf`, so a
    /// connection can batch several frames in one buffer without allocating.
    pub fn frame_after(mut buf: Vec<u8>) -> Writer {
        let frame_start = buf.len();
        buf.extend_from_slice(&[0; 4]);
        Writer { buf, frame_start }
    }

    /// Drops what was written into the open frame, keeping its prefix.
    pub fn clear_frame(&mut self) {
        self.buf.truncate(self.frame_start + 4);
    }

    /// Finishes a frame begun with [`Writer::frame`] or [`Writer::frame_after`]:
    /// writes the payload length into the prefix and returns the buffer.
    pub fn into_frame(mut self) -> Vec<u8> {
        let start = self.frame_start;
        let payload = wire_len(self.buf.len().saturating_sub(start + 4));
        if let Some(prefix) = self.buf.get_mut(start..start + 4) {
            prefix.copy_from_slice(&payload.to_be_bytes());
        }
        self.buf
    }

    /// The bytes written, without framing.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// A jute `int`.
    pub fn int(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A jute `long`.
    pub fn long(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A jute `boolean`.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    /// A jute `buffer`.
    pub fn buffer(&mut self, v: &[u8]) {
        self.int(wire_len(v.len()));
        self.buf.extend_from_slice(v);
    }

    /// A null jute `buffer` or `ustring` (length -1).
    pub fn null(&mut self) {
        self.int(-1);
    }

    /// A jute `ustring`, as standard UTF-8.
    pub fn ustring(&mut self, v: &str) {
        self.buffer(v.as_bytes());
    }

    /// The count that starts a jute `vector`; the caller writes the elements.
    pub fn vector_len(&mut self, count: usize) {
        self.int(wire_len(count));
    }
}

/// A value with a jute encoding: primitives, records, and vectors of them.
pub trait Jute: Sized {
    /// The fewest bytes one encoded value takes; bounds vector counts.
    const MIN_LEN: usize;

    /// Appends the value.
    fn write(&self, w: &mut Writer);

    /// Reads one value; `field` names it in errors.
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError>;
}

impl Jute for i32 {
    const MIN_LEN: usize = 4;
    fn write(&self, w: &mut Writer) {
        w.int(*self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        r.int(field)
    }
}

impl Jute for i64 {
    const MIN_LEN: usize = 8;
    fn write(&self, w: &mut Writer) {
        w.long(*self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        r.long(field)
    }
}

impl Jute for bool {
    const MIN_LEN: usize = 1;
    fn write(&self, w: &mut Writer) {
        w.bool(*self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        r.bool(field)
    }
}

impl Jute for String {
    const MIN_LEN: usize = 4;
    fn write(&self, w: &mut Writer) {
        w.ustring(self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        r.ustring(field)
    }
}

impl Jute for Bytes {
    const MIN_LEN: usize = 4;
    fn write(&self, w: &mut Writer) {
        w.buffer(self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        r.buffer(field)
    }
}

/// A znode's data keeps null (-1) apart from empty, as ZooKeeper does.
impl Jute for Data {
    const MIN_LEN: usize = 4;
    fn write(&self, w: &mut Writer) {
        match self.as_option() {
            Some(bytes) => w.buffer(bytes),
            None => w.null(),
        }
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        Ok(r.buffer_opt(field)?.map(Bytes::copy_from_slice).into())
    }
}

impl<T: Jute> Jute for Vec<T> {
    const MIN_LEN: usize = 4;
    fn write(&self, w: &mut Writer) {
        w.vector_len(self.len());
        for item in self {
            item.write(w);
        }
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        let count = r.vector_len(field, T::MIN_LEN)?;
        // The count is bounded by the remaining bytes (checked above), so
        // this allocation is at most proportional to the input.
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(T::read(r, field)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_big_endian_and_fixed_width() {
        let mut w = Writer::new();
        w.int(0x0102_0304);
        w.long(-2);
        w.bool(true);
        w.bool(false);
        assert_eq!(w.into_bytes(), [1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1, 0]);
    }

    #[test]
    fn any_nonzero_byte_reads_as_true() {
        let mut r = Reader::new(&[0, 1, 0x80]);
        assert!(!r.bool("b").unwrap());
        assert!(r.bool("b").unwrap());
        assert!(r.bool("b").unwrap());
    }

    #[test]
    fn null_buffer_and_string_read_as_empty() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        let mut r = Reader::new(&bytes);
        assert_eq!(r.buffer("data").unwrap(), Bytes::new());
        assert_eq!(r.ustring("path").unwrap(), "");
        assert_eq!(r.remaining(), 0);
        let mut r = Reader::new(&bytes);
        assert_eq!(r.ustring_opt("path").unwrap(), None);
    }

    #[test]
    fn a_huge_length_claim_fails_without_allocating() {
        // 0x7fffffff claims 2 GiB; the limit check refuses it before any allocation.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, b'a']);
        assert_eq!(
            r.buffer("data"),
            Err(JuteError::TooLong { field: "data", len: 0x7fff_ffff, limit: DEFAULT_MAX_FIELD_LEN })
        );
        // Within the limit but beyond the input: truncated, again before allocating.
        let mut r = Reader::new(&[0, 0x10, 0, 0, b'a']);
        assert_eq!(r.buffer("data"), Err(JuteError::Truncated { field: "data", needed: 0x10_0000, remaining: 1 }));
    }

    #[test]
    fn lengths_below_minus_one_are_refused() {
        let minus_two = (-2i32).to_be_bytes();
        let mut r = Reader::new(&minus_two);
        assert_eq!(r.ustring("path"), Err(JuteError::NegativeLength { field: "path", len: -2 }));
        let min = i32::MIN.to_be_bytes();
        let mut r = Reader::new(&min);
        assert_eq!(
            Vec::<String>::read(&mut r, "children"),
            Err(JuteError::NegativeLength { field: "children", len: i32::MIN })
        );
    }

    #[test]
    fn vector_count_is_checked_against_the_remaining_bytes() {
        // 1000 longs claimed, 8 bytes present.
        let mut bytes = 1000i32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let mut r = Reader::new(&bytes);
        assert_eq!(
            Vec::<i64>::read(&mut r, "xs"),
            Err(JuteError::Truncated { field: "xs", needed: 8000, remaining: 8 })
        );
    }

    #[test]
    fn a_custom_limit_applies_to_every_length() {
        let mut w = Writer::new();
        w.ustring("hello");
        let bytes = w.into_bytes();
        let mut r = Reader::with_limit(&bytes, 4);
        assert_eq!(r.ustring("s"), Err(JuteError::TooLong { field: "s", len: 5, limit: 4 }));
    }

    #[test]
    fn truncation_names_the_field() {
        let mut r = Reader::new(&[0, 0, 0]);
        let err = r.int("RequestHeader.xid").unwrap_err();
        assert_eq!(err.to_string(), "RequestHeader.xid: truncated, needs 4 bytes but only 3 remain");
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_offset() {
        let mut w = Writer::new();
        w.buffer(b"/a\xffb");
        let bytes = w.into_bytes();
        assert_eq!(Reader::new(&bytes).ustring("path"), Err(JuteError::InvalidUtf8 { field: "path", offset: 2 }));
    }

    #[test]
    fn frame_prefix_is_the_payload_length() {
        let mut w = Writer::frame();
        w.int(7);
        w.bool(true);
        assert_eq!(w.into_frame(), [0, 0, 0, 5, 0, 0, 0, 7, 1]);
        assert_eq!(Writer::frame().into_frame(), [0, 0, 0, 0]);
    }

    #[test]
    fn frames_append_after_earlier_bytes_and_can_be_cleared() {
        let mut w = Writer::frame_after(vec![9, 9]);
        w.int(1);
        w.clear_frame();
        w.bool(true);
        assert_eq!(w.into_frame(), [9, 9, 0, 0, 0, 1, 1]);
    }
}
