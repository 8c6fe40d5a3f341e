//! Which strategy a run uses, with exactly the hyper-parameters it uses, and the factories of its
//! two halves. A new strategy is one arm here, its module beside this one, and its update kind in
//! `wire::convert`.

use serde::Serialize;

use super::ahp::{AhpCriterion, AhpHyper, AhpSection};
use super::fcm::{Aggregation, Blend, FcmClient, FcmSection, FcmServer};
use super::fedavg::{FedAvgClient, FedAvgServer};
use super::fedtm::{FedTmClient, FedTmServer};
use super::fedtmos::{
    CODE_WEIGHT_RESOLUTION, EnsembleServer, FedTmosClient, FedTmosHyper, FedTmosSection,
    FedTmosServer, Preset,
};
use super::local::LocalServer;
use super::robust::RobustHyper;
use super::tpfl::{TpflClient, TpflHyper, TpflServer};
use super::{ClientStrategy, ModelKind, ServerStrategy, StrategyKind};
use crate::data::DataShape;
use crate::data::Shard;
use crate::data::images::{BitShard, Holdout, ShardSizes};
use crate::model::fcm::FcmHyper;
use crate::model::logreg::{LogRegHyper, LogRegSection};
use crate::model::pso::PsoHyper;
use crate::model::tm::{ClauseBanks, TmHyper, TmSection};
use crate::params::{ParamError, ParamResult};
use crate::wire::{Compression, WeightCoding};
use crate::{ClientId, FlintError, Result};

/// The algorithm sections of an experiment file, each as written (`None` where absent, read at
/// its defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sections {
    pub logreg: Option<LogRegSection>,
    pub ahp: Option<AhpSection>,
    pub fcm: Option<FcmSection>,
    pub pso: Option<PsoHyper>,
    pub tm: Option<TmSection>,
    pub tpfl: Option<TpflHyper>,
    pub fedtmos: Option<FedTmosSection>,
    pub robust: Option<RobustHyper>,
}

/// Blind FL's map, its training, and the server's weighting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FcmSpec {
    pub fcm: FcmHyper,
    pub pso: PsoHyper,
    pub aggregation: Aggregation,
}

/// TPFL's coalesced machine and its rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TmSpec {
    pub tm: TmHyper,
    pub tpfl: TpflHyper,
}

/// FedTMOS's convolutional multi-class machine and its one round (also its two baselines').
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosSpec {
    pub tm: TmHyper,
    pub fedtmos: FedTmosHyper,
}

/// The model a baseline (`local`, `central`) trains, trained as its federated strategy does.
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
}

/// A checked strategy: one arm per strategy, holding what that strategy uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategySpec {
    #[serde(rename = "fedavg")]
    FedAvg {
        logreg: LogRegHyper,
    },
    #[serde(rename = "fedavg-ahp")]
    FedAvgAhp {
        logreg: LogRegHyper,
        ahp: AhpHyper,
    },
    BlindFcm(FcmSpec),
    BlendedFcm(FcmSpec),
    Tpfl(TmSpec),
    #[serde(rename = "fedtmos")]
    FedTmos(FedTmosSpec),
    Ensemble(FedTmosSpec),
    #[serde(rename = "fedtm")]
    FedTm(FedTmosSpec),
    Local(ModelSpec),
    Central(ModelSpec),
}

/// Every section, checked once, whether the strategy uses it or not: a typo in one this
/// strategy ignores is still a typo the user wants to hear about. On a table, the keys a section
/// leaves out take the table's defaults: the Tsetlin Machine's size ([`TmHyper::for_table`],
/// not the image machine's), logistic regression's steps ([`LogRegHyper::for_classes`]), the
/// FCM's iteration cap ([`super::fcm::settle_steps`]).
struct Checked {
    logreg: LogRegHyper,
    ahp: AhpHyper,
    fcm: FcmSpec,
    tm: TmSpec,
    fedtmos: FedTmosHyper,
    robust: RobustHyper,
}

