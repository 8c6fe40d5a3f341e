//! The experiment's `wire.compression` as tonic's encoding.

use flint_common::wire::Compression;
use tonic::codec::CompressionEncoding;

/// The encoding both ends enable (`None`: messages go uncompressed).
pub fn encoding(compression: Compression) -> Option<CompressionEncoding> {
    match compression {
        Compression::None => None,
        Compression::Gzip => Some(CompressionEncoding::Gzip),
        Compression::Zstd => Some(CompressionEncoding::Zstd),
    }
}
