//! Generates the tonic/prost code for the workspace's `proto/*.proto` without
//! a system `protoc`: `protox` parses the files in pure Rust and hands a
//! descriptor set to tonic.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The .proto files stay at the workspace's top level, where readers look for them.
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files: Vec<PathBuf> = ["client.proto", "peer.proto", "admin.proto"].iter().map(|f| dir.join(f)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&dir])?;
    // Service stubs for servers only when asked for: a client needs none.
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    tonic_prost_build::configure().build_server(server).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
