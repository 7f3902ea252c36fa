//! Generates the tonic/prost types from `proto/surge.proto` with protox, a pure-Rust
//! protobuf compiler, so a fresh machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/surge.proto");
    let fds = protox::compile(["proto/surge.proto"], ["proto"])?;
    // Row fields decoded as `Bytes` borrowed from the received batch, not copied into a
    // vector or string of their own: a row from the wire allocates nothing (D80).
    // Messages are decoded from their bytes frozen whole (D82, `codec.rs`).
    // `Prepare` carries a whole `Workload` (about 950 bytes); boxed, every other message
    // of a session's channels takes a slot of tens of bytes, not of a kilobyte (D97).
    tonic_prost_build::configure()
        .boxed(".surge.v1.CoordinatorMsg.msg.prepare")
        .bytes(".surge.v1.Row.itl_us")
        .bytes(".surge.v1.Row.response_id")
        .codec_path("crate::codec::FrozenCodec")
        .compile_fds(fds)?;
    Ok(())
}
