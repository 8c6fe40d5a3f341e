//! Reading received updates, apart from the strategy that aggregates them: a decoder holds only
//! what the run's configuration fixes (and, for TPFL, the weights sent so far), so the shell
//! runs it off the async threads and outside the round state's lock. The codes cost
//! milliseconds a machine: a ten-class FedTMOS upload is ~14 ms to decode and check.

use crate::wire::proto::Payload;
use crate::wire::{self, TmShape, Update};
use crate::{ClientId, Result};

/// Reads one received update, checking it against the run: the only place a received payload
/// is read. A refused update changes no state.
pub trait UpdateDecoder: Send + Sync {
    fn decode(&self, client: ClientId, features: usize, update: &Payload) -> Result<Update>;
    /// Whether a decode may take milliseconds (the machines' codes: their cost follows the
    /// run's machine, not the payload's size), so it belongs on a blocking thread. The others
    /// read a vector of weights each (a TPFL winner of 300: 22.3 µs, `cargo bench -p
    /// flint-common --bench wire`) and are read where they arrive.
    fn is_costly(&self) -> bool {
        false
    }
}

/// FedAvg's logistic regressions, `classes` wide.
pub struct LinearDecoder {
    pub classes: usize,
}

impl UpdateDecoder for LinearDecoder {
    fn decode(&self, _client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        wire::decode_linear(update, features, self.classes).map(Update::Linear)
    }
}

/// Blind FL's maps with their local metrics.
pub struct MapDecoder {
    pub classes: usize,
}

impl UpdateDecoder for MapDecoder {
    fn decode(&self, _client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        let (map, local) = wire::decode_map(update, features, self.classes)?;
        Ok(Update::Map { map, local })
    }
}

/// FedTMOS, its ensemble and FedTM: a client's machines of the run's shape.
pub struct TmDecoder {
    pub shape: TmShape,
}

impl UpdateDecoder for TmDecoder {
    fn decode(&self, _client: ClientId, _features: usize, update: &Payload) -> Result<Update> {
        wire::decode_tm_upload(update, self.shape).map(Update::Tm)
    }

    /// Every class's include bits decoded and encoded again (the canonical check): 1.4 ms for
    /// 200 clauses of 142 literals, whatever the code's length.
    fn is_costly(&self) -> bool {
        true
    }
}
