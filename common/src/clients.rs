//! A client process's set-up: from (experiment, data directory, client ids) to each client's
//! shard, data summary and client half, bound together. The client binary drives what this
//! returns and knows no strategy; the strategy says what its shard needs
//! ([`StrategySpec::image_shard`]).

use std::path::Path;

use crate::config::Experiment;
use crate::data::images::{BitShard, ImagePool, ImageRows, ImageShard, ShardSource};
use crate::data::{ClientSpec, Dataset, PartitionPlan, Shard, Source, partition};
use crate::metrics::ConfusionMatrix;
use crate::model::kept::KeptModel;
use crate::rng::FlintRng;
use crate::strategy::{ClientStrategy, Predictor};
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

/// The FedTMOS code's `copy_data`: the training rows of the first client (by id) that holds
/// the last class, as that client trains on them.
fn copy_data<R: ImageRows>(
    source: &ShardSource<R>,
    rows: &[Vec<usize>],
    labels: &[u32],
    classes: usize,
    test: usize,
) -> Result<R> {
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
    /// What the half carries to its next round beyond the download (see
    /// [`ClientStrategy::checkpoint`]).
    fn checkpoint(&self) -> Option<Vec<u8>>;
    fn restore(&mut self, state: &[u8]) -> Result<()>;
    /// See [`ClientStrategy::without_base`].
    fn without_base(&self, update: &Payload) -> Option<Payload>;
    /// See [`ClientStrategy::set_noise_key`].
    fn set_noise_key(&mut self, noise: crate::strategy::privacy::ClientNoise) -> bool;
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

    fn set_noise_key(&mut self, noise: crate::strategy::privacy::ClientNoise) -> bool {
        self.half.set_noise_key(noise)
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

    fn checkpoint(&self) -> Option<Vec<u8>> {
        self.half.checkpoint()
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        self.half.restore(state)
    }

    fn without_base(&self, update: &Payload) -> Option<Payload> {
        self.half.without_base(update)
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
    for &id in ids {
        declared(e, id)?;
    }
    let summaries = Summaries { e, compute_ghz };
    match e.data.is_images() {
        true => prepare_images(e, data_dir, ids, &summaries),
        false => prepare_tables(e, data_dir, ids, &summaries),
    }
}

fn declared(e: &Experiment, id: ClientId) -> Result<&ClientSpec> {
    e.client(id).ok_or_else(|| {
        FlintError::Config(format!(
            "client id {id} is not declared: the experiment has {} clients",
            e.clients.len()
        ))
    })
}

/// What each client tells the server when it joins.
struct Summaries<'a> {
    e: &'a Experiment,
    compute_ghz: Option<f64>,
}

impl Summaries<'_> {
    fn of(&self, id: ClientId, train: Vec<u64>, test: usize, features: usize) -> DataSummary {
        DataSummary {
            train_class_counts: train,
            test_samples: test as u64,
            features: features as u32,
            compute_ghz: self
                .compute_ghz
                .unwrap_or(self.e.clients[id as usize - 1].compute_ghz),
        }
    }
}

/// Image clients: the pool loaded once (as bits for a Tsetlin Machine, as bytes for a neural
/// network), each client's rows drawn from it (a split of the whole training set by class is
/// computed once for every client of the process).
fn prepare_images(
    e: &Experiment,
    data_dir: &Path,
    ids: &[ClientId],
    summaries: &Summaries,
) -> Result<Vec<Prepared>> {
    let (classes, clients) = (e.data.classes().len(), e.clients.len());
    if e.strategy.model().reads_pixels() {
        let pool = e.data.load_pixels(data_dir)?;
        let half = |features, id| {
            e.strategy
                .pixels_client(features, classes, e.seed, id, clients)
        };
        return prepare_on_pool(e, &pool, ids, summaries, half);
    }
    let pool = e.data.load_images(data_dir)?;
    let half = |features, id| {
        e.strategy
            .bits_client(features, classes, e.seed, id, clients)
    };
    prepare_on_pool(e, &pool, ids, summaries, half)
}

fn prepare_on_pool<R: ImageRows + 'static>(
    e: &Experiment,
    pool: &ImagePool<R>,
    ids: &[ClientId],
    summaries: &Summaries,
    make_half: impl Fn(usize, ClientId) -> Result<Box<dyn ClientStrategy<ImageShard<R>>>>,
) -> Result<Vec<Prepared>> {
    let features = pool.train.features();
    let source = ShardSource::new(pool, e.seed)?;
    let split_rows = image_split(e, pool)?;
    let feature_names: Vec<String> = match &e.data.source {
        Source::Images { set, .. } => (0..features).map(|k| set.pixel_name(k)).collect(),
        _ => Vec::new(),
    };
    ids.iter()
        .map(|&id| {
            let name = declared(e, id)?.name.clone();
            let shard = image_shard(e, pool, &source, split_rows.as_deref(), id, Prefit::Copy)
                .map_err(|err| in_client(&name, err))?;
            let half = make_half(features, id)?;
            let test = shard.test.labels().len();
            let summary = summaries.of(id, shard.train_class_counts(), test, features);
            Ok(Prepared {
                id,
                summary,
                half: Box::new(OnShard {
                    shard,
                    half,
                    global: shared_test_images(e, pool, id),
                }),
                name,
                feature_names: feature_names.clone(),
                bits: Vec::new(),
            })
        })
        .collect()
}

