//! `[fedtmos]`, its presets and its checked settings, the server's among them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machines::Rebuild;
use crate::data::booleanize::BitRows;
use crate::model::tm::composite::{CompositeOptions, Normalization};
use crate::model::tm::conv::{ConvTm, PatchSpec};
use crate::model::tm::{ExcludedAt, FeedbackMasks, TmHyper};
use crate::params::{ParamError, ParamResult, at_least, positive, require};
use crate::rng::FlintRng;
use crate::wire::{TmShape, WeightCoding};

/// How the include bits of a class's contributors are ranked for the top K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BitsBy {
    /// The paper (§4.2.2): the clients with the most samples of the class.
    Samples,
    /// The code: the clients with the largest mean scaled weight of the class.
    MeanWeight,
}

/// The order of a client's rows within each local epoch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum EpochOrder {
    /// Drawn anew every epoch (the default).
    #[default]
    Shuffled,
    /// Class after class, the same every epoch: the published code fits on its rows as its
    /// split slices them, never shuffled (docs/papers/fedtmos.md §3). It exists to measure what
    /// that order gives the machines.
    ByClass,
    /// The same rows sorted by class, cut in two halves taken alternately: the code's `fit` on
    /// two OpenMP threads, whose static schedule gives each thread a half, both updating one
    /// machine at once (docs/papers/fedtmos.md §3), as one stream can approach it.
    ByClassTwoThreads,
}

impl EpochOrder {
    fn is_shuffled(&self) -> bool {
        *self == EpochOrder::Shuffled
    }
}

/// Under whose weights the fill step (step 5) adds a class.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum FillFrom {
    /// A client of the cluster that holds the class (the code's bug fixed; the default).
    #[default]
    Holder,
    /// The cluster's first client, whether it holds the class or not; one without a clustered
    /// vector of it (it lacks the class, or the filter dropped it) adds zero weights and no
    /// include bits (the code, docs/papers/fedtmos.md §10, for a client that lacks it).
    ClusterFirst,
}

impl FillFrom {
    fn is_holder(&self) -> bool {
        *self == FillFrom::Holder
    }
}

/// The server's settings (checked).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosServerParams {
    /// φ: server models.
    pub models: usize,
    /// σ: the mean Gini index above which weights are scaled by it.
    pub sigma: f64,
    /// k of k-means, at most (it is also at most the vectors − 1).
    pub k_max: usize,
    /// K of TopK: contributors whose include bits are ORed.
    pub top_k: usize,
    pub bits_by: BitsBy,
    /// The code's filter: drop vectors whose mean scaled weight floors to 0.
    pub filter: bool,
    /// R: scaled weights are kept in units of 1/R, ⌊R · x · θ · n_c / n⌋ (1: the code's
    /// integer truncation; see [`FedTmosSection::weight_resolution`]). Left out of this record
    /// at 1, as before the key existed.
    #[serde(skip_serializing_if = "is_code_resolution")]
    pub weight_resolution: u32,
    /// Left out of this record while the default, as before the key existed.
    #[serde(skip_serializing_if = "FillFrom::is_holder")]
    pub fill_from: FillFrom,
}

/// Defaults of the `[fedtmos]` keys left unset.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// The paper's reading with the one change the measurements favour (docs/RESULTS.md,
    /// "FedTMOS's presets"): the largest holder's include bits (K = 1) instead of the top two's
    /// OR. Bits by samples, no filter, eq. 3, excluded automata at the last exclude state.
    #[default]
    Recommended,
    /// The paper as written: top-2 include bits by samples, no filter, eq. 3's per-sample
    /// composite without clamp, rebuilt machines' excluded automata at the last exclude state.
    Paper,
    /// The published code (docs/papers/fedtmos.md §7, §11–§13): bits by mean scaled weight, its
    /// `floor(mean) > 0` filter, one spread per model over the batch with sums clamped to
    /// [−T, T], excluded automata at 0. The code's two reassignment bugs stay fixed.
    PaperCode,
}

/// The values of the keys a preset decides.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Decided {
    top_k: usize,
    bits_by: BitsBy,
    filter: bool,
    composite: CompositeOptions,
    excluded_at: ExcludedAt,
}

