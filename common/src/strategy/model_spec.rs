//! The model a run's clients train, with its settings: what the strategies of one model family
//! share (its client halves, its sections in a resolved file, its bound on an update's bytes,
//! what its shards hold). A new strategy over an existing model adds nothing here; a new model
//! family adds one arm.

use serde::Serialize;

use super::fcm::{Blend, FcmClient, FcmSection, FcmServer, FcmSpec};
use super::fedavg::{FedAvgClient, FedAvgServer};
use super::fedavg_cnn::{CnnClient, NetworkMean, architecture};
use super::fedtmos::{FedTmosClient, FedTmosServer, FedTmosSpec};
use super::sections::{Checked, Sections};
use super::tpfl::{TmSpec, TpflClient, TpflServer};
use super::{ClientStrategy, ModelKind, ServerStrategy};
use crate::data::Shard;
use crate::data::images::{BitShard, Holdout, PixelShard, ShardSizes};
use crate::model::cnn::CnnHyper;
use crate::model::fcm::Fitness;
use crate::model::logreg::LogRegHyper;
use crate::params::name_of;
use crate::wire::{Compression, WeightCoding};
use crate::{ClientId, FlintError, Result};

/// The model a strategy trains, trained as its federated strategy does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelSpec {
    #[serde(rename = "logreg")]
    LogReg(LogRegHyper),
    Fcm(FcmSpec),
    Tm(TmSpec),
    /// FedTMOS's convolutional machine (`local` and `central` do not offer it yet: their
    /// `tm` is TPFL's machine).
    ConvTm(FedTmosSpec),
    Cnn(CnnHyper),
}

impl ModelSpec {
    /// A baseline's model, from the checked sections (the `tm` model is TPFL's machine).
    pub fn of(model: ModelKind, c: &Checked) -> ModelSpec {
        match model {
            ModelKind::LogReg => ModelSpec::LogReg(c.logreg),
            ModelKind::Fcm => ModelSpec::Fcm(c.fcm),
            ModelKind::Tm => ModelSpec::Tm(c.tm),
            ModelKind::Cnn => ModelSpec::Cnn(c.cnn),
        }
    }

    pub fn kind(&self) -> ModelKind {
        match self {
            ModelSpec::LogReg(_) => ModelKind::LogReg,
            ModelSpec::Fcm(_) => ModelKind::Fcm,
            ModelSpec::Tm(_) | ModelSpec::ConvTm(_) => ModelKind::Tm,
            ModelSpec::Cnn(_) => ModelKind::Cnn,
        }
    }

    /// Whether the model reads images as bytes (a neural network), not as bits.
    pub fn reads_pixels(&self) -> bool {
        matches!(self, ModelSpec::Cnn(_))
    }

    /// The sections this model reads, every key as it reads it; the others `None`. FedTMOS's
    /// keys a strategy decides (K, R) are left to it.
    pub fn resolved_sections(&self, written: &Sections) -> Sections {
        let mut out = Sections::default();
        match self {
            ModelSpec::LogReg(logreg) => out.logreg = Some((*logreg).into()),
            ModelSpec::Fcm(f) => {
                out.fcm = Some(FcmSection {
                    activation: f.fcm.activation,
                    slope: Some(f.fcm.slope),
                    tolerance: f.fcm.tolerance,
                    max_iterations: Some(f.fcm.max_iterations),
                    fitness: f.fcm.fitness,
                    aggregation: f.aggregation,
                });
                out.pso = Some(f.pso);
            }
            ModelSpec::Tm(t) => {
                out.tm = Some(t.tm.into());
                out.tpfl = Some(t.tpfl);
            }
            ModelSpec::ConvTm(f) => {
                out.tm = Some(f.tm.into());
                let mut section = written.fedtmos.unwrap_or_default().canonical();
                (section.top_k, section.weight_resolution) = (None, None);
                out.fedtmos = Some(section);
            }
            ModelSpec::Cnn(c) => out.cnn = Some(*c),
        }
        out
    }

    /// The federated strategy of this model: the baselines check and record updates with it.
    pub fn server(&self, classes: usize, seed: u64) -> Box<dyn ServerStrategy> {
        match self {
            ModelSpec::LogReg(_) => Box::new(FedAvgServer::by_size(classes)),
            ModelSpec::Fcm(f) => Box::new(FcmServer::new(classes, f.aggregation)),
            ModelSpec::Tm(t) => Box::new(TpflServer::new(classes, t.tm.clauses, t.tpfl)),
            ModelSpec::ConvTm(f) => Box::new(FedTmosServer::new(f.fedtmos, &f.tm, classes, seed)),
            ModelSpec::Cnn(c) => Box::new(NetworkMean::new(
                c.architecture,
                classes,
                seed,
                "fedavg-cnn",
            )),
        }
    }

