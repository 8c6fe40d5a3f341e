//! Updates travel as a header and slices of the encoded payload, each at most [`MAX_CHUNK`]
//! bytes, so no model ever reaches a message size limit.

use prost::Message;

use super::proto::update_chunk::Part;
use super::proto::{Payload, UpdateChunk, UpdateHeader};
use crate::{FlintError, Result};

pub const MAX_CHUNK: usize = 1 << 20;

/// The most evaluation reports an update's header carries (a client with more sends the rest
/// with ReportEval): the model on the client's own test split, and on the shared test set with
/// its baselines.
pub const MAX_CARRIED_REPORTS: usize = 16;

/// The messages of one upload: the header first, then the data slices.
pub fn split(mut header: UpdateHeader, payload: &Payload, chunk: usize) -> Vec<UpdateChunk> {
    let bytes = payload.encode_to_vec();
    header.payload_len = bytes.len() as u64;
    header.payload_crc32 = crc32fast::hash(&bytes);
    let mut out = vec![UpdateChunk {
        part: Some(Part::Header(header)),
        offset: 0,
    }];
    let size = chunk.clamp(1, MAX_CHUNK);
    out.extend(bytes.chunks(size).enumerate().map(|(i, c)| UpdateChunk {
        part: Some(Part::Data(c.to_vec())),
        offset: (i * size) as u64,
    }));
    out
}

/// Rebuilds a payload from received chunks, refusing anything out of shape. Nothing is
/// buffered before the header has been checked against `limit` (the run's largest update).
#[derive(Debug)]
pub struct Reassembler {
    limit: u64,
    header: Option<UpdateHeader>,
    data: Vec<u8>,
}

impl Reassembler {
    /// Takes updates of at most `limit` encoded bytes.
    pub fn new(limit: u64) -> Reassembler {
        Reassembler {
            limit,
            header: None,
            data: Vec::new(),
        }
    }

    /// Takes one chunk; returns the header when this chunk was it.
    pub fn push(&mut self, chunk: UpdateChunk) -> Result<Option<&UpdateHeader>> {
        let bad = |m: String| Err(FlintError::InvalidUpdate(m));
        match (chunk.part, &self.header) {
            (None, _) => bad("empty update chunk".into()),
            (Some(Part::Header(h)), None) => {
                // The limit is not named: the caller has not yet proved it belongs to the run.
                if h.payload_len > self.limit {
                    return bad(format!(
                        "payload_len {} is above this run's limit for one update (from its model's shape)",
                        h.payload_len
                    ));
                }
                if chunk.offset != 0 {
                    return bad("a header with an offset".into());
                }
                if h.reports.len() > MAX_CARRIED_REPORTS {
                    return bad(format!(
                        "{} evaluation reports in one header; at most {MAX_CARRIED_REPORTS}",
                        h.reports.len()
                    ));
                }
                self.header = Some(h);
                Ok(self.header.as_ref())
            }
            (Some(Part::Header(_)), Some(_)) => bad("a second header in one update".into()),
            (Some(Part::Data(_)), None) => bad("update data before its header".into()),
            (Some(Part::Data(d)), Some(h)) => {
                if d.is_empty() {
                    return bad("an empty data chunk".into());
                }
                if d.len() > MAX_CHUNK {
                    return bad(format!(
                        "a chunk of {} bytes, above the 1 MiB limit",
                        d.len()
                    ));
                }
                if chunk.offset != self.data.len() as u64 {
                    return bad(format!(
                        "a chunk for offset {} where offset {} was due: chunks out of order or lost",
                        chunk.offset,
                        self.data.len()
                    ));
                }
                if (self.data.len() + d.len()) as u64 > h.payload_len {
                    return bad(format!(
                        "more data than the header's payload_len of {}",
                        h.payload_len
                    ));
                }
                // Grown as data arrives, never to a size the sender declared.
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
        let crc = crc32fast::hash(&self.data);
        if crc != header.payload_crc32 {
            return Err(FlintError::InvalidUpdate(format!(
                "payload CRC-32 {crc:08x} differs from the header's {:08x}: the update was damaged or reordered",
                header.payload_crc32
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
                class_biases: Vec::new(),
            })),
        }
    }

    #[test]
    fn split_then_reassemble_round_trips() {
        let p = model(1000);
        let chunks = split(UpdateHeader::default(), &p, 512);
        assert!(chunks.len() > 3);
        let mut r = Reassembler::new(1 << 20);
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
        let mut r = Reassembler::new(1 << 20);
        assert!(
            r.push(chunks.remove(1))
                .unwrap_err()
                .to_string()
                .contains("before its header")
        );
        let mut chunks = split(UpdateHeader::default(), &p, 8);
        let mut r = Reassembler::new(1 << 20);
        r.push(chunks.remove(0)).unwrap();
        r.push(chunks.remove(0)).unwrap();
        assert!(
            r.finish()
                .unwrap_err()
                .to_string()
                .contains("ended after 8 of")
        );
        let err = Reassembler::new(1 << 20).finish().unwrap_err().to_string();
        assert!(err.contains("without a header"), "{err}");
    }

    fn refusal(chunks: Vec<UpdateChunk>, limit: u64) -> String {
        let mut r = Reassembler::new(limit);
        for c in chunks {
            if let Err(e) = r.push(c) {
                return e.to_string();
            }
        }
        r.finish().unwrap_err().to_string()
    }

    /// Two equal-size chunks swapped in transit were once taken as another model.
    #[test]
    fn swapped_damaged_or_oversize_updates_are_refused() {
        let p = model(40);
        let chunks = split(UpdateHeader::default(), &p, 16);
        let mut swapped = chunks.clone();
        swapped.swap(1, 2);
        let e = refusal(swapped, 1 << 20);
        assert!(e.contains("for offset 16 where offset 0 was due"), "{e}");
        // Swapped with their offsets too: only the checksum sees it.
        let mut relabelled = chunks.clone();
        let (a, b) = (relabelled[1].part.clone(), relabelled[2].part.clone());
        relabelled[1].part = b;
        relabelled[2].part = a;
        let e = refusal(relabelled, 1 << 20);
        assert!(e.contains("damaged or reordered"), "{e}");
        let mut damaged = chunks.clone();
        if let Some(Part::Data(d)) = &mut damaged[2].part {
            d[3] ^= 1;
        }
        assert!(refusal(damaged, 1 << 20).contains("CRC-32"));
        let len = p.encoded_len() as u64;
        let e = refusal(chunks.clone(), len - 1);
        assert!(
            e.contains(&format!("payload_len {len} is above this run's limit")),
            "{e}"
        );
        let mut empty = chunks.clone();
        empty.insert(
            2,
            UpdateChunk {
                part: Some(Part::Data(Vec::new())),
                offset: 8,
            },
        );
        assert!(refusal(empty, 1 << 20).contains("an empty data chunk"));
        let mut r = Reassembler::new(len);
        for c in chunks {
            r.push(c).unwrap();
        }
        assert_eq!(r.finish().unwrap().1, p);
    }
}
