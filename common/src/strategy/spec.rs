//! Which strategy a run uses, with exactly the hyper-parameters it uses: checked from a file's
//! sections once ([`StrategySpec::check`]), then asked for its two halves and what the run's
//! checks need. Every question goes to the strategy's own module through
//! [`StrategyParams`]; nothing here names a strategy.

use std::path::Path;

use super::model_spec::ModelSpec;
use super::robust::RobustHyper;
use super::sections::{Checked, Sections};
use super::{ClientStrategy, ModelKind, ServerStrategy, StrategyKind, StrategySpec};
use crate::data::images::{BitShard, Holdout, PixelShard, ShardSizes};
use crate::data::{DataShape, DataSpec, Shard};
use crate::params::{ParamError, ParamResult};
use crate::wire::Compression;
use crate::{ClientId, FlintError, Result};

impl StrategySpec {
    /// The model `kind` trains: the one it implies, or for a baseline the one `given`.
    pub fn model_of(kind: StrategyKind, given: Option<ModelKind>) -> ParamResult<ModelKind> {
        match (kind.facts().model, given) {
            (Some(i), Some(g)) if i != g => Err(ParamError::Inconsistent(format!(
                "strategy {} trains {}, not model {}",
                kind.name(),
                i.name(),
                g.name()
            ))),
            (Some(m), _) | (None, Some(m)) => Ok(m),
            (None, None) => Err(ParamError::Inconsistent(format!(
                "strategy {} needs a model: set model = \"logreg\", \"fcm\", \"tm\" or \"cnn\"",
                kind.name()
            ))),
        }
    }

    /// The strategy `kind`, training `model` (see [`StrategySpec::model_of`]) on data of
    /// `shape`, with its settings from `s`: checked once, never changed after.
    pub fn check(
        kind: StrategyKind,
        model: ModelKind,
        s: &Sections,
        shape: &DataShape,
    ) -> ParamResult<Self> {
        let c = Checked::of(s, kind.facts().banks, shape)?;
        if !c.robust.is_plain() && !kind.facts().averages {
            return Err(ParamError::Inconsistent(format!(
                "[robust] changes how updates are averaged, and strategy {} averages none",
                kind.name()
            )));
        }
        let spec = kind.check_spec(model, &c, s, shape)?;
        check_dp(&spec, &c)?;
        Ok(spec)
    }

    /// The sections this strategy reads, every key as it reads it; the others `None`: what a
    /// run's resolved file writes.
    pub fn resolved_sections(&self, written: &Sections) -> Sections {
        let mut out = self.model().resolved_sections(written);
        // Written only where it changes something: the papers' mean leaves the file as it was,
        // and a default cap (a share of what is combined) comes back when the file is read.
        out.robust = written
            .robust
            .filter(|r| !r.is_plain() && r.equal_shares.is_none() && self.kind().facts().averages);
        self.params().resolve(written, &mut out);
        out
    }

    pub fn name(&self) -> String {
        self.kind().name()
    }

    /// The model every client trains.
    pub fn model(&self) -> ModelSpec {
        self.params().model()
    }

    /// Clauses per class of the run's Tsetlin Machine (0 without one): the weights a coded
    /// `ClassWeights` holds.
    pub fn clauses(&self) -> usize {
        self.model().clauses()
    }

    /// The most encoded bytes one client's update may take in a run of this shape: checked at
    /// an upload's header, before a byte of it is buffered (sizes come from the run, never from
    /// the sender). Twice a bound on the largest update the model can produce, so no honest
    /// update comes near it.
    pub fn max_update_bytes(&self, features: usize, classes: usize) -> u64 {
        2 * (self.params().update_bytes_bound(features, classes) + 1024)
    }

    /// The most encoded bytes one download may take in a run of this shape, where the client
    /// sets its limit: the one-shot strategies send every client's machine (the ensemble, and
    /// FedTMOS's baselines) beside its server models; the others one model.
    pub fn max_download_bytes(&self, features: usize, classes: usize, clients: usize) -> u64 {
        let models = self.params().models_per_download(clients);
        self.max_update_bytes(features, classes)
            .saturating_mul(models as u64)
    }

    /// Whether every client must declare its compute power (AHP's compute-ghz criterion).
    pub fn needs_compute_ghz(&self) -> bool {
        self.params().needs_compute_ghz()
    }

