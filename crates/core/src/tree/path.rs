//! ZooKeeper's path rules (`PathUtils.validatePath`) and path arithmetic.
//!
//! A path is absolute, has no trailing '/' (except the root), no empty, "." or
//! ".." component, and none of the characters ZooKeeper forbids: NUL,
//! U+0001-U+001F, U+007F-U+009F, U+E000-U+F8FF (surrogates cannot occur in a
//! Rust string) and U+FFF0-U+FFFF.

/// Why a path is invalid; the text mirrors ZooKeeper's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("path length must be > 0")]
    Empty,
    /// The path does not start with '/'.
    #[error("path must start with / character")]
    NotAbsolute,
    /// The path ends with '/'.
    #[error("path must not end with / character")]
    TrailingSlash,
    /// The path contains "//".
    #[error("empty node name specified @{0}")]
    EmptyComponent(usize),
    /// A component is "." or "..".
    #[error("relative paths not allowed @{0}")]
    Relative(usize),
    /// A forbidden character.
    #[error("invalid character @{0}")]
    InvalidChar(usize),
}

/// Validates `path`; a sequential create may end with '/' since the server
/// appends the counter (ZooKeeper validates `path + "1"` in that case).
pub fn validate(path: &str, sequential: bool) -> Result<(), PathError> {
    if sequential && path.ends_with('/') {
        return validate_inner(path, true);
    }
    validate_inner(path, false)
}

fn validate_inner(path: &str, suffix_follows: bool) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') && !suffix_follows {
        return Err(PathError::TrailingSlash);
    }
    check_names(path)
}

/// The rules on the characters after the leading '/' of an absolute path:
/// no NUL or forbidden character, no empty, "." or ".." component.
fn check_names(path: &str) -> Result<(), PathError> {
    // A window over the characters, indexed by character as ZooKeeper
    // reports them: each request validates its path, so no copy of it.
    let mut chars = path.chars().enumerate().skip(1).peekable();
    // The character two before the current one ('/' before the first name,
    // as ZooKeeper's check reads it) and the one before it (the leading '/').
    let (mut before, mut last) = ('/', '/');
    while let Some((i, c)) = chars.next() {
        let after = chars.peek().map(|&(_, a)| a);
        if c == '\0' {
            return Err(PathError::InvalidChar(i));
        } else if c == '/' && last == '/' {
            return Err(PathError::EmptyComponent(i));
        } else if c == '.' && last == '.' {
            if before == '/' && (after.is_none() || after == Some('/')) {
                return Err(PathError::Relative(i));
            }
        } else if c == '.' {
            if last == '/' && (after.is_none() || after == Some('/')) {
                return Err(PathError::Relative(i));
            }
        } else if forbidden(c) {
            return Err(PathError::InvalidChar(i));
        }
        (before, last) = (last, c);
    }
    Ok(())
}

fn forbidden(c: char) -> bool {
    matches!(c as u32, 0x01..=0x1f | 0x7f..=0x9f | 0xe000..=0xf8ff | 0xfff0..=0xffff)
}

/// The parent of a valid non-root path ("/" for top-level nodes).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The last component of a valid non-root path.
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// ZooKeeper's sequential suffix: the parent's cversion as `%010d` (signed).
pub fn sequential_suffix(parent_cversion: i32) -> String {
    format!("{parent_cversion:010}")
}

/// True when `path` is `prefix` itself or lies below it.
pub fn is_at_or_below(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_paths() {
        for p in ["/", "/a", "/a/b", "/a.b", "/..a", "/a..", "/.a/b.", "/zookeeper/quota", "/ü/名前"] {
            assert_eq!(validate(p, false), Ok(()), "{p}");
        }
    }

    #[test]
    fn rejects_each_rule_with_its_reason() {
        assert_eq!(validate("", false), Err(PathError::Empty));
        assert_eq!(validate("a", false), Err(PathError::NotAbsolute));
        assert_eq!(validate("/a/", false), Err(PathError::TrailingSlash));
        assert_eq!(validate("/a//b", false), Err(PathError::EmptyComponent(3)));
        assert_eq!(validate("/a/./b", false), Err(PathError::Relative(3)));
        assert_eq!(validate("/a/..", false), Err(PathError::Relative(4)));
        assert_eq!(validate("/.", false), Err(PathError::Relative(1)));
        assert_eq!(validate("/a\0b", false), Err(PathError::InvalidChar(2)));
        assert_eq!(validate("/a\u{1}", false), Err(PathError::InvalidChar(2)));
        assert_eq!(validate("/a\u{7f}", false), Err(PathError::InvalidChar(2)));
        assert_eq!(validate("/a\u{e000}", false), Err(PathError::InvalidChar(2)));
        assert_eq!(validate("/a\u{fff0}", false), Err(PathError::InvalidChar(2)));
    }

    #[test]
    fn sequential_create_may_end_with_slash() {
        assert_eq!(validate("/a/", true), Ok(()));
        assert_eq!(validate("/a//", true), Err(PathError::EmptyComponent(3)));
    }

    /// The character rules as first written, over a copy of the path's
    /// characters: the window that replaced the copy must agree with it.
    fn check_names_by_copy(path: &str) -> Result<(), PathError> {
        let chars: Vec<char> = path.chars().collect();
        for (i, &c) in chars.iter().enumerate().skip(1) {
            let last = chars[i - 1];
            if c == '\0' {
                return Err(PathError::InvalidChar(i));
            } else if c == '/' && last == '/' {
                return Err(PathError::EmptyComponent(i));
            } else if c == '.' && last == '.' {
                let before = if i >= 2 { chars[i - 2] } else { '/' };
                let after = chars.get(i + 1).copied();
                if before == '/' && (after.is_none() || after == Some('/')) {
                    return Err(PathError::Relative(i));
                }
            } else if c == '.' {
                let after = chars.get(i + 1).copied();
                if last == '/' && (after.is_none() || after == Some('/')) {
                    return Err(PathError::Relative(i));
                }
            } else if forbidden(c) {
                return Err(PathError::InvalidChar(i));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn the_window_agrees_with_the_copy(
            rest in proptest::collection::vec(proptest::sample::select(vec!['/', '.', 'a', '\0', '\u{1}', 'ü', '\u{e000}', '名']), 0..9),
        ) {
            let path: String = std::iter::once('/').chain(rest).collect();
            proptest::prop_assert_eq!(check_names(&path), check_names_by_copy(&path), "{:?}", path);
        }
    }

    #[test]
    fn path_arithmetic() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(sequential_suffix(7), "0000000007");
        assert_eq!(sequential_suffix(-2147483648), "-2147483648");
        assert!(is_at_or_below("/a/b", "/a"));
        assert!(is_at_or_below("/a", "/a"));
        assert!(!is_at_or_below("/ab", "/a"));
        assert!(is_at_or_below("/x", "/"));
    }
}
