//! What the server and client shells share and the core must not hold: I/O wrappers that count
//! bytes without touching the logic (`meter`, linkerd2-proxy's `SensorIo` in its own crate),
//! TLS and its throwaway PKI, request bodies that end with their last frame (`end_stream`),
//! SIGTERM/SIGINT for processes that may be PID 1, logging, and the wire's compression as
//! tonic's encoding.

pub mod compression;
pub mod end_stream;
pub mod logging;
pub mod meter;
pub mod signal;
pub mod tls;
