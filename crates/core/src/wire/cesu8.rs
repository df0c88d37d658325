//! Decoding the strings Java clients write.
//!
//! Jute's Java writer (`BinaryOutputArchive.stringToByteBuffer`) encodes a
//! string one UTF-16 unit at a time, so a character outside the Basic
//! Multilingual Plane becomes its two surrogates, each as a 3-byte sequence
//! (`ED A0..AF xx ED B0..BF xx`): CESU-8, which strict UTF-8 rejects. Every
//! other character is encoded exactly as UTF-8 would (NUL included, as one
//! zero byte). So a string is decoded as UTF-8, and where that fails at a
//! well-formed surrogate pair, the pair is joined into its character.

/// Decodes UTF-8, also accepting CESU-8 surrogate pairs; on failure returns
/// the offset of the first byte that is neither.
pub(crate) fn decode(raw: &[u8]) -> Result<String, usize> {
    match std::str::from_utf8(raw) {
        Ok(s) => return Ok(s.to_owned()),
        Err(e) if !starts_with_surrogate_pair(&raw[e.valid_up_to()..]) => return Err(e.valid_up_to()),
        Err(_) => {}
    }
    let mut out = String::with_capacity(raw.len());
    let mut pos = 0;
    while pos < raw.len() {
        let rest = &raw[pos..];
        let valid = match std::str::from_utf8(rest) {
            Ok(s) => s,
            Err(e) => {
                // `valid_up_to` bytes are valid UTF-8 by definition, so this succeeds.
                std::str::from_utf8(&rest[..e.valid_up_to()]).map_err(|_| pos)?
            }
        };
        out.push_str(valid);
        pos += valid.len();
        if pos == raw.len() {
            break;
        }
        let c = surrogate_pair(&raw[pos..]).ok_or(pos)?;
        out.push(c);
        pos += 6;
    }
    Ok(out)
}

fn starts_with_surrogate_pair(bytes: &[u8]) -> bool {
    surrogate_pair(bytes).is_some()
}

/// The character a CESU-8 surrogate pair at the start of `bytes` encodes.
fn surrogate_pair(bytes: &[u8]) -> Option<char> {
    let [b0, b1, b2, b3, b4, b5, ..] = *bytes else { return None };
    let is_cont = |b: u8| b & 0xC0 == 0x80;
    // High surrogate U+D800..U+DBFF is ED A0..AF xx; low U+DC00..U+DFFF is ED B0..BF xx.
    if b0 != 0xED || b1 & 0xF0 != 0xA0 || !is_cont(b2) || b3 != 0xED || b4 & 0xF0 != 0xB0 || !is_cont(b5) {
        return None;
    }
    let unit = |a: u8, b: u8, c: u8| (u32::from(a & 0x0F) << 12) | (u32::from(b & 0x3F) << 6) | u32::from(c & 0x3F);
    let high = unit(b0, b1, b2);
    let low = unit(b3, b4, b5);
    char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What Java's `BinaryOutputArchive` writes for a string: each UTF-16
    /// unit as 1, 2 or 3 bytes.
    pub(crate) fn java_encode(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for unit in s.encode_utf16() {
            let c = u32::from(unit);
            if c < 0x80 {
                out.push(c as u8);
            } else if c < 0x800 {
                out.push((0xC0 | (c >> 6)) as u8);
                out.push((0x80 | (c & 0x3F)) as u8);
            } else {
                out.push((0xE0 | (c >> 12)) as u8);
                out.push((0x80 | ((c >> 6) & 0x3F)) as u8);
                out.push((0x80 | (c & 0x3F)) as u8);
            }
        }
        out
    }

    #[test]
    fn a_java_encoded_emoji_decodes_to_the_character() {
        let java = java_encode("/a😀b");
        assert_eq!(java, b"/a\xED\xA0\xBD\xED\xB8\x80b");
        assert_eq!(decode(&java), Ok("/a😀b".to_string()));
    }

    #[test]
    fn lone_surrogates_and_garbage_are_refused_at_their_offset() {
        // A high surrogate with no low one after it.
        assert_eq!(decode(b"ab\xED\xA0\xBDc"), Err(2));
        // A low surrogate alone.
        assert_eq!(decode(b"\xED\xB8\x80"), Err(0));
        // Garbage after a valid pair.
        assert_eq!(decode(b"\xED\xA0\xBD\xED\xB8\x80x\xff"), Err(7));
        // Overlong NUL (Java's modified UTF-8, never written by jute).
        assert_eq!(decode(b"\xC0\x80"), Err(0));
        assert_eq!(decode(b"a\0b"), Ok("a\0b".to_string()));
    }

    proptest! {
        #[test]
        fn every_string_java_writes_decodes_to_itself(s in any::<String>()) {
            prop_assert_eq!(decode(&java_encode(&s)), Ok(s.clone()));
            prop_assert_eq!(decode(s.as_bytes()), Ok(s));
        }

        #[test]
        fn decoding_random_bytes_never_panics_and_agrees_with_utf8(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let got = decode(&bytes);
            if let Ok(s) = std::str::from_utf8(&bytes) {
                prop_assert_eq!(got, Ok(s.to_string()));
            }
        }
    }
}
