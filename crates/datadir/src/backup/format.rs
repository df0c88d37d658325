//! The bytes of a backup's files (see `docs/src/backup.md`).
//!
//! Every file starts with a header: the magic `ZKBACKUP`, the format
//! version (u32), the kind (1 snapshot, 2 transactions), a zxid (a
//! snapshot's own; for transactions the one the first record follows), a
//! time in ms since the Unix epoch and a CRC32 of the bytes before it; all
//! integers big-endian. Frames follow: a length (u32), a CRC32 of the body,
//! the body. A snapshot file's bodies are the chunks of the tree's snapshot
//! stream (`tree::snapshot`); a transaction file's body is a record: its
//! zxid, the zxid of the transaction it follows (so a missing one shows),
//! and the transaction as the log stores it (`txn::codec`).
//!
//! The version comes right after the magic so that any later layout is
//! recognised by it before anything else is read.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;

/// The format this build writes and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;
/// The first bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"ZKBACKUP";
/// Bytes of a file header.
pub const HEADER_LEN: usize = 8 + 4 + 1 + 8 + 8 + 4;
/// Bytes of a frame's length and checksum.
pub const FRAME_HEAD: usize = 8;
/// Bytes of a transaction record before the transaction itself.
const RECORD_HEAD: usize = 16;
/// The largest frame read: far above a snapshot chunk or a transaction
/// (whose data ZooKeeper bounds to about a MiB), so a length above it is
/// damage, not data.
pub const MAX_FRAME: usize = 256 << 20;

/// What a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A snapshot of the tree.
    Snapshot,
    /// Committed transactions, in order.
    Txns,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Snapshot => 1,
            Kind::Txns => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Snapshot => "snapshot",
            Kind::Txns => "transactions",
        }
    }
}

/// What went wrong reading or writing a backup.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a backup file of the expected kind.
    #[error("{path}: not a backup {expected} file: {reason}")]
    NotBackup {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        expected: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A format version this build does not read.
    #[error("{path}: backup format version {found}, this zkctl reads version {supported} only")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version the file names.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file ends inside a frame.
    #[error("{path}: torn at offset {offset}: the file ends inside a record ({reason})")]
    Torn {
        /// The file.
        path: PathBuf,
        /// Where the incomplete frame starts.
        offset: u64,
        /// What is missing.
        reason: String,
    },
    /// A whole frame whose bytes are damaged.
    #[error("{path}: corrupt at offset {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the frame starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> FormatError + '_ {
    move |source| FormatError::Io { path: path.to_path_buf(), source }
}

/// A file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the file holds.
    pub kind: Kind,
    /// A snapshot's zxid; for transactions, the zxid the first one follows.
    pub zxid: Zxid,
    /// A snapshot's: when its last transaction was applied; for
    /// transactions: when the file was started (ms since the Unix epoch).
    pub time_ms: i64,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
        out[12] = self.kind.byte();
        out[13..21].copy_from_slice(&self.zxid.0.to_be_bytes());
        out[21..29].copy_from_slice(&self.time_ms.to_be_bytes());
        let crc = crc32fast::hash(&out[..29]);
        out[29..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads and checks the header of `path`, which must hold `kind`.
    pub fn decode(path: &Path, bytes: &[u8], kind: Kind) -> Result<Header, FormatError> {
        let not = |reason: String| FormatError::NotBackup { path: path.to_path_buf(), expected: kind.name(), reason };
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(not(format!("it does not start with {:?}", String::from_utf8_lossy(MAGIC))));
        }
        // The version first: a later format may lay out the rest differently.
        let found = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if found != FORMAT_VERSION {
            return Err(FormatError::Version { path: path.to_path_buf(), found, supported: FORMAT_VERSION });
        }
        if bytes.len() < HEADER_LEN {
            return Err(FormatError::Torn {
                path: path.to_path_buf(),
                offset: 0,
                reason: format!("a header of {} bytes, {HEADER_LEN} needed", bytes.len()),
            });
        }
        let stored = u32::from_be_bytes([bytes[29], bytes[30], bytes[31], bytes[32]]);
        if stored != crc32fast::hash(&bytes[..29]) {
            return Err(FormatError::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                reason: "the header fails its checksum".into(),
            });
        }
        if bytes[12] != kind.byte() {
            return Err(not(format!("its header says kind {}", bytes[12])));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            b
        };
        Ok(Header { kind, zxid: Zxid(u64::from_be_bytes(u64_at(13))), time_ms: i64::from_be_bytes(u64_at(21)) })
    }
}

