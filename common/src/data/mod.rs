//! Datasets, how they are split over clients, and each client's train/test shard.

pub mod adult;
pub mod booleanize;
pub mod csv;
pub mod idx;
pub mod images;
pub mod mnist;
pub mod partition;
pub mod pixels;
pub mod registry;
pub mod shard;
pub mod synthetic;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::params::{ParamError, ParamResult, at_least_or_unset};

pub use partition::{ClientSection, ClientSpec, PartitionPlan, PartitionSection, partition};
pub use shard::{Scaling, Shard};

/// `[data]` as written; [`DataSection::check`] makes it a [`DataSpec`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// `synthetic`, `magic`, `breast-cancer`, `adult`, `mnist`, `fashion-mnist` or `csv`.
    pub source: SourceName,
    /// Fraction of each client's shard held out as its test split (default 0.2).
    #[schemars(extend("default" = 0.2))]
    pub test_fraction: Option<f64>,
    /// Fraction of a table held out, per class, before the partition, as one shared test set
    /// (held by the first client, which measures the model on it every round; strategies with
    /// one global model: fedavg, fedavg-ahp, blind-fcm, central, fedtmos, ensemble, fedtm).
    /// Default: none.
    pub global_test_fraction: Option<f64>,
    /// `local-zscore` (each client standardises with its own training statistics; the default
    /// for logistic regression), `local-minmax` (to [0, 1] with its own training range; the
    /// default for FCMs) or `none`.
    pub scaling: Option<Scaling>,
    // synthetic
    /// synthetic: rows generated (default 2000).
    #[serde(default, deserialize_with = "at_least_or_unset::<2, _, _>")]
    #[schemars(extend("default" = 2000))]
    pub samples: Option<usize>,
    /// synthetic: features generated (default 8); csv: the feature columns, which fix the
    /// model's size before any client joins (`flint run` and `flint grid` read them from the
    /// file and need none; a server started by hand refuses a CSV experiment without them,
    /// whatever the strategy).
    #[serde(default, deserialize_with = "at_least_or_unset::<1, _, _>")]
    pub features: Option<usize>,
    /// synthetic: distance between the two classes' means, in standard deviations (default 1.5).
    #[schemars(extend("default" = 1.5))]
    pub separation: Option<f64>,
    // csv
    /// Absolute, or relative to the data directory.
    pub path: Option<String>,
    /// The label's column: its 0-based index, or its name in the header line (default: the
    /// last column).
    pub label_column: Option<csv::Column>,
    /// Columns that are neither features nor the label (a record id, say): 0-based indexes or
    /// header names.
    pub skip_columns: Option<Vec<csv::Column>>,
    /// The labels in class-index order; when omitted, `flint run` reads them from the file
    /// (sorted) and writes them into `experiment.resolved.toml`.
    pub classes: Option<Vec<String>>,
    /// The first row names the columns; when omitted, the file's first line decides (a header
    /// where one of its feature cells is not a number), and `flint run` writes the decision
    /// into `experiment.resolved.toml`.
    pub header: Option<bool>,
    /// One character (default `,`; `"\t"` for tabs).
    #[schemars(extend("default" = ","))]
    pub delimiter: Option<String>,
    /// The values that mean "missing" (default `["", "?", "NA", "NaN"]`).
    pub missing: Option<Vec<String>>,
    /// `refuse` (default), `drop` the rows, or `impute` each client's own training mean.
    pub on_missing: Option<csv::Missing>,
    // mnist, fashion-mnist
    /// A pixel becomes 1 when it is above this value (default 75, as TPFL).
    #[schemars(extend("default" = 75.0))]
    pub threshold: Option<f64>,
    /// `threshold` (default) or `adaptive-gaussian`: OpenCV's adaptive Gaussian threshold, as
    /// FedTMOS booleanizes Fashion-MNIST (window `adaptive_block`, default 11, minus
    /// `adaptive_c`, default 2).
    pub binarize: Option<booleanize::BinarizeKind>,
    /// adaptive-gaussian: the window, odd, 3 to 27 (default 11).
    #[serde(default, deserialize_with = "at_least_or_unset::<3, _, _>")]
    #[schemars(extend("default" = 11))]
    pub adaptive_block: Option<usize>,
    /// adaptive-gaussian: subtracted from the window's weighted mean (default 2).
    #[schemars(extend("default" = 2.0))]
    pub adaptive_c: Option<f64>,
    // tables for a tsetlin machine
    /// `thermometer` (the default, and the only code, for a table under `model = "tm"`).
    pub booleanize: Option<booleanize::TableCode>,
    /// Cuts per feature, at the quantiles of each client's own training split (default 8).
    #[serde(default, deserialize_with = "at_least_or_unset::<0, _, _>")]
    #[schemars(extend("default" = 8))]
    pub levels: Option<usize>,
    /// Fixed cuts, one ascending list per feature, shared by every client (instead of
    /// `levels`): one literal space for the whole federation.
    pub cuts: Option<Vec<Vec<f64>>>,
}

