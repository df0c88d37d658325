//! Feeds arbitrary bytes to every wire decoder, as a connection meets them
//! (four-letter word, ConnectRequest frame, request frames), and checks that
//! whatever decodes survives a round trip through the client encoder.
//! The same function runs under proptest on stable (`crates/core/src/wire/tests/robustness.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(finding) = zabkeeper_core::wire::fuzz_decode(data) {
        panic!("{finding}");
    }
});