/// The split of the whole training set by class, computed once for every client, where the
/// partition is one.
fn image_split<R: ImageRows>(
    e: &Experiment,
    pool: &ImagePool<R>,
) -> Result<Option<Vec<Vec<usize>>>> {
    let classes = e.data.classes().len();
    match &e.partition {
        PartitionPlan::ByClass { clients, split } => Ok(Some(split.split_all_served(
            pool.train.labels(),
            classes,
            *clients,
            e.seed,
        )?)),
        _ => Ok(None),
    }
}

/// Whether a shard gets the FedTMOS code's leaked epoch (a copy of other clients' rows), where
/// the strategy asks for it: a feasibility check has no use for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prefit {
    Copy,
    Skip,
}

/// Before any client process starts: every image client's shard, drawn as its process will
/// draw it (the same pool, seed and split). Says how many fall short.
pub fn check_image_shards(e: &Experiment, data_dir: &Path) -> Result<()> {
    let pool = e.data.load_images(data_dir)?;
    let source = ShardSource::new(&pool, e.seed)?;
    let split_rows = image_split(e, &pool)?;
    let shards = e.clients.iter().enumerate().map(|(k, client)| {
        let id = k as ClientId + 1;
        image_shard(e, &pool, &source, split_rows.as_deref(), id, Prefit::Skip)
            .map_err(|err| in_client(&client.name, err))
    });
    every_client(shards, e.clients.len()).map(|_| ())
}

/// Every client's result, or the first client's error, saying how many clients fall short
/// where more than one does (a user fixes the split once, not client by client).
fn every_client<T>(all: impl Iterator<Item = Result<T>>, clients: usize) -> Result<Vec<T>> {
    let (mut done, mut first, mut short) = (Vec::new(), None, 0);
    for result in all {
        match result {
            Ok(t) => done.push(t),
            Err(err) => {
                short += 1;
                first.get_or_insert(err);
            }
        }
    }
    match first {
        None => Ok(done),
        Some(FlintError::Partition(m)) if short > 1 => Err(FlintError::Partition(format!(
            "{m}; {short} of the {clients} clients are short"
        ))),
        Some(err) => Err(err),
    }
}

/// What one client holds of each class, as its process draws its shard (`flint split`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientClasses {
    pub name: String,
    /// Its share of the rows the experiment partitions: what an explicit split's
    /// `class_counts` would give it. A table client's training and test rows; an image
    /// client's training rows (its test rows are drawn apart from the partition).
    pub rows: Vec<u64>,
    pub train: Vec<u64>,
    pub test: Vec<u64>,
}

/// Every client's rows per class, drawn from the same data, seed and splits as its process,
/// without training.
pub fn client_classes(e: &Experiment, data_dir: &Path) -> Result<Vec<ClientClasses>> {
    match e.data.is_images() {
        true => image_client_classes(e, data_dir),
        false => table_client_classes(e, data_dir),
    }
}

fn per_class(labels: impl IntoIterator<Item = u32>, classes: usize) -> Vec<u64> {
    let mut counts = vec![0; classes];
    for label in labels {
        counts[label as usize] += 1;
    }
    counts
}

fn image_client_classes(e: &Experiment, data_dir: &Path) -> Result<Vec<ClientClasses>> {
    let pool = e.data.load_images(data_dir)?;
    let source = ShardSource::new(&pool, e.seed)?;
    let split_rows = image_split(e, &pool)?;
    let classes = e.data.classes().len();
    let of_client = |(k, client): (usize, &ClientSpec)| {
        let id = k as ClientId + 1;
        let shard = image_shard(e, &pool, &source, split_rows.as_deref(), id, Prefit::Skip)
            .map_err(|err| in_client(&client.name, err))?;
        let train = per_class(shard.train.labels.iter().copied(), classes);
        Ok(ClientClasses {
            name: client.name.clone(),
            rows: train.clone(),
            train,
            test: per_class(shard.test.labels.iter().copied(), classes),
        })
    };
    every_client(e.clients.iter().enumerate().map(of_client), e.clients.len())
}