/// `data.source`: where the rows come from. The keys each source reads are checked by
/// [`DataSection::check`]; the section stays one struct so that an error names its key and line.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SourceName {
    /// Generated from the run's seed (`samples`, `features`, `separation`).
    #[default]
    Synthetic,
    Magic,
    BreastCancer,
    Adult,
    /// MNIST-format images (`threshold`, `binarize`, `adaptive_block`, `adaptive_c`).
    Mnist,
    FashionMnist,
    /// A CSV file of your own (`path`, `label_column`, `classes`, `header`, `features`,
    /// `delimiter`, `missing`, `on_missing`).
    Csv,
}

impl std::str::FromStr for SourceName {
    type Err = serde::de::value::Error;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Self::deserialize(serde::de::value::StrDeserializer::new(s))
    }
}

impl std::fmt::Display for SourceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::params::name_of(self))
    }
}

/// A labelled table: row-major features, one class index per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub features: usize,
    pub x: Vec<f64>,
    pub y: Vec<u32>,
    pub classes: Vec<String>,
    /// Columns holding category codes (0, 1, …) rather than measurements; each client encodes
    /// them from its own training split (see `shard`).
    pub categorical: Vec<usize>,
    /// One name per feature, where the source has them (a header, a known dataset); empty
    /// otherwise ([`Dataset::feature_name`] then numbers them).
    pub feature_names: Vec<String>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    pub fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.features..(i + 1) * self.features]
    }

    /// The feature's name, or `x<i>` when the source has none.
    pub fn feature_name(&self, i: usize) -> String {
        self.feature_names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("x{i}"))
    }

    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes.len()];
        for &c in &self.y {
            counts[c as usize] += 1;
        }
        counts
    }

    /// The rows at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Dataset {
        let mut x = Vec::with_capacity(indices.len() * self.features);
        let mut y = Vec::with_capacity(indices.len());
        for &i in indices {
            x.extend_from_slice(self.row(i));
            y.push(self.y[i]);
        }
        Dataset {
            features: self.features,
            x,
            y,
            classes: self.classes.clone(),
            categorical: self.categorical.clone(),
            feature_names: self.feature_names.clone(),
        }
    }
}

/// Where an experiment's data comes from, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Generated from the run's seed; needs no files.
    Synthetic {
        samples: usize,
        features: usize,
        separation: f64,
    },
    /// A CSV file below the data directory (MAGIC and Breast Cancer are ones with their layout
    /// built in).
    Csv(csv::CsvSpec),
    /// Adult, both files, categorical attributes as codes (`adult`).
    Adult,
    /// MNIST-format images, booleanized as `binarize` says; loaded as bits for Tsetlin Machines
    /// ([`images::ImagePool`]), never as a table.
    Images {
        set: images::ImageSet,
        binarize: booleanize::Binarize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct DataSpec {
    pub source: Source,
    pub test_fraction: f64,
    pub scaling: Scaling,
    /// How a table becomes bits for a Tsetlin Machine; `None` for images and for other models.
    pub table_bits: Option<TableBits>,
    /// The fraction of a table held out as the shared test set (`data.global_test_fraction`).
    pub global_test: Option<f64>,
}

/// What a strategy's defaults depend on in the data, as far as the experiment fixes it: its
/// classes, whether it is a table (images have the papers' defaults), and where a table is read
/// as bits, the bits of one row (where the experiment fixes its features).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataShape {
    pub classes: usize,
    pub table: bool,
    pub row_bits: Option<usize>,
}

/// A table's thermometer code (see [`booleanize::Thermometer`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TableBits {
    /// `levels` cuts per feature from each client's own training split.
    Quantiles { levels: usize },
    /// The experiment's cuts, the same for every client.
    Fixed(booleanize::Thermometer),
}