impl Checked {
    fn of(s: &Sections, banks: ClauseBanks, shape: &DataShape) -> ParamResult<Checked> {
        let (mut fcm, aggregation) = s.fcm.unwrap_or_default().check()?;
        let (tm, logreg) = (s.tm.unwrap_or_default(), s.logreg.unwrap_or_default());
        let (tm, logreg) = match shape.table {
            true => (
                tm.over(TmHyper::for_table(shape.classes, banks, tm.clauses)),
                logreg.over(LogRegHyper::for_classes(shape.classes)),
            ),
            false => (
                tm.over(TmHyper::default()),
                logreg.over(LogRegHyper::default()),
            ),
        };
        let iterations = s.fcm.and_then(|f| f.max_iterations);
        if shape.table {
            fcm.max_iterations = iterations.unwrap_or(super::fcm::settle_steps(shape.classes));
        }
        Ok(Checked {
            logreg: logreg.check()?,
            ahp: s.ahp.clone().unwrap_or_default().check()?,
            fcm: FcmSpec {
                fcm,
                pso: s.pso.unwrap_or_default().check()?,
                aggregation,
            },
            tm: TmSpec {
                tm: tm.check()?,
                tpfl: s.tpfl.unwrap_or_default().check()?,
            },
            fedtmos: s.fedtmos.unwrap_or_default().check()?,
            robust: s.robust.unwrap_or_default().check()?,
        })
    }

    /// FedTMOS's settings for `kind` on this data: on a table, its machines read a row of
    /// `row_bits` as one patch, and the keys the file leaves out take the table's K (FedTMOS,
    /// FedTM: [`TABLE_TOP_K`]) and R (FedTMOS: [`TABLE_WEIGHT_RESOLUTION`]).
    fn conv(&self, kind: StrategyKind, s: &Sections, shape: &DataShape) -> FedTmosSpec {
        let mut fedtmos = self.fedtmos;
        let written = s.fedtmos.unwrap_or_default();
        if shape.table {
            fedtmos.table_bits = shape.row_bits;
            if matches!(kind, StrategyKind::FedTmos | StrategyKind::FedTm) {
                fedtmos.server.top_k = written.top_k.unwrap_or(TABLE_TOP_K);
            }
            if kind == StrategyKind::FedTmos {
                let resolution = written.weight_resolution;
                fedtmos.server.weight_resolution = resolution.unwrap_or(TABLE_WEIGHT_RESOLUTION);
            }
        }
        FedTmosSpec {
            tm: self.tm.tm,
            fedtmos,
        }
    }
}

impl ModelSpec {
    /// A baseline's model, from the checked sections (the `tm` model is TPFL's machine).
    fn of(model: ModelKind, c: &Checked) -> ModelSpec {
        match model {
            ModelKind::LogReg => ModelSpec::LogReg(c.logreg),
            ModelKind::Fcm => ModelSpec::Fcm(c.fcm),
            ModelKind::Tm => ModelSpec::Tm(c.tm),
        }
    }

    /// The sections this model reads, every key as it reads it; the others `None`. FedTMOS's
    /// keys a preset decides are written only where they differ from the preset's value.
    fn resolved_sections(&self, written: &Sections) -> Sections {
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
                out.fedtmos = Some(written.fedtmos.unwrap_or_default().canonical());
            }
        }
        out
    }

    pub fn kind(&self) -> ModelKind {
        match self {
            ModelSpec::LogReg(_) => ModelKind::LogReg,
            ModelSpec::Fcm(_) => ModelKind::Fcm,
            ModelSpec::Tm(_) | ModelSpec::ConvTm(_) => ModelKind::Tm,
        }
    }

    /// The federated strategy of this model: the baselines check and record updates with it.
    fn server(&self, classes: usize, seed: u64) -> Box<dyn ServerStrategy> {
        match self {
            ModelSpec::LogReg(_) => Box::new(FedAvgServer::by_size(classes)),
            ModelSpec::Fcm(f) => Box::new(FcmServer::new(classes, f.aggregation)),
            ModelSpec::Tm(t) => Box::new(TpflServer::new(classes, t.tm.clauses, t.tpfl)),
            ModelSpec::ConvTm(f) => Box::new(FedTmosServer::new(f.fedtmos, &f.tm, classes, seed)),
        }
    }
}

