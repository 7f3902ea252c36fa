//! Generates the tonic/prost types from `proto/surge.proto` with protox, a pure-Rust
//! protobuf compiler, so a fresh machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/surge.proto");
    let fds = protox::compile(["proto/surge.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
