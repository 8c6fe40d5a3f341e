//! Updates travel as a header and slices of the encoded payload, each at most [`MAX_CHUNK`]
//! bytes, so no model ever reaches a message size limit.

use prost::Message;

use super::proto::update_chunk::Part;
use super::proto::{Payload, UpdateChunk, UpdateHeader};
use crate::{FlintError, Result};

pub const MAX_CHUNK: usize = 1 << 20;

/// The messages of one upload: the header first, then the data slices.
pub fn split(mut header: UpdateHeader, payload: &Payload, chunk: usize) -> Vec<UpdateChunk> {
    let bytes = payload.encode_to_vec();
    header.payload_len = bytes.len() as u64;
    let mut out = vec![UpdateChunk {
        part: Some(Part::Header(header)),
    }];
    out.extend(
        bytes
            .chunks(chunk.clamp(1, MAX_CHUNK))
            .map(|c| UpdateChunk {
                part: Some(Part::Data(c.to_vec())),
            }),
    );
    out
}

/// Rebuilds a payload from received chunks, refusing anything out of shape.
#[derive(Debug, Default)]
pub struct Reassembler {
    header: Option<UpdateHeader>,
    data: Vec<u8>,
}

impl Reassembler {
    /// Takes one chunk; returns the header when this chunk was it.
    pub fn push(&mut self, chunk: UpdateChunk) -> Result<Option<&UpdateHeader>> {
        let bad = |m: String| Err(FlintError::InvalidUpdate(m));
        match (chunk.part, &self.header) {
            (None, _) => bad("empty update chunk".into()),
            (Some(Part::Header(h)), None) => {
                if h.payload_len > 1 << 34 {
                    return bad(format!(
                        "payload_len {} is beyond any model Flint sends",
                        h.payload_len
                    ));
                }
                self.header = Some(h);
                Ok(self.header.as_ref())
            }
            (Some(Part::Header(_)), Some(_)) => bad("a second header in one update".into()),
            (Some(Part::Data(_)), None) => bad("update data before its header".into()),
            (Some(Part::Data(d)), Some(h)) => {
                if d.len() > MAX_CHUNK {
                    return bad(format!(
                        "a chunk of {} bytes, above the 1 MiB limit",
                        d.len()
                    ));
                }
                if (self.data.len() + d.len()) as u64 > h.payload_len {
                    return bad(format!(
                        "more data than the header's payload_len of {}",
                        h.payload_len
                    ));
                }
                self.data.extend_from_slice(&d);
                Ok(None)
            }
        }
    }

    pub fn header(&self) -> Option<&UpdateHeader> {
        self.header.as_ref()
    }

    /// The decoded payload, once the stream has ended.
    pub fn finish(self) -> Result<(UpdateHeader, Payload)> {
        let header = self
            .header
            .ok_or_else(|| FlintError::InvalidUpdate("update without a header".into()))?;
        if self.data.len() as u64 != header.payload_len {
            return Err(FlintError::InvalidUpdate(format!(
                "update ended after {} of {} payload bytes",
                self.data.len(),
                header.payload_len
            )));
        }
        let payload = Payload::decode(self.data.as_slice())
            .map_err(|e| FlintError::InvalidUpdate(format!("payload does not decode: {e}")))?;
        Ok((header, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proto::LinearModel;
    use crate::wire::proto::payload::Kind;

    fn model(n: usize) -> Payload {
        Payload {
            kind: Some(Kind::LinearModel(LinearModel {
                weights: (0..n).map(|i| i as f32).collect(),
                bias: 1.0,
            })),
        }
    }

    #[test]
    fn split_then_reassemble_round_trips() {
        let p = model(1000);
        let chunks = split(UpdateHeader::default(), &p, 512);
        assert!(chunks.len() > 3);
        let mut r = Reassembler::default();
        for c in chunks {
            r.push(c).unwrap();
        }
        let (h, back) = r.finish().unwrap();
        assert_eq!(back, p);
        assert_eq!(h.payload_len as usize, p.encoded_len());
    }

    #[test]
    fn out_of_shape_streams_are_refused() {
        let p = model(10);
        let mut chunks = split(UpdateHeader::default(), &p, 8);
        let mut r = Reassembler::default();
        assert!(
            r.push(chunks.remove(1))
                .unwrap_err()
                .to_string()
                .contains("before its header")
        );
        let mut r = Reassembler::default();
        r.push(chunks.remove(0)).unwrap();
        r.push(chunks.remove(0)).unwrap();
        assert!(
            r.finish()
                .unwrap_err()
                .to_string()
                .contains("ended after 8 of")
        );
        let err = Reassembler::default().finish().unwrap_err().to_string();
        assert!(err.contains("without a header"), "{err}");
    }
}