impl TableBits {
    /// The client's code, fitted to its training split where the cuts are its own.
    pub fn thermometer(&self, train: &Dataset) -> Result<booleanize::Thermometer> {
        match self {
            TableBits::Quantiles { levels } => {
                Ok(booleanize::Thermometer::from_quantiles(train, *levels))
            }
            TableBits::Fixed(t) if t.cuts.len() == train.features => Ok(t.clone()),
            TableBits::Fixed(t) => Err(crate::FlintError::Config(format!(
                "data.cuts has {} lists, but the data has {} features",
                t.cuts.len(),
                train.features
            ))),
        }
    }

    /// Bits per row for `features` features.
    pub fn bits(&self, features: usize) -> usize {
        match self {
            TableBits::Quantiles { levels } => features * levels,
            TableBits::Fixed(t) => t.bits(),
        }
    }
}

/// What `[data]` reads where a key is left out (`scaling`: the model's own, see
/// [`DataSection::check`]; `classes` and `header`: the file's, see
/// [`DataSection::infer_from_data`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DataDefaults {
    pub test_fraction: f64,
    pub samples: usize,
    pub features: usize,
    pub separation: f64,
    pub delimiter: char,
    pub threshold: f64,
    pub adaptive_block: usize,
    pub adaptive_c: f64,
    pub levels: usize,
}

impl Default for DataDefaults {
    /// TPFL's threshold, OpenCV's window as FedTMOS uses it, eight cuts of a thermometer code.
    fn default() -> Self {
        DataDefaults {
            test_fraction: 0.2,
            samples: 2000,
            features: 8,
            separation: 1.5,
            delimiter: ',',
            threshold: 75.0,
            adaptive_block: 11,
            adaptive_c: 2.0,
            levels: 8,
        }
    }
}

impl DataSection {
    /// The checked spec; `scaling` defaults to `model_scaling` (each model's own default).
    pub fn check(&self, model_scaling: Scaling) -> ParamResult<DataSpec> {
        let bad = ParamError::Inconsistent;
        let test_fraction = self
            .test_fraction
            .unwrap_or(DataDefaults::default().test_fraction);
        let test_fraction = crate::params::require(
            "data.test_fraction",
            "between 0 and 1 (exclusive)",
            test_fraction,
            test_fraction > 0.0 && test_fraction < 1.0,
        )?;
        let scaling = self.scaling.unwrap_or(model_scaling);
        let table_bits = self.table_bits()?;
        let global_test = match self.global_test_fraction {
            None => None,
            Some(f) => Some(crate::params::require(
                "data.global_test_fraction",
                "between 0 and 1 (exclusive)",
                f,
                f > 0.0 && f < 1.0,
            )?),
        };
        let source = self.source()?;
        if global_test.is_some() && matches!(source, Source::Images { .. }) {
            return Err(bad(
                "data.global_test_fraction applies to tables; an image strategy's shared test set is the official test images".into(),
            ));
        }
        if table_bits.is_some() && matches!(source, Source::Images { .. }) {
            return Err(bad(
                "data.booleanize, data.levels and data.cuts apply to tables; images are booleanized by data.binarize".into(),
            ));
        }
        Ok(DataSpec {
            source,
            test_fraction,
            scaling,
            table_bits,
            global_test,
        })
    }

    /// The source and the keys that only it reads.
    fn source(&self) -> ParamResult<Source> {
        match self.source {
            SourceName::Synthetic => self.synthetic(),
            SourceName::Magic => self.only(&[]).map(|()| Source::Csv(registry::magic())),
            SourceName::BreastCancer => self
                .only(&[])
                .map(|()| Source::Csv(registry::breast_cancer())),
            SourceName::Adult => self.only(&[]).map(|()| Source::Adult),
            SourceName::Mnist | SourceName::FashionMnist => self.images(),
            SourceName::Csv => self.csv(),
        }
    }