impl Preset {
    /// K of TopK where `top_k` is unset on images.
    pub fn top_k(self) -> usize {
        self.decides().top_k
    }

    fn decides(self) -> Decided {
        match self {
            Preset::Recommended => Decided {
                top_k: 1,
                ..Preset::Paper.decides()
            },
            Preset::Paper => Decided {
                top_k: PAPER_TOP_K,
                bits_by: BitsBy::Samples,
                filter: false,
                composite: CompositeOptions::default(),
                excluded_at: ExcludedAt::LastExclude,
            },
            // The code ORs in a second holder's bits only for a model's last client.
            Preset::PaperCode => Decided {
                top_k: PAPER_TOP_K,
                bits_by: BitsBy::MeanWeight,
                filter: true,
                composite: CompositeOptions::CODE,
                excluded_at: ExcludedAt::Zero,
            },
        }
    }
}

/// K of the paper's TopK (§4.2.2): the include bits of the two largest holders of a class.
pub const PAPER_TOP_K: usize = 2;

/// R of the published code: its `u32(...)` truncates the scaled weights to whole units.
pub const CODE_WEIGHT_RESOLUTION: u32 = 1;

fn is_code_resolution(r: &u32) -> bool {
    *r == CODE_WEIGHT_RESOLUTION
}

/// `[fedtmos]`: FedTMOS's one round (its paper, Algorithms 1–3) and its baselines'. The keys a
/// preset decides are left unset unless written: the preset then picks them, in a run's resolved
/// file too, so `--set fedtmos.preset=…` on it switches them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FedTmosSection {
    /// `recommended`, `paper` or `paper-code`: the values of the keys below it says it
    /// decides, where unset.
    pub preset: Preset,
    /// φ: server models (the paper's MNIST).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub models: usize,
    /// σ: the mean Gini index above which weights are scaled.
    pub sigma: f64,
    /// k of k-means, at most (30: the paper's Dir partitions; 10 for S(β)).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub k_max: usize,
    /// Preset-decided: K of TopK, contributors whose include bits are ORed (1; the paper's
    /// presets 2; on a table 1 whatever the preset).
    #[serde(
        deserialize_with = "crate::params::at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 1))]
    pub top_k: Option<usize>,
    /// R: the scaled weights (step 2) in units of 1/R, ⌊R · x · θ · n_c / n⌋, so that a class
    /// of a small share keeps its small weights (images: 1, the code's truncation; a table: 256).
    #[serde(
        deserialize_with = "crate::params::at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 1))]
    pub weight_resolution: Option<u32>,
    /// Preset-decided: `samples` (the paper) or `mean-weight` (the code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_by: Option<BitsBy>,
    /// Preset-decided: the code's filter on vectors whose mean scaled weight floors to 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<bool>,
    /// Under whose weights the fill step adds a class: `holder` or `cluster-first` (the code:
    /// the cluster's first client, who may not hold it and then adds zeros).
    pub fill_from: FillFrom,
    /// Local training epochs before the one upload.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub local_epochs: u32,
    /// Convolution patch width W (the paper's MNIST).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub patch: usize,
    /// Test rows per client.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub test_samples: usize,
    /// Preset-decided: composite normalization, `per-sample` (eq. 3) or `per-batch` (the code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalization: Option<Normalization>,
    /// Preset-decided: clamp class sums to [−T, T] at inference, as the code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clamp: Option<bool>,
    /// Preset-decided: where a rebuilt machine's excluded automata sit, `last-exclude` or `zero`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded_at: Option<ExcludedAt>,
    /// Also send every client's own machine, so the holder of the shared test set measures the
    /// ensemble baseline, each client alone and both composite readings from the same trained
    /// clients (the download is then J machines larger).
    pub baselines: bool,
    /// Train one-vs-all with a random stream per class, the classes spread over the cores: the
    /// same model on any number of cores, but not the one-stream default's; faster where a
    /// client trains alone.
    pub class_streams: bool,
    /// `shuffled` (every epoch drawn anew), `by-class` or `by-class-two-threads` (the published
    /// code's unshuffled epochs, on one or two threads; one stream, so not with
    /// `class_streams`). Written only where set, so a run's fingerprint from before the key is
    /// unchanged.
    #[serde(skip_serializing_if = "EpochOrder::is_shuffled")]
    #[schemars(extend("default" = "shuffled"))]
    pub epoch_order: EpochOrder,
    /// The published code's data leak: every client first fits one epoch on the training rows
    /// of the first client holding the last class, then its own epochs (off in every preset: it
    /// hands each client another client's data; it exists to measure what the leak adds to the
    /// paper's figures).
    pub copy_data_epoch: bool,
    /// How machines travel, both ways: `arithmetic` (weights and include bits as adaptive
    /// arithmetic codes) or `varint` (varint weights, plain bit-sets).
    pub coding: WeightCoding,
}