fn table_client_classes(e: &Experiment, data_dir: &Path) -> Result<Vec<ClientClasses>> {
    let dataset = e.data.load(data_dir, e.seed)?;
    let parts = TableParts::of(e, &dataset)?.parts;
    let classes = dataset.classes.len();
    let count = |rows: &[usize]| per_class(rows.iter().map(|&i| dataset.y[i]), classes);
    let of_client = |(k, (rows, client)): (usize, (&Vec<usize>, &ClientSpec))| {
        let (train, test) = client_split(e, &dataset, rows, k as ClientId + 1, &client.name)?;
        Ok(ClientClasses {
            name: client.name.clone(),
            rows: count(rows),
            train: count(&train),
            test: count(&test),
        })
    };
    let all = parts.iter().zip(&e.clients).enumerate().map(of_client);
    every_client(all, parts.len())
}

/// A client's image shard: drawn by its Dirichlet proportions, or its rows of the split by
/// class (with the FedTMOS code's leaked epoch, where the strategy asks for it).
fn image_shard<R: ImageRows>(
    e: &Experiment,
    pool: &ImagePool<R>,
    source: &ShardSource<R>,
    split_rows: Option<&[Vec<usize>]>,
    id: ClientId,
    prefit: Prefit,
) -> Result<ImageShard<R>> {
    let classes = e.data.classes().len();
    let not_images = || {
        FlintError::Config(format!(
            "strategy {} does not train on images",
            e.strategy.name()
        ))
    };
    match (&e.partition, split_rows) {
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
            if e.strategy.copy_data_epoch() && prefit == Prefit::Copy {
                let leaked = copy_data(source, all, pool.train.labels(), classes, sizes.test)?;
                shard.prefit = Some(leaked);
            }
            Ok(shard)
        }
        _ => Err(FlintError::Config(
            "image data needs partition.kind = \"dirichlet\" or a split by class".into(),
        )),
    }
}

/// The shared test set of images, held by the first client so that the server never holds data.
fn shared_test_images<R: ImageRows>(
    e: &Experiment,
    pool: &ImagePool<R>,
    id: ClientId,
) -> Option<ImageShard<R>> {
    let rows = e.strategy.global_test_rows().filter(|_| id == 1)?;
    Some(pool.shared_test(rows))
}

/// Table clients: the table loaded once, the shared test set held out before the partition
/// (so no client trains on it), each client's rows split into its train and test splits.
fn prepare_tables(
    e: &Experiment,
    data_dir: &Path,
    ids: &[ClientId],
    summaries: &Summaries,
) -> Result<Vec<Prepared>> {
    let dataset = e.data.load(data_dir, e.seed)?;
    let TableParts { rest, held, parts } = TableParts::of(e, &dataset)?;
    // A category column reaches the model as its training rate of class 1 (see `shard`): a
    // rule's cut on it is a cut on that rate.
    let names: Vec<String> = (0..dataset.features)
        .map(|i| match dataset.categorical.contains(&i) {
            true => format!("{} (rate of class 1)", dataset.feature_name(i)),
            false => dataset.feature_name(i),
        })
        .collect();
    ids.iter()
        .map(|&id| {
            let name = declared(e, id)?.name.clone();
            let rows = &parts[id as usize - 1];
            let (train_rows, test_rows) = client_split(e, &dataset, rows, id, &name)?;
            let shard = Shard::from_split(&dataset, &train_rows, &test_rows, e.data.scaling);
            // Its holder measures it as its own test rows: scaled by its own training split.
            let global = (id == 1 && rest.is_some())
                .then(|| Shard::from_split(&dataset, &train_rows, &held, e.data.scaling));
            let client = TableClient {
                id,
                name,
                shard,
                global,
                feature_names: names.clone(),
            };
            match &e.data.table_bits {
                Some(bits) => client.on_bits(e, bits, summaries),
                None => client.on_table(e, dataset.features, summaries),
            }
        })
        .collect()
}

/// A table over the clients: the shared test rows held out first (`data.global_test_fraction`),
/// then the rest partitioned; row indices into the whole table.
struct TableParts {
    rest: Option<Vec<usize>>,
    held: Vec<usize>,
    parts: Vec<Vec<usize>>,
}

impl TableParts {
    fn of(e: &Experiment, dataset: &Dataset) -> Result<TableParts> {
        let (rest, held) = match e.data.global_test {
            Some(fraction) => {
                let (rest, held) = crate::data::shard::held_out(dataset, fraction, e.seed)?;
                (Some(rest), held)
            }
            None => (None, Vec::new()),
        };
        let parts = match &rest {
            Some(rest) => partition(&dataset.select(rest), &e.partition, e.seed)
                .map_err(|err| after_held_out(err, rest.len(), dataset.len()))?
                .into_iter()
                .map(|part| part.into_iter().map(|i| rest[i]).collect())
                .collect(),
            None => partition(dataset, &e.partition, e.seed)?,
        };
        Ok(TableParts { rest, held, parts })
    }
}

