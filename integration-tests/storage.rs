//! The store under real processes: `kill -9` while writing, and what the
//! system calls show of each acknowledged flush (under strace). Each test
//! re-runs this binary as its writer child, by its full test name.

mod storage_crash;
mod storage_fsync;