impl Default for FedTmosSection {
    fn default() -> Self {
        FedTmosSection {
            preset: Preset::Recommended,
            models: 4,
            sigma: 0.5,
            k_max: 30,
            top_k: None,
            weight_resolution: None,
            bits_by: None,
            filter: None,
            fill_from: FillFrom::Holder,
            local_epochs: 30,
            patch: 10,
            test_samples: 1000,
            normalization: None,
            clamp: None,
            excluded_at: None,
            baselines: false,
            class_streams: false,
            epoch_order: EpochOrder::Shuffled,
            copy_data_epoch: false,
            coding: WeightCoding::Arithmetic,
        }
    }
}

/// Checked `[fedtmos]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosHyper {
    pub server: FedTmosServerParams,
    pub local_epochs: u32,
    pub patch: usize,
    pub test_samples: usize,
    pub composite: CompositeOptions,
    pub excluded_at: ExcludedAt,
    pub baselines: bool,
    pub class_streams: bool,
    #[serde(skip_serializing_if = "EpochOrder::is_shuffled")]
    pub epoch_order: EpochOrder,
    pub copy_data_epoch: bool,
    pub coding: WeightCoding,
    /// On a table: the bits of a row (its thermometer code). The machine then reads the whole
    /// row as its one patch (a plain multi-class machine); `None` for 28 × 28 images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_bits: Option<usize>,
}

impl FedTmosSection {
    /// The preset-decided keys this section writes with the value its preset gives them anyway
    /// (a resolved file written before such keys were left to the preset writes all of them).
    pub fn preset_values_written(&self) -> Vec<&'static str> {
        let d = self.preset.decides();
        [
            ("bits_by", self.bits_by == Some(d.bits_by)),
            ("filter", self.filter == Some(d.filter)),
            (
                "normalization",
                self.normalization == Some(d.composite.normalization),
            ),
            ("clamp", self.clamp == Some(d.composite.clamp)),
            ("excluded_at", self.excluded_at == Some(d.excluded_at)),
        ]
        .into_iter()
        .filter_map(|(key, same)| same.then_some(key))
        .collect()
    }

    /// With `preset` among the `overridden` keys, the preset-decided keys that hold this
    /// section's own preset's value, left to the new one (a resolved file written before they
    /// were left out holds them all); a key given another value, or overridden too, stays.
    pub fn left_to_a_new_preset(&self, overridden: &[&str]) -> Vec<&'static str> {
        if !overridden.contains(&"preset") {
            return Vec::new();
        }
        let mut keys = self.preset_values_written();
        keys.retain(|k| !overridden.contains(k));
        keys
    }

    /// The same settings with every preset-decided key that holds its preset's value left to
    /// the preset: one way to write them, so one fingerprint.
    pub fn canonical(self) -> FedTmosSection {
        let mut out = self;
        for key in self.preset_values_written() {
            match key {
                "bits_by" => out.bits_by = None,
                "filter" => out.filter = None,
                "normalization" => out.normalization = None,
                "clamp" => out.clamp = None,
                _ => out.excluded_at = None,
            }
        }
        out
    }

    /// The unshuffled orders train on one stream, so they do not go with `class_streams`.
    fn checked_epoch_order(&self) -> ParamResult<EpochOrder> {
        if self.class_streams && !self.epoch_order.is_shuffled() {
            return Err(ParamError::Inconsistent(
                "fedtmos.epoch_order other than \"shuffled\" trains on one stream: it does not go with fedtmos.class_streams = true".into(),
            ));
        }
        Ok(self.epoch_order)
    }

    /// The checked settings: the preset's values where its keys are unset.
    pub fn check(&self) -> ParamResult<FedTmosHyper> {
        let at_least_one = |key, n: usize| require(key, "at least 1", n, n > 0);
        let resolution = self.weight_resolution.unwrap_or(CODE_WEIGHT_RESOLUTION);
        let decided = self.preset.decides();
        Ok(FedTmosHyper {
            server: FedTmosServerParams {
                models: at_least_one("fedtmos.models", self.models)?,
                sigma: positive("fedtmos.sigma", self.sigma)?,
                k_max: at_least_one("fedtmos.k_max", self.k_max)?,
                top_k: at_least_one("fedtmos.top_k", self.top_k.unwrap_or(decided.top_k))?,
                bits_by: self.bits_by.unwrap_or(decided.bits_by),
                filter: self.filter.unwrap_or(decided.filter),
                weight_resolution: require(
                    "fedtmos.weight_resolution",
                    "at least 1",
                    resolution,
                    resolution > 0,
                )?,
                fill_from: self.fill_from,
            },
            local_epochs: require(
                "fedtmos.local_epochs",
                "at least 1",
                self.local_epochs,
                self.local_epochs > 0,
            )?,
            patch: at_least_one("fedtmos.patch", self.patch)?,
            test_samples: at_least_one("fedtmos.test_samples", self.test_samples)?,
            composite: CompositeOptions {
                normalization: self
                    .normalization
                    .unwrap_or(decided.composite.normalization),
                clamp: self.clamp.unwrap_or(decided.composite.clamp),
            },
            excluded_at: self.excluded_at.unwrap_or(decided.excluded_at),
            baselines: self.baselines,
            class_streams: self.class_streams,
            epoch_order: self.checked_epoch_order()?,
            copy_data_epoch: self.copy_data_epoch,
            coding: self.coding,
            table_bits: None,
        })
    }
}

