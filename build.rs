//! Generates the tonic/prost code for `proto/*.proto` without a system `protoc`:
//! `protox` parses the files in pure Rust and hands a descriptor set to tonic.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/client.proto", "proto/peer.proto", "proto/admin.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
