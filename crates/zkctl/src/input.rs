//! Where node data comes from: the command line, a file, or standard input
//! (`-`), read as exact bytes before any session is opened.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest data zkctl reads from a file or stdin: 256 MiB, the most any
/// server's `max_data_bytes` may allow, so a mistaken `create /a -` fed from
/// an endless stream ends with an error rather than eating memory.
pub const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// Why data could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file named could not be opened or read.
    #[error("cannot read data file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Standard input could not be read.
    #[error("cannot read data from stdin: {0}")]
    Stdin(std::io::Error),
    /// The shell reads its commands from the terminal, so stdin holds no data.
    #[error("data from stdin (`-`) is not available in the shell; use --file FILE")]
    StdinInShell,
    /// The input is larger than any server accepts.
    #[error("{what} is larger than {MAX_INPUT_BYTES} bytes")]
    TooLarge {
        /// The file's name or "stdin".
        what: String,
    },
}

/// Whether a command may read standard input (not in the shell, whose stdin is the terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdin {
    /// A one-shot invocation: `-` reads stdin to its end.
    Readable,
    /// The interactive shell: `-` is refused.
    Terminal,
}

/// The data a command gets: `inline` as given (`-` meaning stdin), or the
/// contents of `file` (`-` meaning stdin too); nothing given is empty data.
pub fn read_data(inline: Option<&str>, file: Option<&Path>, stdin: Stdin) -> Result<Vec<u8>, InputError> {
    match (inline, file) {
        (Some("-"), _) => read_stdin(stdin),
        (_, Some(path)) if path == Path::new("-") => read_stdin(stdin),
        (_, Some(path)) => read_file(path),
        (Some(text), None) => Ok(text.as_bytes().to_vec()),
        (None, None) => Ok(Vec::new()),
    }
}

/// Reads a whole file, at most `MAX_INPUT_BYTES`.
pub fn read_file(path: &Path) -> Result<Vec<u8>, InputError> {
    let failed = |source| InputError::File { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(failed)?;
    read_bounded(file, &path.display().to_string(), failed)
}

/// Reads stdin to its end, at most `MAX_INPUT_BYTES`.
pub fn read_stdin(stdin: Stdin) -> Result<Vec<u8>, InputError> {
    if stdin == Stdin::Terminal {
        return Err(InputError::StdinInShell);
    }
    read_bounded(std::io::stdin().lock(), "stdin", InputError::Stdin)
}

/// Reads to the end, refusing more than `MAX_INPUT_BYTES`; `failed` names an I/O error's source.
fn read_bounded(
    reader: impl Read,
    what: &str,
    failed: impl FnOnce(std::io::Error) -> InputError,
) -> Result<Vec<u8>, InputError> {
    let mut data = Vec::new();
    // One byte past the limit tells "exactly the limit" from "more".
    reader.take(MAX_INPUT_BYTES + 1).read_to_end(&mut data).map_err(failed)?;
    if data.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge { what: what.to_string() });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_byte_for_byte_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("blob");
        let bytes = [0u8, 0xff, b'\n', 0x80, b'x'];
        std::fs::write(&path, bytes).expect("write");
        assert_eq!(read_data(None, Some(&path), Stdin::Readable).expect("read"), bytes);
        let missing = dir.path().join("missing");
        let e = read_data(None, Some(&missing), Stdin::Readable).expect_err("no such file");
        assert!(e.to_string().contains(&missing.display().to_string()), "{e}");
    }

    #[test]
    fn inline_data_stays_text_and_the_shell_refuses_stdin() {
        assert_eq!(read_data(Some("abc"), None, Stdin::Terminal).expect("inline"), b"abc");
        assert_eq!(read_data(None, None, Stdin::Terminal).expect("none"), b"");
        assert!(matches!(read_data(Some("-"), None, Stdin::Terminal), Err(InputError::StdinInShell)));
        assert!(matches!(read_data(None, Some(Path::new("-")), Stdin::Terminal), Err(InputError::StdinInShell)));
    }
}
