//! What FedTMOS, its ensemble and FedTM share: the upload a client makes of its machine, a
//! machine rebuilt from what the wire carries, and the class sums of several machines.

use std::collections::BTreeMap;

use super::super::unexpected;
use crate::data::booleanize::BitRows;
use crate::metrics::gini_index;
use crate::model::tm::composite::BatchSums;
use crate::model::tm::conv::{ConvTm, PatchSpec};
use crate::model::tm::parts::{ClassParts, IncludeBits, TmParts, TmUpload};
use crate::model::tm::{ExcludedAt, MultiClassTm, TmHyper};
use crate::parallel;
use crate::wire::Update;
use crate::{ClientId, FlintError, Result};

pub(crate) fn tm_uploads(
    updates: &BTreeMap<ClientId, Update>,
) -> Result<BTreeMap<ClientId, &TmUpload>> {
    updates
        .iter()
        .map(|(&id, u)| match u {
            Update::Tm(t) => Ok((id, t)),
            other => Err(unexpected("tm_upload", other)),
        })
        .collect()
}

/// What every FedTMOS-family client needs to rebuild machines of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rebuild {
    pub(super) tm: TmHyper,
    pub(super) spec: PatchSpec,
    pub(super) classes: usize,
    pub(super) excluded_at: ExcludedAt,
}

impl Rebuild {
    pub(crate) fn machine(&self, parts: &TmParts) -> Result<ConvTm> {
        let given: Vec<(u32, &[u32], &[u8])> = parts
            .classes
            .iter()
            .map(|(&c, p)| (c, &p.weights[..], &p.include.0[..]))
            .collect();
        MultiClassTm::rebuild(
            self.tm,
            self.spec.patch_features(),
            self.classes,
            &given,
            self.excluded_at,
        )
        .and_then(|tm| ConvTm::from_multiclass(self.spec, tm))
        .map_err(|e| FlintError::InvalidUpdate(format!("download: {e}")))
    }

    /// A server model, whose weights are in units of 1/`resolution` (step 2): its margin, which
    /// the code's reading clamps the sums to, is `resolution` · T.
    pub(crate) fn server_model(&self, parts: &TmParts, resolution: u32) -> Result<ConvTm> {
        let r = i32::try_from(resolution).unwrap_or(i32::MAX);
        let tm = TmHyper {
            t: self.tm.t.saturating_mul(r),
            ..self.tm
        };
        Rebuild { tm, ..*self }.machine(parts)
    }
}

/// The upload of FedTMOS, FedTM and the ensemble (§4.2.1): for every class the client holds,
/// its weights, include bits and samples; and the client's Gini index.
pub(crate) fn upload_of(tm: &ConvTm, counts: &[u64]) -> Result<TmUpload> {
    let tm = tm
        .multiclass()
        .ok_or_else(|| FlintError::Model("fedtmos trains the multi-class form".into()))?;
    let classes = counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, &n)| {
            let parts = ClassParts {
                weights: tm.class_weights(c).to_vec(),
                include: IncludeBits(tm.include_bits(c)),
                samples: n,
            };
            (c as u32, parts)
        })
        .collect();
    Ok(TmUpload {
        parts: TmParts { classes },
        gini_index: gini_index(counts),
    })
}

/// Each machine's class sums over `data`, on as many threads as there are cores.
pub(super) fn sums_of(machines: &[&ConvTm], data: &BitRows) -> Vec<BatchSums> {
    parallel::map(machines, parallel::cores(), |m| BatchSums::of(*m, data))
}