    /// A key given for a source that does not read it is refused.
    fn only(&self, allowed: &[&str]) -> ParamResult<()> {
        let s = self;
        let given = [
            ("samples", s.samples.is_some()),
            ("features", s.features.is_some()),
            ("separation", s.separation.is_some()),
            ("path", s.path.is_some()),
            ("label_column", s.label_column.is_some()),
            ("skip_columns", s.skip_columns.is_some()),
            ("classes", s.classes.is_some()),
            ("header", s.header.is_some()),
            ("delimiter", s.delimiter.is_some()),
            ("missing", s.missing.is_some()),
            ("on_missing", s.on_missing.is_some()),
            ("threshold", s.threshold.is_some()),
            ("binarize", s.binarize.is_some()),
            ("adaptive_block", s.adaptive_block.is_some()),
            ("adaptive_c", s.adaptive_c.is_some()),
        ];
        match given.iter().find(|(k, set)| *set && !allowed.contains(k)) {
            Some((k, _)) => Err(ParamError::Inconsistent(format!(
                "data.{k} does not apply to source \"{}\"",
                s.source
            ))),
            None => Ok(()),
        }
    }

    fn synthetic(&self) -> ParamResult<Source> {
        let (s, bad) = (self, ParamError::Inconsistent);
        self.only(&["samples", "features", "separation"])?;
        let d = DataDefaults::default();
        let samples = s.samples.unwrap_or(d.samples);
        let features = s.features.unwrap_or(d.features);
        let separation = s.separation.unwrap_or(d.separation);
        if samples < 2 || features == 0 {
            return Err(bad(format!(
                "synthetic data needs at least 2 samples and 1 feature, got {samples} and {features}"
            )));
        }
        if !(separation.is_finite() && separation >= 0.0) {
            return Err(bad(format!(
                "data.separation must be a non-negative number, got {separation}"
            )));
        }
        Ok(Source::Synthetic {
            samples,
            features,
            separation,
        })
    }

    /// MNIST-format images and how they become bits.
    fn images(&self) -> ParamResult<Source> {
        let (s, bad) = (self, ParamError::Inconsistent);
        self.only(&["threshold", "binarize", "adaptive_block", "adaptive_c"])?;
        let binarize = match s.binarize.unwrap_or_default() {
            booleanize::BinarizeKind::Threshold => {
                if s.adaptive_block.is_some() || s.adaptive_c.is_some() {
                    return Err(bad(
                        "data.adaptive_block and data.adaptive_c apply to binarize = \"adaptive-gaussian\"".into(),
                    ));
                }
                let threshold = s.threshold.unwrap_or(DataDefaults::default().threshold);
                if !(0.0..255.0).contains(&threshold) {
                    return Err(bad(format!(
                        "data.threshold must be a pixel value in [0, 255), got {threshold}"
                    )));
                }
                booleanize::Binarize::Threshold(booleanize::Threshold::Above(threshold))
            }
            booleanize::BinarizeKind::AdaptiveGaussian => {
                if s.threshold.is_some() {
                    return Err(bad(
                        "data.threshold applies to binarize = \"threshold\", not adaptive-gaussian"
                            .into(),
                    ));
                }
                let d = DataDefaults::default();
                let block = s.adaptive_block.unwrap_or(d.adaptive_block);
                if block < 3 || block.is_multiple_of(2) || block > 27 {
                    return Err(bad(format!(
                        "data.adaptive_block must be odd, 3 to 27, got {block}"
                    )));
                }
                let c = s.adaptive_c.unwrap_or(d.adaptive_c);
                if !(c.is_finite() && c.abs() <= 255.0) {
                    return Err(bad(format!(
                        "data.adaptive_c must be a pixel difference in [-255, 255], got {c}"
                    )));
                }
                booleanize::Binarize::AdaptiveGaussian { block, c }
            }
        };
        let set = if s.source == SourceName::Mnist {
            images::ImageSet::Mnist
        } else {
            images::ImageSet::FashionMnist
        };
        Ok(Source::Images { set, binarize })
    }