    /// The client half of a model that trains on a table (logistic regression, FCMs), taking
    /// each download as its new model.
    pub fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        match self {
            ModelSpec::LogReg(h) => Ok(Box::new(FedAvgClient::new(features, classes, *h))),
            ModelSpec::Fcm(f) => Ok(Box::new(FcmClient::new(
                features,
                classes,
                f.fcm,
                f.pso,
                Blend::Replace,
            ))),
            ModelSpec::Tm(_) | ModelSpec::ConvTm(_) => Err(FlintError::Config(
                "model tm trains a tsetlin machine on images, not on a table".into(),
            )),
            ModelSpec::Cnn(_) => Err(FlintError::Config(
                "model cnn trains a convolutional network on images, not on a table".into(),
            )),
        }
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
        match self {
            ModelSpec::Tm(t) => Ok(Box::new(
                TpflClient::new(t.tm, t.tpfl, features, classes, seed, client).with_dp(t.dp),
            )),
            ModelSpec::ConvTm(f) => Ok(Box::new(FedTmosClient::new(
                f.tm,
                f.fedtmos,
                classes,
                seed,
                client,
                f.fedtmos.server.models,
                clients,
            )?)),
            other => Err(FlintError::Config(format!(
                "model {} trains on a table, not on images",
                other.kind().name()
            ))),
        }
    }

    /// The client half of a model that trains on images as bytes.
    pub fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        _client: ClientId,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        match self {
            ModelSpec::Cnn(c) => Ok(Box::new(CnnClient::new(*c, features, classes, seed)?)),
            other => Err(FlintError::Config(format!(
                "model {} does not read images as pixels",
                other.kind().name()
            ))),
        }
    }

    /// Clauses per class of a Tsetlin Machine (0 for other models): the weights a coded
    /// `ClassWeights` holds.
    pub fn clauses(&self) -> usize {
        match self {
            ModelSpec::Tm(t) => t.tm.clauses,
            ModelSpec::ConvTm(t) => t.tm.clauses,
            ModelSpec::LogReg(_) | ModelSpec::Fcm(_) | ModelSpec::Cnn(_) => 0,
        }
    }

    /// A bound on the encoded bytes of the largest update this model can produce.
    pub fn update_bytes_bound(&self, features: usize, classes: usize) -> u64 {
        let (f, c) = (features as u64, classes as u64);
        // A varint takes at most 10 bytes, a float 4; messages add tags and lengths.
        let tm = |clauses: usize| {
            let clauses = clauses as u64;
            // Each feature and its negation, and a convolution's position literals (fewer
            // than the features again).
            let include_bytes = (4 * f).div_ceil(8);
            c * (clauses * (10 + include_bytes) + 64)
        };
        match self {
            // One weight vector per class (two classes: one vector), a bias each.
            ModelSpec::LogReg(_) => c * (4 * f + 16),
            // One concept per feature and per class, row-major, and the local metrics.
            ModelSpec::Fcm(_) => 4 * (f + c) * (f + c) + 64,
            ModelSpec::Tm(_) | ModelSpec::ConvTm(_) => tm(self.clauses()),
            // float32 parameters, a tag and a length; an image that fits no network: nothing.
            ModelSpec::Cnn(c) => architecture(c.architecture, features, classes)
                .map_or(0, |a| 4 * a.params as u64 + 16),
        }
    }

    /// The knobs a grid's table tells runs of this model apart by, in one line: `images`,
    /// whether it reads images, and the run's `compression`.
    pub fn setting(&self, images: bool, compression: Compression) -> String {
        match self {
            ModelSpec::Tm(t) => {
                let mut s = format!(
                    "tm {} clauses, {} evaluation",
                    t.tm.clauses,
                    name_of(&t.tpfl.evaluation)
                );
                if !t.tpfl.delta {
                    s += ", absolute";
                }
                s += coding_note(t.tpfl.coding);
                if compression != Compression::None {
                    s += &format!(", {}", name_of(&compression));
                }
                s
            }
            ModelSpec::ConvTm(f) => {
                let varint = coding_note(f.fedtmos.coding);
                // A patch is an image's: a table's rows are read whole.
                match images {
                    true => format!(
                        "conv tm {} clauses, {}×{} patch, φ = {}{varint}",
                        f.tm.clauses, f.fedtmos.patch, f.fedtmos.patch, f.fedtmos.server.models
                    ),
                    false => format!(
                        "tm {} clauses on table rows, φ = {}{varint}",
                        f.tm.clauses, f.fedtmos.server.models
                    ),
                }
            }
            ModelSpec::LogReg(_) => self.kind().name(),
            ModelSpec::Cnn(c) => format!(
                "cnn {}, {} epochs, batch {}, lr {}{}",
                name_of(&c.architecture),
                c.local_epochs,
                c.batch_size,
                c.learning_rate,
                match c.momentum {
                    0.0 => String::new(),
                    m => format!(", momentum {m}"),
                }
            ),
            ModelSpec::Fcm(f) => {
                let mut s = format!("{} λ={}", name_of(&f.fcm.activation), f.fcm.slope);
                if f.fcm.fitness == Fitness::SampleJaccard {
                    s += " sample-jaccard";
                }
                s
            }
        }
    }

    /// The official test images every client's composite is also measured on, held by client
    /// 1: FedTMOS's global test set, the second half (indices 4992–9999; the paper used the
    /// first half as another method's public data).
    pub fn global_test_rows(&self) -> Option<std::ops::Range<usize>> {
        match self {
            ModelSpec::ConvTm(f) if f.fedtmos.table_bits.is_none() => Some(4992..10_000),
            ModelSpec::Cnn(c) if c.global_test => Some(4992..10_000),
            _ => None,
        }
    }

    /// What an image client's shard holds beyond its `train` rows (TPFL: test and confidence
    /// rows, drawn as its evaluation says); `None` for models that do not read images.
    pub fn image_shard(&self, train: usize) -> Option<(ShardSizes, Holdout)> {
        match self {
            ModelSpec::Tm(t) => Some((t.tpfl.sizes(train), t.tpfl.evaluation)),
            ModelSpec::ConvTm(f) => Some((
                ShardSizes {
                    train,
                    test: f.fedtmos.test_samples,
                    confidence: None,
                },
                Holdout::Disjoint,
            )),
            ModelSpec::Cnn(c) => Some((
                ShardSizes {
                    train,
                    test: c.test_samples as usize,
                    confidence: None,
                },
                Holdout::Disjoint,
            )),
            _ => None,
        }
    }
}

/// The wire's coding where it is not the default.
fn coding_note(coding: WeightCoding) -> &'static str {
    match coding {
        WeightCoding::Arithmetic => "",
        WeightCoding::Varint => ", varint",
    }
}