    /// The server half; `seed` is the run's (FedTMOS seeds its k-means from it), `robust` how
    /// it averages (the checks refuse anything but the plain mean where nothing is averaged).
    /// A strategy whose server holds images (FLIS) reads them from `data` below its directory.
    pub fn server(
        &self,
        classes: usize,
        seed: u64,
        robust: RobustHyper,
        data: Option<(&DataSpec, &Path)>,
    ) -> Result<Box<dyn ServerStrategy>> {
        let params = self.params();
        let Some(per_class) = params.server_images_per_class() else {
            return Ok(params.server(classes, seed, robust));
        };
        let Some((spec, dir)) = data else {
            return Err(FlintError::Config(format!(
                "strategy {}'s server holds images of the data, and was given no data directory",
                self.name()
            )));
        };
        let pool = spec.load_pixels(dir).map_err(|e| {
            FlintError::Config(format!(
                "strategy {}'s server holds images of the data, read below {} (flint server \
                 --data-dir or FLINT_DATA_DIR): {e}",
                self.name(),
                dir.display()
            ))
        })?;
        let held = pool.test.first_per_class(per_class);
        if held.is_empty() {
            return Err(FlintError::Config(format!(
                "the test split below {} has no images for the server to hold",
                dir.display()
            )));
        }
        Ok(params.server_holding(classes, seed, robust, held))
    }

    /// The client half of a model that trains on a table (logistic regression, FCMs).
    pub fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        self.params().table_client(features, classes)
    }

    /// The client half of a model that trains on booleanized images; its machine's initial
    /// state derives from (seed, client). `clients`: the run's, bounding what a download holds.
    pub fn bits_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        clients: usize,
    ) -> Result<Box<dyn ClientStrategy<BitShard>>> {
        self.params()
            .bits_client(features, classes, seed, client, clients)
    }

    /// The client half of a model that trains on images as bytes (a neural network).
    pub fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        self.params()
            .pixels_client(features, classes, seed, client, clients)
    }

    /// `fedtmos.copy_data_epoch`: FedTMOS's and the ensemble's clients first fit one epoch on
    /// another client's rows (the code's data leak).
    pub fn copy_data_epoch(&self) -> bool {
        self.params().copy_data_epoch()
    }

    /// Whether a client's model after a round is the download alone, nothing of its own
    /// training kept beside it, so a replayed download can be measured by a client prepared
    /// afresh: not TPFL (its clause bank stays local), Blended FL (it blends the aggregate with
    /// its own map) nor the baselines (no download).
    pub fn model_is_the_download(&self) -> bool {
        self.params().model_is_the_download()
    }

    /// The knobs a grid's table tells runs of this strategy apart by, in one line: `images`,
    /// whether it reads images, and the run's `compression`.
    pub fn setting(&self, images: bool, compression: Compression) -> String {
        self.params().setting(images, compression)
    }

    /// The official test images every client's composite is also measured on, held by client
    /// 1 (FedTMOS's global test set).
    pub fn global_test_rows(&self) -> Option<std::ops::Range<usize>> {
        self.model().global_test_rows()
    }

    /// What an image client's shard holds beyond its `train` rows (TPFL: test and confidence
    /// rows, drawn as its evaluation says); `None` for models that do not read images.
    pub fn image_shard(&self, train: usize) -> Option<(ShardSizes, Holdout)> {
        self.model().image_shard(train)
    }
}

/// `[dp]` only where the strategy clips and noises, and the central mechanism only over the
/// plain mean: a median or a clip to the round's own median distance depends on every client's
/// update, which the sensitivity bound does not cover.
fn check_dp(spec: &StrategySpec, c: &Checked) -> ParamResult<()> {
    use super::privacy::Mechanism;
    if c.dp.is_off() {
        return Ok(());
    }
    if !spec.params().takes_dp() {
        return Err(ParamError::Inconsistent(format!(
            "[dp] applies to strategies fedavg, fedavg-ahp, tpfl, blind-fcm, blended-fcm, \
             fedavg-cnn, fedprox and ifca; strategy {} does not clip or noise its updates",
            spec.name()
        )));
    }

    if c.dp.mechanism == Mechanism::Central && !c.robust.is_plain() {
        return Err(ParamError::Inconsistent(
            "dp.mechanism = \"central\" noises the plain weighted mean; [robust] would change it \
             after the clip (remove one of the two)"
                .into(),
        ));
    }
    Ok(())
}

impl StrategyKind {
    pub fn name(self) -> String {
        crate::params::name_of(&self)
    }

    /// FedTMOS's family: convolutional multi-class machines, which read a table's row as one
    /// patch (a bank of clauses per class).
    pub fn reads_rows_as_patches(self) -> bool {
        self.facts().banks == crate::model::tm::ClauseBanks::PerClass
    }
}