    fn csv(&self) -> ParamResult<Source> {
        let (s, bad) = (self, ParamError::Inconsistent);
        self.only(&[
            "path",
            "label_column",
            "skip_columns",
            "classes",
            "header",
            "features",
            "delimiter",
            "missing",
            "on_missing",
        ])?;
        let path = s
            .path
            .clone()
            .ok_or_else(|| bad("data.path is needed for source csv".into()))?;
        let classes = s.classes.clone().ok_or_else(|| {
            bad("data.classes is needed for source csv: list the labels, or let `flint run` read them from the file".into())
        })?;
        if classes.len() < 2 {
            return Err(bad("data.classes needs at least two labels".into()));
        }
        if let Some(dup) = classes
            .iter()
            .enumerate()
            .find_map(|(i, c)| classes[..i].contains(c).then_some(c))
        {
            return Err(bad(format!("data.classes lists {dup:?} twice")));
        }
        let comma = DataDefaults::default().delimiter.to_string();
        let delimiter = match s.delimiter.as_deref().unwrap_or(&comma).as_bytes() {
            [b] if b.is_ascii() && *b != b'"' && *b != b'\n' && *b != b'\r' => *b,
            _ => {
                return Err(bad(format!(
                    "data.delimiter must be one ASCII character other than a quote or a line break, got {:?}",
                    s.delimiter.as_deref().unwrap_or_default()
                )));
            }
        };
        let missing = s
            .missing
            .clone()
            .unwrap_or_else(|| csv::DEFAULT_MISSING.iter().map(|t| t.to_string()).collect());
        if let Some(c) = classes.iter().find(|c| missing.contains(c)) {
            return Err(bad(format!(
                "data.classes has {c:?}, which data.missing reads as a missing value"
            )));
        }
        let (label_column, skip_columns, named) = s.columns();
        let by_name = named != csv::Named::default();
        if by_name && s.header == Some(false) {
            return Err(bad(
                "data.label_column or data.skip_columns names a column, but data.header = false: name columns by their 0-based index instead".into(),
            ));
        }
        Ok(Source::Csv(csv::CsvSpec {
            label_column,
            skip_columns,
            named,
            // A column named: the first line is the header that names it.
            header: s.header.unwrap_or(by_name),
            detect_header: s.header.is_none() && !by_name,
            features: s.features,
            delimiter,
            missing,
            on_missing: s.on_missing.unwrap_or_default(),
            ..csv::CsvSpec::new(path, classes)
        }))
    }

    /// The label's and skipped columns, split into indexes and names.
    fn columns(&self) -> (Option<usize>, Vec<usize>, csv::Named) {
        let mut named = csv::Named::default();
        let label_column = match &self.label_column {
            Some(csv::Column::Index(i)) => Some(*i),
            Some(csv::Column::Name(n)) => {
                named.label = Some(n.clone());
                None
            }
            None => None,
        };
        let mut skip = Vec::new();
        for c in self.skip_columns.iter().flatten() {
            match c {
                csv::Column::Index(i) => skip.push(*i),
                csv::Column::Name(n) => named.skip.push(n.clone()),
            }
        }
        (label_column, skip, named)
    }

    fn table_bits(&self) -> ParamResult<Option<TableBits>> {
        let bad = ParamError::Inconsistent;
        if self.booleanize.is_none() && self.levels.is_none() && self.cuts.is_none() {
            return Ok(None);
        }
        match (&self.cuts, self.levels) {
            (Some(_), Some(_)) => Err(bad(
                "data.cuts fixes every cut: data.levels does not apply beside it".into(),
            )),
            (Some(cuts), None) => {
                for (f, list) in cuts.iter().enumerate() {
                    if list.is_empty() || list.iter().any(|c| !c.is_finite()) {
                        return Err(bad(format!(
                            "data.cuts[{f}] must hold at least one finite cut"
                        )));
                    }
                    if list.windows(2).any(|w| w[0] > w[1]) {
                        return Err(bad(format!("data.cuts[{f}] must be ascending")));
                    }
                }
                Ok(Some(TableBits::Fixed(booleanize::Thermometer {
                    cuts: cuts.clone(),
                })))
            }
            (None, levels) => {
                let levels = levels.unwrap_or(DataDefaults::default().levels);
                crate::params::require(
                    "data.levels",
                    "between 1 and 64",
                    levels,
                    (1..=64).contains(&levels),
                )?;
                Ok(Some(TableBits::Quantiles { levels }))
            }
        }
    }
}

impl DataSection {
    /// The section as the run reads it: the defaults of the source's keys written in.
    pub fn resolved(&self, data: &DataSpec) -> DataSection {
        let mut d = self.clone();
        match &data.source {
            Source::Images { binarize, .. } => match *binarize {
                booleanize::Binarize::Threshold(booleanize::Threshold::Above(t)) => {
                    d.binarize
                        .get_or_insert(booleanize::BinarizeKind::Threshold);
                    d.threshold.get_or_insert(t);
                }
                booleanize::Binarize::AdaptiveGaussian { block, c } => {
                    d.adaptive_block.get_or_insert(block);
                    d.adaptive_c.get_or_insert(c);
                }
                booleanize::Binarize::Threshold(_) => {}
            },
            // Images keep the official test split; a table's clients split their own rows.
            _ => {
                d.test_fraction.get_or_insert(data.test_fraction);
            }
        }
        // A Tsetlin Machine's data is bits, not scaled.
        if data.table_bits.is_none() && !data.is_images() {
            d.scaling.get_or_insert(data.scaling);
        }
        if let Some(TableBits::Quantiles { levels }) = &data.table_bits {
            d.booleanize
                .get_or_insert(booleanize::TableCode::Thermometer);
            d.levels.get_or_insert(*levels);
        }
        d
    }

