// Generates the message types of proto/flint/v1 with protox (no protoc needed).
// The service halves are generated in the server and client crates.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = "../proto";
    println!("cargo:rerun-if-changed={proto_root}");
    let fds = protox::compile(["flint/v1/aggregator.proto"], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
