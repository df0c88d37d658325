//! ACLs written as text, in zkCli's syntax: `scheme:id:perms` entries joined
//! by commas, perms as letters `c` create, `d` delete, `r` read, `w` write,
//! `a` admin, e.g. `world:anyone:cdrwa,digest:user:hash:rw,ip:127.0.0.1:r`.
//! The id is everything between the first and the last colon, so digest ids
//! (`user:hash`) and IPv6 addresses keep their colons.

use super::error::ClientError;
use crate::acl::{perms, Acl};

/// Most entries one ACL text may hold.
pub const MAX_ACL_ENTRIES: usize = 1024;

const LETTERS: [(char, i32); 5] =
    [('c', perms::CREATE), ('d', perms::DELETE), ('r', perms::READ), ('w', perms::WRITE), ('a', perms::ADMIN)];

fn invalid(reason: String) -> ClientError {
    ClientError::InvalidArgument(reason)
}

/// Parses permission letters (`cdrwa` in any order, no repeats needed).
pub fn parse_perms(text: &str) -> Result<i32, ClientError> {
    let mut bits = 0;
    for ch in text.chars() {
        let (_, bit) = LETTERS
            .iter()
            .find(|(letter, _)| *letter == ch.to_ascii_lowercase())
            .ok_or_else(|| invalid(format!("unknown permission {ch:?} in {text:?} (use c, d, r, w, a)")))?;
        bits |= bit;
    }
    Ok(bits)
}

/// Permission bits as letters, in zkCli's order `cdrwa`.
pub fn format_perms(bits: i32) -> String {
    LETTERS.iter().filter(|(_, bit)| bits & bit != 0).map(|(letter, _)| *letter).collect()
}

/// Parses an ACL text into entries.
pub fn parse_acl(text: &str) -> Result<Vec<Acl>, ClientError> {
    let mut out = Vec::new();
    for entry in text.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(invalid(format!("empty ACL entry in {text:?}")));
        }
        let (Some(first), Some(last)) = (entry.find(':'), entry.rfind(':')) else {
            return Err(invalid(format!("ACL entry {entry:?} is not scheme:id:perms")));
        };
        if first == last {
            return Err(invalid(format!("ACL entry {entry:?} is not scheme:id:perms")));
        }
        let scheme = &entry[..first];
        if scheme.is_empty() {
            return Err(invalid(format!("ACL entry {entry:?} has no scheme")));
        }
        let id = &entry[first + 1..last];
        let perms_text = &entry[last + 1..];
        if perms_text.is_empty() {
            return Err(invalid(format!("ACL entry {entry:?} has no permissions")));
        }
        if out.len() == MAX_ACL_ENTRIES {
            return Err(invalid(format!("more than {MAX_ACL_ENTRIES} ACL entries")));
        }
        out.push(Acl::new(parse_perms(perms_text)?, scheme, id));
    }
    Ok(out)
}

/// One entry as `scheme:id:perms`.
pub fn format_acl(acl: &Acl) -> String {
    format!("{}:{}:{}", acl.id.scheme, acl.id.id, format_perms(acl.perms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_zkcli_syntax_keeping_colons_in_ids() {
        let acl = parse_acl("world:anyone:cdrwa,digest:user:hash=:rw, ip:127.0.0.1:r,ip:::1:a,auth::crdwa").unwrap();
        assert_eq!(
            acl,
            vec![
                Acl::new(perms::ALL, "world", "anyone"),
                Acl::new(perms::READ | perms::WRITE, "digest", "user:hash="),
                Acl::new(perms::READ, "ip", "127.0.0.1"),
                Acl::new(perms::ADMIN, "ip", "::1"),
                Acl::new(perms::ALL, "auth", ""),
            ]
        );
    }

    #[test]
    fn formats_back_to_the_same_text() {
        for text in ["world:anyone:cdrwa", "digest:u:h:rw", "ip:10.0.0.1:r", "auth::a"] {
            let acl = parse_acl(text).unwrap();
            assert_eq!(format_acl(&acl[0]), text);
        }
        assert_eq!(format_perms(0), "");
    }

    #[test]
    fn rejects_malformed_entries_with_a_reason() {
        for (text, needle) in [
            ("", "empty ACL entry"),
            ("world:anyone:cdrwa,", "empty ACL entry"),
            ("world", "scheme:id:perms"),
            ("world:anyone", "scheme:id:perms"),
            (":anyone:r", "no scheme"),
            ("world:anyone:", "no permissions"),
            ("world:anyone:rx", "unknown permission 'x'"),
        ] {
            let err = parse_acl(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