    /// Fills in what a CSV source leaves to its file, from the file below `data_dir`: `classes`
    /// (sorted; numerically when every label is a number) and `features`, so that the server
    /// sizes the model by the experiment, never by a client's word; and `header`, where not
    /// given, as the file's first line decides. Says what it read.
    pub fn infer_from_data(&mut self, data_dir: &Path) -> Result<Inferred> {
        if self.source != SourceName::Csv || (self.classes.is_some() && self.features.is_some()) {
            return Ok(Inferred::default());
        }
        // The section is checked with a stand-in list, so that its other keys are read as
        // the run will read them.
        let probe = DataSection {
            classes: Some(vec!["\0a".into(), "\0b".into()]),
            ..self.clone()
        };
        let spec = probe
            .check(Scaling::None)
            .map_err(|e| crate::FlintError::Config(e.to_string()))?;
        let Source::Csv(spec) = spec.source else {
            return Ok(Inferred::default());
        };
        let shape = csv::infer_shape(&data_dir.join(&spec.path), &spec)?;
        self.features.get_or_insert(shape.features);
        let header = self.header.is_none().then_some(shape.header);
        self.header.get_or_insert(shape.header);
        if self.classes.is_some() {
            return Ok(Inferred {
                classes: false,
                header,
            });
        }
        self.classes = Some(shape.classes);
        Ok(Inferred {
            classes: true,
            header,
        })
    }
}

/// What [`DataSection::infer_from_data`] read from the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inferred {
    /// The classes came from the file.
    pub classes: bool,
    /// `data.header` was not given: whether the file's first line was read as a header.
    pub header: Option<bool>,
}

impl DataSpec {
    /// The number of features the model sees, from the experiment alone, where it says it: the
    /// server sizes models by it and refuses a client that claims another. `None` for a CSV
    /// without `data.features`.
    pub fn features(&self) -> Option<usize> {
        let columns = self.columns()?;
        Some(match &self.table_bits {
            Some(bits) => bits.bits(columns),
            None => columns,
        })
    }

    /// The number of features the source has, before any booleanizing of a table (with fixed
    /// cuts, one list per feature, where the source does not say).
    pub fn columns(&self) -> Option<usize> {
        match (self.source_columns(), &self.table_bits) {
            (Some(n), _) => Some(n),
            (None, Some(TableBits::Fixed(t))) => Some(t.cuts.len()),
            (None, _) => None,
        }
    }

    /// The number of features the source itself declares (none for a CSV without
    /// `data.features`).
    pub fn source_columns(&self) -> Option<usize> {
        match &self.source {
            Source::Synthetic { features, .. } => Some(*features),
            Source::Csv(c) => c.features,
            Source::Adult => Some(adult::feature_count()),
            // One bit per pixel, whichever way it is booleanized.
            Source::Images { set, .. } => Some(set.pixels()),
        }
    }

    pub fn classes(&self) -> Vec<String> {
        match &self.source {
            Source::Synthetic { .. } => vec!["0".into(), "1".into()],
            Source::Csv(c) => c.classes.clone(),
            Source::Adult => adult::CLASSES.iter().map(|c| c.to_string()).collect(),
            Source::Images { set, .. } => set.classes(),
        }
    }

    /// The files the source reads, relative to the data directory (none for synthetic data).
    pub fn files(&self) -> Vec<std::path::PathBuf> {
        match &self.source {
            Source::Synthetic { .. } => Vec::new(),
            Source::Csv(c) => vec![c.path.clone().into()],
            Source::Adult => vec![adult::TRAIN_FILE.into(), adult::TEST_FILE.into()],
            Source::Images { set, .. } => [mnist::Split::Train, mnist::Split::Test]
                .into_iter()
                .flat_map(|s| s.files())
                .map(|f| Path::new(set.dir()).join(f))
                .collect(),
        }
    }

