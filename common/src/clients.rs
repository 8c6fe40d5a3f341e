//! A client process's set-up: from (experiment, data directory, client ids) to each client's
//! shard, data summary and client half, bound together. The client binary drives what this
//! returns and knows no strategy; the strategy says what its shard needs
//! ([`StrategySpec::image_shard`]).

use std::path::Path;

use crate::config::Experiment;
use crate::data::images::{BitShard, ShardSource};
use crate::data::{PartitionPlan, Shard, Source, partition};
use crate::metrics::ConfusionMatrix;
use crate::model::kept::KeptModel;
use crate::rng::FlintRng;
use crate::strategy::{ClientStrategy, Predictor};
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

/// The FedTMOS code's `copy_data`: the training rows of the first client (by id) that holds
/// the last class, as that client trains on them.
fn copy_data(
    source: &ShardSource,
    rows: &[Vec<usize>],
    labels: &[u32],
    classes: usize,
    test: usize,
) -> Result<crate::data::booleanize::BitRows> {
    let last = classes as u32 - 1;
    let holder = rows
        .iter()
        .position(|r| r.iter().any(|&i| labels[i] == last))
        .ok_or_else(|| FlintError::Partition(format!("no client holds class {last}")))?;
    Ok(source
        .from_rows(&rows[holder], test, holder as ClientId + 1)?
        .train)
}

/// A client half with its own shard: what a client process trains, applies and evaluates.
pub trait BoundHalf: Send {
    /// Takes the server's download, the aggregate of `round`.
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()>;
    /// Trains for one round on the training split; returns the update to upload.
    fn train(&mut self, round: Round, rng: &mut FlintRng) -> Result<Payload>;
    /// The model as it is now, on the test split.
    fn evaluate(&self) -> ConfusionMatrix;
    /// The model and its baselines on the run's shared test set, the model last; empty unless
    /// this client holds the set.
    fn evaluate_global(&self) -> Vec<(Predictor, ConfusionMatrix)>;
    /// The model as it is now, with no names (see [`Prepared::feature_names`]).
    fn export(&self) -> Option<KeptModel>;
}

struct OnShard<S> {
    shard: S,
    half: Box<dyn ClientStrategy<S>>,
    /// The shared test set, as a shard whose test split it is.
    global: Option<S>,
}

impl<S: Send> BoundHalf for OnShard<S> {
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()> {
        self.half.apply(round, download)
    }

    fn train(&mut self, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        self.half.train(&self.shard, round, rng)
    }

    fn evaluate(&self) -> ConfusionMatrix {
        self.half.evaluate(&self.shard)
    }

    fn evaluate_global(&self) -> Vec<(Predictor, ConfusionMatrix)> {
        self.global
            .as_ref()
            .map_or_else(Vec::new, |g| self.half.evaluate_all(g))
    }

    fn export(&self) -> Option<KeptModel> {
        self.half.export()
    }
}

/// One client, ready to join.
pub struct Prepared {
    pub id: ClientId,
    pub name: String,
    pub summary: DataSummary,
    pub half: Box<dyn BoundHalf>,
    /// The names of the data's features, as its kept model file writes them.
    pub feature_names: Vec<String>,
    /// For a table booleanized by a thermometer code: each input bit's (feature, cut), the bit
    /// set when the feature's raw value is above the cut. Empty where the features are the bits.
    pub bits: Vec<(usize, f64)>,
}