impl FedTmosHyper {
    /// `local_epochs` epochs of the client's machine on its training rows.
    pub(crate) fn train_locally(
        &self,
        tm: &mut ConvTm,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) {
        let cores = crate::parallel::cores();
        for _ in 0..self.local_epochs {
            match self.class_streams {
                true => tm.fit_epoch_threaded(data, masks, rng, cores),
                false => self.fit_epoch(tm, data, masks, rng),
            }
        }
    }

    /// One epoch on one stream, in this run's [`EpochOrder`].
    pub(crate) fn fit_epoch(
        &self,
        tm: &mut ConvTm,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) {
        match self.epoch_order {
            EpochOrder::Shuffled => tm.fit_epoch(data, masks, rng),
            EpochOrder::ByClass => tm.fit_epoch_by_class(data, masks, rng, 1),
            EpochOrder::ByClassTwoThreads => tm.fit_epoch_by_class(data, masks, rng, 2),
        }
    }

    pub(crate) fn rebuild(&self, tm: TmHyper, classes: usize) -> Rebuild {
        Rebuild {
            tm,
            spec: self.patch_spec(),
            classes,
            excluded_at: self.excluded_at,
        }
    }

    /// The convolution over 28 × 28 single-channel images (MNIST, Fashion-MNIST); on a table,
    /// one 1 × 1 "image" with a channel per bit, whose one patch is the whole row.
    pub fn patch_spec(&self) -> PatchSpec {
        match self.table_bits {
            Some(bits) => PatchSpec {
                width: 1,
                height: 1,
                channels: bits,
                patch: 1,
            },
            None => PatchSpec {
                width: 28,
                height: 28,
                channels: 1,
                patch: self.patch,
            },
        }
    }

    /// What every exchanged machine must look like.
    pub fn shape(&self, tm: &TmHyper, classes: usize) -> TmShape {
        TmShape {
            classes,
            clauses: tm.clauses,
            literals: 2 * self.patch_spec().patch_features(),
            coding: self.coding,
        }
    }
}

/// FedTMOS's convolutional multi-class machine and its one round (also its two baselines').
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosSpec {
    pub tm: TmHyper,
    pub fedtmos: FedTmosHyper,
}
