// Generates the server half of flint.v1.Aggregator over the message types of flint-common, and
// the encoded descriptor set that gRPC reflection serves.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    git_revision();
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

/// `FLINT_GIT_REVISION`, the commit this build's checkout is at (empty outside git), for the
/// provenance of results.json. Rebuilt when HEAD moves, not on every edit.
fn git_revision() {
    // Only paths that exist: cargo reruns the script on every build for one that does not (a
    // packed ref, a worktree's `.git` file).
    let git = std::path::Path::new("../.git");
    let head = git.join("HEAD");
    let watch = |p: &std::path::Path| {
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    };
    watch(&head);
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(reference) = text.trim().strip_prefix("ref: ")
    {
        watch(&git.join(reference));
        watch(&git.join("packed-refs"));
    }
    let revision = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=FLINT_GIT_REVISION={revision}");
}