/// Appends one frame holding `body` to `out`.
pub fn frame(body: &[u8], out: &mut Vec<u8>) {
    // MAX_FRAME bounds what is written as well as what is read; callers
    // write snapshot chunks (1 MiB) and transactions (about a MiB at most).
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out.extend_from_slice(body);
}

/// A transaction record's body: its zxid, the one it follows, its bytes.
pub fn record_body(zxid: Zxid, prev: Zxid, txn: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(RECORD_HEAD + txn.len());
    body.extend_from_slice(&zxid.0.to_be_bytes());
    body.extend_from_slice(&prev.0.to_be_bytes());
    body.extend_from_slice(txn);
    body
}

/// One transaction as a file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Where its frame starts in the file.
    pub offset: u64,
    /// Its zxid.
    pub zxid: Zxid,
    /// The zxid of the transaction it follows in the backup.
    pub prev: Zxid,
    /// The transaction as the log stores it (`txn::codec`).
    pub txn: Vec<u8>,
}

/// One frame read.
pub enum Next {
    /// A whole frame that passed its checksum.
    Frame {
        /// Where it starts.
        offset: u64,
        /// Its body.
        body: Vec<u8>,
    },
    /// The file ends cleanly after the last frame.
    End {
        /// The file's length.
        len: u64,
    },
}

/// Reads a backup file frame by frame.
pub struct Frames {
    path: PathBuf,
    file: BufReader<File>,
    /// The header.
    pub header: Header,
    offset: u64,
}

impl Frames {
    /// Opens `path`, which must be a backup file of `kind`, and checks its header.
    pub fn open(path: &Path, kind: Kind) -> Result<Frames, FormatError> {
        let file = File::open(path).map_err(io_err(path))?;
        let mut file = BufReader::with_capacity(1 << 16, file);
        let mut head = Vec::with_capacity(HEADER_LEN);
        (&mut file).take(HEADER_LEN as u64).read_to_end(&mut head).map_err(io_err(path))?;
        let header = Header::decode(path, &head, kind)?;
        Ok(Frames { path: path.to_path_buf(), file, header, offset: HEADER_LEN as u64 })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next frame, the clean end, or why neither: a frame cut short is
    /// [`FormatError::Torn`], one failing its checksum [`FormatError::Corrupt`].
    pub fn next_frame(&mut self) -> Result<Next, FormatError> {
        let offset = self.offset;
        let mut head = Vec::with_capacity(FRAME_HEAD);
        (&mut self.file).take(FRAME_HEAD as u64).read_to_end(&mut head).map_err(io_err(&self.path))?;
        if head.is_empty() {
            return Ok(Next::End { len: offset });
        }
        let torn = |reason: String| FormatError::Torn { path: self.path.clone(), offset, reason };
        if head.len() < FRAME_HEAD {
            return Err(torn(format!("{} of a frame's {FRAME_HEAD} header bytes", head.len())));
        }
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let stored = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        if len == 0 {
            // Never written (every record and chunk has a body), though its
            // checksum would pass: zeros to the end are a file a crash grew
            // before its bytes landed, a torn tail; anything else is damage.
            let mut rest = Vec::new();
            self.file.read_to_end(&mut rest).map_err(io_err(&self.path))?;
            if stored == 0 && rest.iter().all(|b| *b == 0) {
                return Err(torn(format!("{} zero bytes to the end of the file", FRAME_HEAD + rest.len())));
            }
            return Err(FormatError::Corrupt { path: self.path.clone(), offset, reason: "an empty frame".into() });
        }
        if len > MAX_FRAME {
            return Err(FormatError::Corrupt {
                path: self.path.clone(),
                offset,
                reason: format!("a frame of {len} bytes (at most {MAX_FRAME} are written)"),
            });
        }
        let mut body = Vec::with_capacity(len);
        (&mut self.file).take(len as u64).read_to_end(&mut body).map_err(io_err(&self.path))?;
        if body.len() < len {
            return Err(torn(format!("{} of the frame's {len} bytes", body.len())));
        }
        let computed = crc32fast::hash(&body);
        if computed != stored {
            return Err(FormatError::Corrupt {
                path: self.path.clone(),
                offset,
                reason: format!("checksum mismatch: stored {stored:08x}, computed {computed:08x}"),
            });
        }
        self.offset += (FRAME_HEAD + len) as u64;
        Ok(Next::Frame { offset, body })
    }

    /// The next transaction record of a transaction file, or None at its clean end.
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        match self.next_frame()? {
            Next::End { .. } => Ok(None),
            Next::Frame { offset, mut body } => {
                if body.len() < RECORD_HEAD {
                    return Err(FormatError::Corrupt {
                        path: self.path.clone(),
                        offset,
                        reason: format!("a record of {} bytes, at least {RECORD_HEAD} needed", body.len()),
                    });
                }
                let word = |at: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&body[at..at + 8]);
                    Zxid(u64::from_be_bytes(b))
                };
                let (zxid, prev) = (word(0), word(8));
                if zxid <= prev {
                    return Err(FormatError::Corrupt {
                        path: self.path.clone(),
                        offset,
                        reason: format!("transaction {zxid} claims to follow {prev}"),
                    });
                }
                let txn = body.split_off(RECORD_HEAD);
                Ok(Some(Record { offset, zxid, prev, txn }))
            }
        }
    }
}

