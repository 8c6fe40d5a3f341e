//! A client's own machine in the FedTMOS family: how FedTMOS, its ensemble and FedTM start it,
//! train it and upload it.

use super::machines::{Rebuild, upload_of};
use super::section::FedTmosHyper;
use crate::data::booleanize::BitRows;
use crate::data::images::BitShard;
use crate::model::tm::conv::ConvTm;
use crate::model::tm::{FeedbackMasks, TmHyper};
use crate::rng::{FlintRng, derive_rng};
use crate::wire::proto::Payload;
use crate::wire::{self, TmShape};
use crate::{ClientId, FlintError, Result};

pub(crate) struct LocalMachine {
    pub(crate) tm: ConvTm,
    masks: FeedbackMasks,
    /// What every exchanged machine of the run looks like.
    pub(crate) shape: TmShape,
    /// How a machine the wire carries becomes one this client predicts with.
    pub(crate) rebuild: Rebuild,
}

impl LocalMachine {
    /// A fresh machine, its feedback masks drawn from (seed, client): every client starts from
    /// the same state, and only the data and the feedback draws differ.
    pub(crate) fn new(
        tm: TmHyper,
        hyper: &FedTmosHyper,
        classes: usize,
        seed: u64,
        client: ClientId,
    ) -> Result<LocalMachine> {
        let mut rng = derive_rng(seed, "tm-init", client);
        Ok(LocalMachine {
            tm: ConvTm::new(tm, hyper.patch_spec(), classes).map_err(FlintError::Model)?,
            masks: FeedbackMasks::new(tm.s, &mut rng),
            shape: hyper.shape(&tm, classes),
            rebuild: hyper.rebuild(tm, classes),
        })
    }

    pub(crate) fn masks(&self) -> &FeedbackMasks {
        &self.masks
    }

    /// Masks of this machine's s, as a checkpoint holds them.
    pub(crate) fn set_masks(&mut self, masks: FeedbackMasks) -> Result<()> {
        if !masks.same_draws(&self.masks) {
            return Err(crate::strategy::resume::bad(
                "the feedback masks are not this run's",
            ));
        }
        self.masks = masks;
        Ok(())
    }

    /// One epoch on rows that are not the client's own (the published code's leak).
    pub(crate) fn prefit(&mut self, hyper: &FedTmosHyper, rows: &BitRows, rng: &mut FlintRng) {
        hyper.fit_epoch(&mut self.tm, rows, &mut self.masks, rng);
    }

    /// `local_epochs` epochs on the client's training rows, then the upload of the classes it
    /// holds (§4.2.1).
    pub(crate) fn train_and_upload(
        &mut self,
        hyper: &FedTmosHyper,
        shard: &BitShard,
        rng: &mut FlintRng,
    ) -> Result<Payload> {
        hyper.train_locally(&mut self.tm, &shard.train, &mut self.masks, rng);
        let upload = upload_of(&self.tm, &shard.train_class_counts())?;
        Ok(wire::encode_tm_upload(&upload, self.shape))
    }
}