/// A partition's error on the rows left once the shared test set was held out: its counts are
/// of those `rest` rows, not of the table's `all`, and it says so.
fn after_held_out(err: FlintError, rest: usize, all: usize) -> FlintError {
    match err {
        FlintError::Partition(m) => FlintError::Partition(format!(
            "{m} (the partition splits the {rest} of the table's {all} rows left after data.global_test_fraction held out the shared test set)"
        )),
        other => other,
    }
}

/// A client's training and test rows; each needs at least one.
fn client_split(
    e: &Experiment,
    dataset: &Dataset,
    rows: &[usize],
    id: ClientId,
    name: &str,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let (train, test) = crate::data::shard::split(dataset, rows, e.data.test_fraction, e.seed, id);
    if train.is_empty() || test.is_empty() {
        return Err(FlintError::Partition(format!(
            "client {name:?} has {} training and {} test rows of its {} rows; each split needs at least one (give it more data, fewer clients or another data.test_fraction)",
            train.len(),
            test.len(),
            rows.len()
        )));
    }
    Ok((train, test))
}

/// Before any client process starts: every client of a table gets a training and a test row
/// from the same partition and splits its process will draw. Says how many fall short.
pub fn check_table_shards(e: &Experiment, dataset: &Dataset) -> Result<()> {
    let parts = TableParts::of(e, dataset)?.parts;
    let splits = parts.iter().enumerate().map(|(k, rows)| {
        let id = k as ClientId + 1;
        client_split(e, dataset, rows, id, &e.clients[k].name)
    });
    every_client(splits, parts.len()).map(|_| ())
}

/// One table client's splits, before its model's input is chosen.
struct TableClient {
    id: ClientId,
    name: String,
    shard: Shard,
    global: Option<Shard>,
    feature_names: Vec<String>,
}

impl TableClient {
    /// A model that reads the table's values.
    fn on_table(self, e: &Experiment, features: usize, summaries: &Summaries) -> Result<Prepared> {
        let classes = e.data.classes().len();
        let half = e.strategy.table_client(features, classes)?;
        let counts = self
            .shard
            .train
            .class_counts()
            .iter()
            .map(|&c| c as u64)
            .collect();
        Ok(Prepared {
            id: self.id,
            summary: summaries.of(self.id, counts, self.shard.test.len(), features),
            half: Box::new(OnShard {
                shard: self.shard,
                half,
                global: self.global,
            }),
            name: self.name,
            feature_names: self.feature_names,
            bits: Vec::new(),
        })
    }

    /// A Tsetlin Machine on a table: the client's thermometer code, fitted to its own training
    /// split (or the experiment's cuts). TPFL's confidence rows are the training split: a table
    /// has no separate pool to draw them from.
    fn on_bits(
        self,
        e: &Experiment,
        bits: &crate::data::TableBits,
        summaries: &Summaries,
    ) -> Result<Prepared> {
        let classes = e.data.classes().len();
        let code = bits.thermometer(&self.shard.train)?;
        let train = code.encode(&self.shard.train);
        let shard = BitShard {
            confidence: Some(train.clone()),
            prefit: None,
            test: code.encode(&self.shard.test),
            train,
        };
        let half =
            e.strategy
                .bits_client(code.bits(), classes, e.seed, self.id, e.clients.len())?;
        let global = self.global.as_ref().map(|g| BitShard {
            train: code.encode(&g.test.select(&[])),
            test: code.encode(&g.test),
            confidence: None,
            prefit: None,
        });
        let counts = shard.train_class_counts();
        Ok(Prepared {
            id: self.id,
            summary: summaries.of(self.id, counts, shard.test.len(), code.bits()),
            half: Box::new(OnShard {
                shard,
                half,
                global,
            }),
            name: self.name,
            feature_names: self.feature_names,
            bits: code.conditions(),
        })
    }
}

fn in_client(name: &str, e: FlintError) -> FlintError {
    match e {
        FlintError::Partition(m) => {
            FlintError::Partition(format!("drawing the data of client {name:?}: {m}"))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition refused after the shared test set was held out counts the rows it had, and
    /// says where the others went.
    #[test]
    fn a_partition_refused_after_the_shared_test_set_says_it_was_held_out() {
        let text = "name = \"g\"\nstrategy = \"fedavg\"\nclient_count = 30\n\
                    [data]\nsource = \"synthetic\"\nsamples = 40\nglobal_test_fraction = 0.5\n";
        let e = Experiment::from_toml(text).unwrap();
        let dataset = e.data.load(Path::new("."), e.seed).unwrap();
        let err = check_table_shards(&e, &dataset).unwrap_err().to_string();
        assert!(
            err.contains("the 19 of the table's 40 rows left after data.global_test_fraction"),
            "{err}"
        );
    }
}
