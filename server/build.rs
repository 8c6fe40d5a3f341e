// Generates the server half of flint.v1.Aggregator over the message types of flint-common, and
// the encoded descriptor set that gRPC reflection serves.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = "../proto";
    println!("cargo:rerun-if-changed={proto_root}");
    let fds = protox::compile(["flint/v1/aggregator.proto"], [proto_root])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("flint_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".flint.v1", "::flint_common::wire::proto")
        .compile_fds(fds)?;
    Ok(())
}
