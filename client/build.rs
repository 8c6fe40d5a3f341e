// Generates the client half of flint.v1.Aggregator over the message types of flint-common.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = "../proto";
    println!("cargo:rerun-if-changed={proto_root}");
    let fds = protox::compile(["flint/v1/aggregator.proto"], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .extern_path(".flint.v1", "::flint_common::wire::proto")
        .compile_fds(fds)?;
    Ok(())
}