/// Writes `bytes` to `path` durably: to a `.partial` file beside it,
/// synced, renamed over, and the directory synced, so that `path` is either
/// absent or whole.
pub fn write_whole(path: &Path, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), FormatError> {
    let partial = path.with_extension("partial");
    let result = (|| {
        let mut file = std::io::BufWriter::new(File::create(&partial)?);
        write(&mut file)?;
        let file = file.into_inner().map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        std::fs::rename(&partial, path)?;
        sync_dir(path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map_err(io_err(path))
}

/// Syncs the directory holding `path` (a new or renamed name in it is durable after).
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn_file(dir: &Path, records: &[(u64, u64, &[u8])]) -> PathBuf {
        let path = dir.join("t.zkb");
        let mut bytes = Header { kind: Kind::Txns, zxid: Zxid(records[0].1), time_ms: 5 }.encode().to_vec();
        for (zxid, prev, txn) in records {
            frame(&record_body(Zxid(*zxid), Zxid(*prev), txn), &mut bytes);
        }
        std::fs::write(&path, bytes).expect("write");
        path
    }

    fn all(path: &Path) -> Result<Vec<Record>, FormatError> {
        let mut frames = Frames::open(path, Kind::Txns)?;
        let mut out = Vec::new();
        while let Some(r) = frames.next_record()? {
            out.push(r);
        }
        Ok(out)
    }

    #[test]
    fn records_round_trip_with_their_offsets() {
        let dir = tempfile::tempdir().expect("dir");
        let path = txn_file(dir.path(), &[(2, 1, b"one"), (3, 2, b""), (0x2_0000_0001, 3, b"three")]);
        let records = all(&path).expect("read");
        let got: Vec<(u64, u64, &[u8])> = records.iter().map(|r| (r.zxid.0, r.prev.0, &r.txn[..])).collect();
        assert_eq!(got, [(2, 1, &b"one"[..]), (3, 2, &b""[..]), (0x2_0000_0001, 3, &b"three"[..])]);
        assert_eq!(records[0].offset, HEADER_LEN as u64);
        assert_eq!(records[1].offset, (HEADER_LEN + FRAME_HEAD + RECORD_HEAD + 3) as u64);
        let header = Frames::open(&path, Kind::Txns).expect("open").header;
        assert_eq!(header, Header { kind: Kind::Txns, zxid: Zxid(1), time_ms: 5 });
    }

    #[test]
    fn a_torn_tail_names_the_file_and_the_frame_offset() {
        let dir = tempfile::tempdir().expect("dir");
        let path = txn_file(dir.path(), &[(2, 1, b"one"), (3, 2, b"two")]);
        let whole = std::fs::read(&path).expect("read");
        let second = (HEADER_LEN + FRAME_HEAD + RECORD_HEAD + 3) as u64;
        for cut in [whole.len() - 1, second as usize + 3] {
            std::fs::write(&path, &whole[..cut]).expect("cut");
            match all(&path) {
                Err(FormatError::Torn { path: p, offset, .. }) => assert_eq!((p, offset), (path.clone(), second)),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        let message = all(&path).expect_err("torn").to_string();
        assert!(message.contains("t.zkb") && message.contains(&format!("offset {second}")), "{message}");
        // A file a crash grew before its bytes landed ends in zeros: torn, not corrupt.
        let mut grown = whole.clone();
        grown.extend_from_slice(&[0; 40]);
        std::fs::write(&path, &grown).expect("grow");
        match all(&path) {
            Err(FormatError::Torn { offset, .. }) => assert_eq!(offset, whole.len() as u64),
            other => panic!("a zero-filled tail: {other:?}"),
        }
        grown[whole.len() + 20] = 1;
        std::fs::write(&path, &grown).expect("damage");
        assert!(matches!(all(&path), Err(FormatError::Corrupt { .. })), "an empty frame before other bytes is damage");
    }

    #[test]
    fn a_flipped_byte_is_corrupt_at_its_frame() {
        let dir = tempfile::tempdir().expect("dir");
        let path = txn_file(dir.path(), &[(2, 1, b"one"), (3, 2, b"two")]);
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let second = (HEADER_LEN + FRAME_HEAD + RECORD_HEAD + 3) as u64;
        assert!(matches!(all(&path), Err(FormatError::Corrupt { offset, .. }) if offset == second));
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(all(&path), Err(FormatError::Corrupt { offset: 0, .. })), "the header's checksum");
    }

    #[test]
    fn another_version_is_refused_naming_both() {
        let dir = tempfile::tempdir().expect("dir");
        let path = txn_file(dir.path(), &[(2, 1, b"one")]);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[8..12].copy_from_slice(&7u32.to_be_bytes());
        std::fs::write(&path, &bytes).expect("write");
        let e = all(&path).expect_err("refused");
        assert!(matches!(e, FormatError::Version { found: 7, supported: FORMAT_VERSION, .. }), "{e:?}");
        assert!(e.to_string().contains("version 7") && e.to_string().contains("version 1"), "{e}");
        assert!(matches!(Frames::open(&path, Kind::Snapshot), Err(FormatError::Version { .. })));
        std::fs::write(&path, b"PK\x03\x04 not ours").expect("write");
        assert!(matches!(all(&path), Err(FormatError::NotBackup { .. })));
    }

    #[test]
    fn a_record_that_goes_backwards_is_corrupt() {
        let dir = tempfile::tempdir().expect("dir");
        let path = txn_file(dir.path(), &[(5, 5, b"x")]);
        assert!(matches!(all(&path), Err(FormatError::Corrupt { .. })));
    }

    #[test]
    fn a_whole_write_leaves_no_partial_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.zkb");
        write_whole(&path, |w: &mut dyn Write| w.write_all(b"abc")).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"abc");
        let failed =
            write_whole(&dir.path().join("f.zkb"), |_: &mut dyn Write| Err(std::io::Error::other("disk full")));
        assert!(matches!(failed, Err(FormatError::Io { .. })));
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("s.zkb")]);
    }
}