impl StrategySpec {
    /// The model `kind` trains: the one it implies, or for a baseline the one `given`.
    pub fn model_of(kind: StrategyKind, given: Option<ModelKind>) -> ParamResult<ModelKind> {
        let implied = match kind {
            StrategyKind::FedAvg | StrategyKind::FedAvgAhp => Some(ModelKind::LogReg),
            StrategyKind::BlindFcm | StrategyKind::BlendedFcm => Some(ModelKind::Fcm),
            StrategyKind::Tpfl
            | StrategyKind::FedTmos
            | StrategyKind::Ensemble
            | StrategyKind::FedTm => Some(ModelKind::Tm),
            StrategyKind::Local | StrategyKind::Central => None,
        };
        match (implied, given) {
            (Some(i), Some(g)) if i != g => Err(ParamError::Inconsistent(format!(
                "strategy {} trains {}, not model {}",
                kind.name(),
                i.name(),
                g.name()
            ))),
            (Some(m), _) | (None, Some(m)) => Ok(m),
            (None, None) => Err(ParamError::Inconsistent(format!(
                "strategy {} needs a model: set model = \"logreg\", \"fcm\" or \"tm\"",
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
        let banks = match kind.reads_rows_as_patches() {
            true => ClauseBanks::PerClass,
            false => ClauseBanks::Shared,
        };
        let c = Checked::of(s, banks, shape)?;
        if !c.robust.is_plain() && !averages(kind) {
            return Err(ParamError::Inconsistent(format!(
                "[robust] changes how updates are averaged, and strategy {} averages none",
                kind.name()
            )));
        }
        let conv = c.conv(kind, s, shape);
        Ok(match kind {
            StrategyKind::FedAvg => StrategySpec::FedAvg { logreg: c.logreg },
            StrategyKind::FedAvgAhp => StrategySpec::FedAvgAhp {
                logreg: c.logreg,
                ahp: c.ahp,
            },
            StrategyKind::BlindFcm => StrategySpec::BlindFcm(c.fcm),
            StrategyKind::BlendedFcm => StrategySpec::BlendedFcm(c.fcm),
            StrategyKind::Tpfl => StrategySpec::Tpfl(c.tm),
            StrategyKind::FedTmos => StrategySpec::FedTmos(conv),
            StrategyKind::Ensemble => StrategySpec::Ensemble(conv),
            StrategyKind::FedTm => StrategySpec::FedTm(conv),
            StrategyKind::Local => StrategySpec::Local(ModelSpec::of(model, &c)),
            StrategyKind::Central => StrategySpec::Central(ModelSpec::of(model, &c)),
        })
    }

    /// The sections this strategy reads, every key as it reads it; the others `None`: what a
    /// run's resolved file writes.
    pub fn resolved_sections(&self, written: &Sections) -> Sections {
        let mut out = self.model().resolved_sections(written);
        // Written only where it changes something: the papers' mean leaves the file as it was.
        out.robust = written
            .robust
            .filter(|r| !r.is_plain() && averages(self.kind()));
        if let Some(section) = out.fedtmos.as_mut() {
            section.top_k = self.top_k_written(section.preset);
            section.weight_resolution = self.weight_resolution_written();
        }
        if let StrategySpec::FedAvgAhp { ahp, .. } = self {
            out.ahp = Some(AhpSection {
                criteria: ahp.criteria.clone(),
                preference: ahp.matrix.clone(),
            });
        }
        out
    }

    /// FedTMOS's and FedTM's K where it is not what the file would give without it: the
    /// table's K on a table, the preset's on images (so a preset set on a resolved file
    /// decides it); the ensemble ORs no bits.
    fn top_k_written(&self, preset: Preset) -> Option<usize> {
        let (StrategySpec::FedTmos(f) | StrategySpec::FedTm(f)) = self else {
            return None;
        };
        let k = f.fedtmos.server.top_k;
        let unwritten = match f.fedtmos.table_bits {
            Some(_) => TABLE_TOP_K,
            None => preset.top_k(),
        };
        (k != unwritten).then_some(k)
    }

    /// FedTMOS's R where it is not the images' default (a table's is always written, so that
    /// the resolved file reads back as it ran); no other strategy scales weights.
    fn weight_resolution_written(&self) -> Option<u32> {
        let StrategySpec::FedTmos(f) = self else {
            return None;
        };
        let r = f.fedtmos.server.weight_resolution;
        (f.fedtmos.table_bits.is_some() || r != CODE_WEIGHT_RESOLUTION).then_some(r)
    }

    pub fn kind(&self) -> StrategyKind {
        match self {
            StrategySpec::FedAvg { .. } => StrategyKind::FedAvg,
            StrategySpec::FedAvgAhp { .. } => StrategyKind::FedAvgAhp,
            StrategySpec::BlindFcm(_) => StrategyKind::BlindFcm,
            StrategySpec::BlendedFcm(_) => StrategyKind::BlendedFcm,
            StrategySpec::Tpfl(_) => StrategyKind::Tpfl,
            StrategySpec::FedTmos(_) => StrategyKind::FedTmos,
            StrategySpec::Ensemble(_) => StrategyKind::Ensemble,
            StrategySpec::FedTm(_) => StrategyKind::FedTm,
            StrategySpec::Local(_) => StrategyKind::Local,
            StrategySpec::Central(_) => StrategyKind::Central,
        }
    }

    pub fn name(&self) -> String {
        self.kind().name()
    }

    /// The model every client trains.
    pub fn model(&self) -> ModelSpec {
        match self {
            StrategySpec::FedAvg { logreg } | StrategySpec::FedAvgAhp { logreg, .. } => {
                ModelSpec::LogReg(*logreg)
            }
            StrategySpec::BlindFcm(f) | StrategySpec::BlendedFcm(f) => ModelSpec::Fcm(*f),
            StrategySpec::Tpfl(t) => ModelSpec::Tm(*t),
            StrategySpec::FedTmos(f) | StrategySpec::Ensemble(f) | StrategySpec::FedTm(f) => {
                ModelSpec::ConvTm(*f)
            }
            StrategySpec::Local(m) | StrategySpec::Central(m) => m.clone(),
        }
    }

    /// Clauses per class of the run's Tsetlin Machine (0 without one): the weights a coded
    /// `ClassWeights` holds.
    pub fn clauses(&self) -> usize {
        match self.model() {
            ModelSpec::Tm(t) => t.tm.clauses,
            ModelSpec::ConvTm(t) => t.tm.clauses,
            ModelSpec::LogReg(_) | ModelSpec::Fcm(_) => 0,
        }
    }

    /// The most encoded bytes one client's update may take in a run of this shape: checked at
    /// an upload's header, before a byte of it is buffered (sizes come from the run, never from
    /// the sender). Twice a bound on the largest update the model can produce, so no honest
    /// update comes near it.
    pub fn max_update_bytes(&self, features: usize, classes: usize) -> u64 {
        let (f, c) = (features as u64, classes as u64);
        // A varint takes at most 10 bytes, a float 4; messages add tags and lengths.
        let tm = |clauses: usize| {
            let clauses = clauses as u64;
            // Each feature and its negation, and a convolution's position literals (fewer
            // than the features again).
            let include_bytes = (4 * f).div_ceil(8);
            c * (clauses * (10 + include_bytes) + 64)
        };
        let model = match self.model() {
            // One weight vector per class (two classes: one vector), a bias each.
            ModelSpec::LogReg(_) => c * (4 * f + 16),
            // One concept per feature and per class, row-major, and the local metrics.
            ModelSpec::Fcm(_) => 4 * (f + c) * (f + c) + 64,
            ModelSpec::Tm(t) => tm(t.tm.clauses),
            ModelSpec::ConvTm(t) => tm(t.tm.clauses),
        };
        2 * (model + 1024)
    }

    /// The most encoded bytes one download may take in a run of this shape, where the client
    /// sets its limit: the one-shot strategies send every client's machine (the ensemble, and
    /// FedTMOS's baselines) beside its server models; the others one model.
    pub fn max_download_bytes(&self, features: usize, classes: usize, clients: usize) -> u64 {
        let models = match self {
            StrategySpec::FedTmos(f) | StrategySpec::Ensemble(f) => {
                clients + f.fedtmos.server.models + 1
            }
            _ => 2,
        };
        self.max_update_bytes(features, classes)
            .saturating_mul(models as u64)
    }

    /// Whether every client must declare its compute power (AHP's compute-ghz criterion).
    pub fn needs_compute_ghz(&self) -> bool {
        matches!(self, StrategySpec::FedAvgAhp { ahp, .. } if ahp.criteria.contains(&AhpCriterion::ComputeGhz))
    }

    /// The server half; `seed` is the run's (FedTMOS seeds its k-means from it), `robust` how
    /// it averages (the checks refuse anything but the plain mean where nothing is averaged).
    pub fn server(
        &self,
        classes: usize,
        seed: u64,
        robust: RobustHyper,
    ) -> Box<dyn ServerStrategy> {
        match self {
            StrategySpec::FedAvg { .. } => {
                Box::new(FedAvgServer::by_size(classes).with_robust(robust))
            }
            StrategySpec::FedAvgAhp { ahp, .. } => {
                Box::new(FedAvgServer::by_ahp(ahp.clone(), classes).with_robust(robust))
            }
            StrategySpec::BlindFcm(f) | StrategySpec::BlendedFcm(f) => {
                Box::new(FcmServer::new(classes, f.aggregation).with_robust(robust))
            }
            StrategySpec::Tpfl(t) => {
                Box::new(TpflServer::new(classes, t.tm.clauses, t.tpfl).with_robust(robust))
            }
            StrategySpec::FedTmos(f) => {
                Box::new(FedTmosServer::new(f.fedtmos, &f.tm, classes, seed).with_robust(robust))
            }
            StrategySpec::Ensemble(f) => Box::new(EnsembleServer::new(f.fedtmos, &f.tm, classes)),
            StrategySpec::FedTm(f) => {
                Box::new(FedTmServer::new(f.fedtmos, &f.tm, classes).with_robust(robust))
            }
            StrategySpec::Local(m) | StrategySpec::Central(m) => {
                Box::new(LocalServer::new(m.server(classes, seed)))
            }
        }
    }

    /// The client half of a model that trains on a table (logistic regression, FCMs).
    pub fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        // Local baselines never receive a download, so their blend does not matter.
        let blend = match self {
            StrategySpec::BlendedFcm(_) => Blend::Average,
            _ => Blend::Replace,
        };
        match self.model() {
            ModelSpec::LogReg(h) => {
                let client = FedAvgClient::new(features, classes, h);
                Ok(Box::new(match self.kind() {
                    StrategyKind::Local | StrategyKind::Central => client.keeping_its_model(),
                    _ => client,
                }))
            }
            ModelSpec::Fcm(f) => Ok(Box::new(FcmClient::new(
                features, classes, f.fcm, f.pso, blend,
            ))),
            ModelSpec::Tm(_) | ModelSpec::ConvTm(_) => Err(FlintError::Config(format!(
                "strategy {} trains a tsetlin machine on images, not on a table",
                self.name()
            ))),
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
            StrategySpec::Ensemble(f) => {
                // The clients' own machines come back unscaled.
                let mut hyper = f.fedtmos;
                hyper.server.weight_resolution = CODE_WEIGHT_RESOLUTION;
                return Ok(Box::new(FedTmosClient::new(
                    f.tm, hyper, classes, seed, client, clients, 0,
                )?));
            }
            StrategySpec::FedTm(f) => {
                return Ok(Box::new(FedTmClient::new(
                    f.tm, f.fedtmos, classes, seed, client,
                )?));
            }
            _ => {}
        }
        match self.model() {
            ModelSpec::Tm(t) => Ok(Box::new(TpflClient::new(
                t.tm, t.tpfl, features, classes, seed, client,
            ))),
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

    /// `fedtmos.copy_data_epoch`: FedTMOS's and the ensemble's clients first fit one epoch on
    /// another client's rows (the code's data leak).
    pub fn copy_data_epoch(&self) -> bool {
        match self {
            StrategySpec::FedTmos(f) | StrategySpec::Ensemble(f) => f.fedtmos.copy_data_epoch,
            _ => false,
        }
    }

    /// Whether a client's model after a round is the download alone, nothing of its own
    /// training kept beside it, so a replayed download can be measured by a client prepared
    /// afresh: not TPFL (its clause bank stays local), Blended FL (it blends the aggregate with
    /// its own map) nor the baselines (no download).
    pub fn model_is_the_download(&self) -> bool {
        match self {
            StrategySpec::BlendedFcm(_) | StrategySpec::Tpfl(_) => false,
            StrategySpec::Local(_) | StrategySpec::Central(_) => false,
            StrategySpec::FedAvg { .. } | StrategySpec::FedAvgAhp { .. } => true,
            StrategySpec::BlindFcm(_) => true,
            StrategySpec::FedTmos(_) | StrategySpec::Ensemble(_) | StrategySpec::FedTm(_) => true,
        }
    }

    /// The knobs a grid's table tells runs of this strategy apart by, in one line: `images`,
    /// whether it reads images, and the run's `compression`.
    pub fn setting(&self, images: bool, compression: Compression) -> String {
        use crate::model::fcm::Fitness;
        use crate::params::name_of;
        match self.model() {
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
            ModelSpec::LogReg(_) => self.model().kind().name(),
            ModelSpec::Fcm(f) => {
                let mut s = format!("{} λ={}", name_of(&f.fcm.activation), f.fcm.slope);
                if matches!(
                    self,
                    StrategySpec::BlindFcm(_) | StrategySpec::BlendedFcm(_)
                ) {
                    s = format!("{} {s}", f.aggregation.name());
                }
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
        match self.model() {
            ModelSpec::ConvTm(f) if f.fedtmos.table_bits.is_none() => Some(4992..10_000),
            _ => None,
        }
    }

    /// What an image client's shard holds beyond its `train` rows (TPFL: test and confidence
    /// rows, drawn as its evaluation says); `None` for models that do not read images.
    pub fn image_shard(&self, train: usize) -> Option<(ShardSizes, Holdout)> {
        match self.model() {
            ModelSpec::Tm(t) => Some((t.tpfl.sizes(train), t.tpfl.evaluation)),
            ModelSpec::ConvTm(f) => Some((
                ShardSizes {
                    train,
                    test: f.fedtmos.test_samples,
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

/// K of TopK on a table: one holder's include bits. ORing two holders' makes every averaged
/// clause demand both holders' literals; on six tables one holder's moved FedTM by −1 to +34
/// points and FedTMOS by 0 to +37 (docs/results/tables.md).
const TABLE_TOP_K: usize = 1;
/// R on a table: a table's machine (T = 50) learns weights of a few units, which the code's
/// truncation of θ · n_c / n floors to 0 (docs/results/tables.md).
const TABLE_WEIGHT_RESOLUTION: u32 = 256;

/// Whether the strategy's server averages the clients' updates, where `[robust]` applies: not
/// the ensemble (it keeps every machine) nor the baselines (nothing is combined).
pub fn averages(kind: StrategyKind) -> bool {
    !matches!(
        kind,
        StrategyKind::Ensemble | StrategyKind::Local | StrategyKind::Central
    )
}