/// Loads the data once and prepares every client in `ids` (ids are positions in the
/// experiment's client list). `compute_ghz` replaces the declared compute power.
pub fn prepare(
    e: &Experiment,
    data_dir: &Path,
    ids: &[ClientId],
    compute_ghz: Option<f64>,
) -> Result<Vec<Prepared>> {
    let declared = |id: ClientId| {
        e.client(id).ok_or_else(|| {
            FlintError::Config(format!(
                "client id {id} is not declared: the experiment has {} clients",
                e.clients.len()
            ))
        })
    };
    for &id in ids {
        declared(id)?;
    }
    let summary =
        |id: ClientId, train_class_counts: Vec<u64>, test: usize, features: usize| DataSummary {
            train_class_counts,
            test_samples: test as u64,
            features: features as u32,
            compute_ghz: compute_ghz.unwrap_or(e.clients[id as usize - 1].compute_ghz),
        };
    let classes = e.data.classes().len();
    let mut out = Vec::with_capacity(ids.len());
    if e.data.is_images() {
        let pool = e.data.load_images(data_dir)?;
        let not_images = || {
            FlintError::Config(format!(
                "strategy {} does not train on images",
                e.strategy.name()
            ))
        };
        let features = pool.train.features();
        let source = ShardSource::new(&pool, e.seed)?;
        // A split of the whole training set is computed once for every client of the process.
        let split_rows = match &e.partition {
            PartitionPlan::ByClass { clients, split } => {
                Some(split.split_all_served(&pool.train.labels, classes, *clients, e.seed)?)
            }
            _ => None,
        };
        for &id in ids {
            let name = declared(id)?.name.clone();
            let shard: BitShard = match (&e.partition, &split_rows) {
                (PartitionPlan::Dirichlet { alphas, samples }, _) => {
                    let (sizes, holdout) = e.strategy.image_shard(*samples).ok_or_else(not_images)?;
                    source.dirichlet(alphas[id as usize - 1], sizes, holdout, id)
                }
                (_, Some(all)) => {
                    let rows = &all[id as usize - 1];
                    let (sizes, _) = e.strategy.image_shard(rows.len()).ok_or_else(not_images)?;
                    if sizes.confidence.is_some() {
                        return Err(FlintError::Config(format!(
                            "strategy {} needs a confidence split, which partition.kind = \"dirichlet\" draws",
                            e.strategy.name()
                        )));
                    }
                    let mut shard = source.from_rows(rows, sizes.test, id)?;
                    if e.strategy.copy_data_epoch() {
                        shard.prefit = Some(copy_data(&source, all, &pool.train.labels, classes, sizes.test)?);
                    }
                    Ok(shard)
                }
                _ => {
                    return Err(FlintError::Config(
                        "image data needs partition.kind = \"dirichlet\" or a split by class"
                            .into(),
                    ));
                }
            }
            .map_err(|err| in_client(&name, err))?;
            let half = e
                .strategy
                .bits_client(features, classes, e.seed, id, e.clients.len())?;
            // The first client holds the shared test set, so the server never holds data.
            let global = match e.strategy.global_test_rows() {
                Some(rows) if id == 1 => Some(BitShard {
                    train: pool.train.select(&[]),
                    test: pool
                        .test
                        .select(&rows.filter(|&i| i < pool.test.len()).collect::<Vec<_>>()),
                    confidence: None,
                    prefit: None,
                }),
                _ => None,
            };
            out.push(Prepared {
                id,
                summary: summary(id, shard.train_class_counts(), shard.test.len(), features),
                half: Box::new(OnShard {
                    shard,
                    half,
                    global,
                }),
                name,
                feature_names: match &e.data.source {
                    Source::Images { set, .. } => {
                        (0..features).map(|k| set.pixel_name(k)).collect()
                    }
                    _ => Vec::new(),
                },
                bits: Vec::new(),
            });
        }
        return Ok(out);
    }
    let dataset = e.data.load(data_dir, e.seed)?;
    // The shared test set is held out before the partition, so no client trains on it.
    let (rest, held) = match e.data.global_test {
        Some(fraction) => {
            let (rest, held) = crate::data::shard::held_out(&dataset, fraction, e.seed)?;
            (Some(rest), held)
        }
        None => (None, Vec::new()),
    };
    let parts = match &rest {
        Some(rest) => partition(&dataset.select(rest), &e.partition, e.seed)?
            .into_iter()
            .map(|part| part.into_iter().map(|i| rest[i]).collect())
            .collect(),
        None => partition(&dataset, &e.partition, e.seed)?,
    };
    for &id in ids {
        let name = declared(id)?.name.clone();
        let rows = &parts[id as usize - 1];
        let (train_rows, test_rows) =
            crate::data::shard::split(&dataset, rows, e.data.test_fraction, e.seed, id);
        let shard = Shard::from_split(&dataset, &train_rows, &test_rows, e.data.scaling);
        // Its holder measures it as its own test rows: scaled by its own training split.
        let global = (id == 1 && rest.is_some())
            .then(|| Shard::from_split(&dataset, &train_rows, &held, e.data.scaling));
        if shard.train.is_empty() || shard.test.is_empty() {
            return Err(FlintError::Partition(format!(
                "client {name:?} has {} training and {} test rows of its {} rows; each split needs at least one (give it more data or change data.test_fraction)",
                shard.train.len(),
                shard.test.len(),
                rows.len()
            )));
        }
        // A category column reaches the model as its training rate of class 1 (see `shard`):
        // a rule's cut on it is a cut on that rate.
        let names: Vec<String> = (0..dataset.features)
            .map(|i| match dataset.categorical.contains(&i) {
                true => format!("{} (rate of class 1)", dataset.feature_name(i)),
                false => dataset.feature_name(i),
            })
            .collect();
        if let Some(bits) = &e.data.table_bits {
            // A Tsetlin Machine on a table: the client's thermometer code, fitted to its own
            // training split (or the experiment's cuts). TPFL's confidence rows are the
            // training split: a table has no separate pool to draw them from.
            let code = bits.thermometer(&shard.train)?;
            let train = code.encode(&shard.train);
            let bit_shard = BitShard {
                confidence: Some(train.clone()),
                prefit: None,
                test: code.encode(&shard.test),
                train,
            };
            let half = e
                .strategy
                .bits_client(code.bits(), classes, e.seed, id, e.clients.len())?;
            let global_bits = global.as_ref().map(|g| BitShard {
                train: code.encode(&g.test.select(&[])),
                test: code.encode(&g.test),
                confidence: None,
                prefit: None,
            });
            out.push(Prepared {
                id,
                summary: summary(
                    id,
                    bit_shard.train_class_counts(),
                    bit_shard.test.len(),
                    code.bits(),
                ),
                half: Box::new(OnShard {
                    shard: bit_shard,
                    half,
                    global: global_bits,
                }),
                name,
                feature_names: names,
                bits: code.conditions(),
            });
            continue;
        }
        let half = e.strategy.table_client(dataset.features, classes)?;
        let counts = shard
            .train
            .class_counts()
            .iter()
            .map(|&c| c as u64)
            .collect();
        out.push(Prepared {
            id,
            summary: summary(id, counts, shard.test.len(), dataset.features),
            half: Box::new(OnShard {
                shard,
                half,
                global,
            }),
            name,
            feature_names: names,
            bits: Vec::new(),
        });
    }
    Ok(out)
}

fn in_client(name: &str, e: FlintError) -> FlintError {
    match e {
        FlintError::Partition(m) => {
            FlintError::Partition(format!("drawing the data of client {name:?}: {m}"))
        }
        other => other,
    }
}