    /// Names the first of the source's files missing below `data_dir`, so that a launcher
    /// stops before it starts any process.
    pub fn check_files(&self, data_dir: &Path) -> Result<()> {
        match self
            .files()
            .into_iter()
            .find(|f| !data_dir.join(f).is_file())
        {
            None => Ok(()),
            Some(file) => Err(crate::FlintError::MissingData {
                file,
                dir: data_dir.to_path_buf(),
            }),
        }
    }

    /// True for image sources, which load as bits ([`DataSpec::load_images`]).
    pub fn is_images(&self) -> bool {
        matches!(self.source, Source::Images { .. })
    }

    /// The data's short name, one per dataset whatever the model reads of it (`flint grid`
    /// compares the strategies run on one dataset).
    pub fn name(&self) -> String {
        match &self.source {
            Source::Synthetic { .. } => "synthetic".into(),
            Source::Csv(c) => std::path::Path::new(&c.path)
                .file_stem()
                .map_or_else(|| c.path.clone(), |s| s.to_string_lossy().into_owned()),
            Source::Adult => "adult".into(),
            Source::Images {
                set: images::ImageSet::Mnist,
                ..
            } => "mnist".into(),
            Source::Images {
                set: images::ImageSet::FashionMnist,
                ..
            } => "fashion-mnist".into(),
        }
    }

    /// What a strategy's settings depend on in this data.
    pub fn shape(&self) -> DataShape {
        DataShape {
            classes: self.classes().len(),
            table: !self.is_images(),
            row_bits: self.table_bits.as_ref().and(self.features()),
        }
    }

    /// Loads and booleanizes both splits of an image source.
    pub fn load_images(&self, data_dir: &Path) -> Result<images::ImagePool> {
        match &self.source {
            Source::Images { set, binarize } => images::ImagePool::load(data_dir, *set, *binarize),
            _ => Err(crate::FlintError::Config(
                "this data source is a table, not images".into(),
            )),
        }
    }

    /// Loads both splits of an image source as bytes (the neural baselines').
    pub fn load_pixels(&self, data_dir: &Path) -> Result<images::ImagePool<pixels::PixelRows>> {
        match &self.source {
            Source::Images { set, .. } => images::ImagePool::load_pixels(data_dir, *set),
            _ => Err(crate::FlintError::Config(
                "a neural network reads images; this data source is a table".into(),
            )),
        }
    }

    /// Loads (or generates) the whole dataset; files resolve below `data_dir`. Image sources
    /// load with [`DataSpec::load_images`].
    pub fn load(&self, data_dir: &Path, seed: u64) -> Result<Dataset> {
        match &self.source {
            Source::Images { set, .. } => Err(crate::FlintError::Config(format!(
                "{} loads as booleanized images for a Tsetlin Machine, not as a table",
                set.dir()
            ))),
            Source::Synthetic {
                samples,
                features,
                separation,
            } => Ok(synthetic::generate(*samples, *features, *separation, seed)),
            Source::Csv(spec) => csv::load(&data_dir.join(&spec.path), spec),
            Source::Adult => adult::load(data_dir),
        }
    }
}

/// `FLINT_DATA_DIR`, else `./data`.
pub fn default_data_dir() -> std::path::PathBuf {
    std::env::var_os("FLINT_DATA_DIR")
        .map(Into::into)
        .unwrap_or_else(|| "data".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: &str) -> DataSpec {
        DataSection {
            source: source.parse().unwrap(),
            ..DataSection::default()
        }
        .check(Scaling::LocalZScore)
        .unwrap()
    }

    #[test]
    fn a_missing_file_is_named_with_the_data_directory_before_anything_loads() {
        let dir = std::env::temp_dir().join(format!("flint-check-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("fashion-mnist")).unwrap();
        let fashion = spec("fashion-mnist");
        assert_eq!(fashion.files().len(), 4);
        for f in &fashion.files()[..3] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let err = fashion.check_files(&dir).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot find fashion-mnist/t10k-labels-idx1-ubyte.gz in the data directory {}; set FLINT_DATA_DIR or --data-dir",
                dir.display()
            )
        );
        std::fs::write(dir.join(&fashion.files()[3]), b"").unwrap();
        assert!(fashion.check_files(&dir).is_ok());
        assert!(spec("adult").check_files(&dir).is_err());
        assert!(
            spec("synthetic")
                .check_files(Path::new("/nonexistent"))
                .is_ok()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
