//! The model a client holds at the end of a run, as a file a researcher reads: coefficients
//! and maps with the names of their features, concepts and classes.
//!
//! Format `flint-model`, version 2, JSON: `{format, version, client, classes, features,
//! scaling, model: {kind, …}}`. A reader refuses another format or a newer version. Version 2
//! stores a composite's machines once, by content, below `machines/` beside the client files
//! (the ensemble's ten machines are every client's: written once, not once per client);
//! version 1's inline machines still read.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fcm::Fcm;
use super::logreg::LogReg;
use super::tm::coalesced::CoalescedTm;

pub const FORMAT: &str = "flint-model";
pub const VERSION: u32 = 2;

/// Where a models directory stores composites' machines: `<id>.json` (its clauses) and
/// `<id>.tm` (its checkpoint).
pub const MACHINES_DIR: &str = "machines";

/// What a client half exports: the model alone, without names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum KeptModel {
    /// Logistic regression: one row of weights and one bias per output (one output, for class
    /// 1 against class 0, with two classes; one per class, a softmax, with more).
    Logreg {
        weights: Vec<Vec<f64>>,
        biases: Vec<f64>,
    },
    /// A Fuzzy Cognitive Map: the adjacency matrix over the concepts (the features, then the
    /// classes), row = source, column = target.
    Fcm { matrix: Vec<Vec<f64>> },
    /// A Tsetlin Machine as rules: every clause that includes a literal, with its vote per
    /// class. A class's sum on an input is the sum of the votes of its clauses that fire
    /// (every literal true); the prediction is the class of the largest sum, the lowest on a
    /// tie. Clauses that include nothing never fire at inference and are left out.
    Tm {
        /// Input bits the machine reads.
        bits: usize,
        clauses: Vec<KeptClause>,
        /// The machine's binary checkpoint (`common/src/model/tm/checkpoint.rs`), written
        /// beside the JSON as `<client>.tm`.
        #[serde(skip)]
        checkpoint: Vec<u8>,
    },
    /// FedTMOS's composite: φ convolutional machines. A clause fires on an image when its
    /// literals all hold on some W × W patch; a machine's class sum is the sum of its firing
    /// clauses' votes, and the composite adds each machine's sums scaled by their spread
    /// (`normalization`, FedTMOS eq. 3 or the code's per batch; `clamp`: first to [−T, T]).
    Composite {
        /// The names of a patch's input bits: its pixels `p(dy,dx)`, then where it sits
        /// (`y > k`, `x > k`).
        literals: Vec<String>,
        normalization: String,
        clamp: bool,
        /// One list of clauses per machine; a clause votes for one class (a weight of 0
        /// for the others). Empty in a version 2 file, which names them in `stored`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        machines: Vec<Vec<KeptClause>>,
        /// Each machine's binary checkpoint, written as `machines/<id>.tm`.
        #[serde(skip)]
        checkpoints: Vec<Vec<u8>>,
        /// The machines' ids below `machines/`, in order ([`ModelFile::for_disk`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stored: Vec<String>,
    },
    /// A neural network (the baselines'): it has no rules, so the file says what it is, layer
    /// by layer; its parameters (float32, little-endian, PyTorch's order) are written beside
    /// the JSON as `<client>.params`.
    Network {
        architecture: String,
        layers: Vec<KeptLayer>,
        #[serde(skip)]
        params: Vec<u8>,
    },
}

/// One layer of a kept network, as `flint explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptLayer {
    /// `conv 1→20 5×5`, `max-pool 2×2`, `relu`, `dense 800→500`.
    pub layer: String,
    /// Its output for one sample: `20×24×24`, `500`.
    pub output: String,
    pub parameters: usize,
}

fn kept_layer(l: &super::cnn::arch::Placed) -> KeptLayer {
    use super::cnn::arch::{Layer, Shape};
    let shape = |s: Shape| match s {
        Shape::Spatial { c, h, w } => format!("{c}×{h}×{w}"),
        Shape::Flat(n) => n.to_string(),
    };
    let channels = |s: Shape| match s {
        Shape::Spatial { c, .. } => c,
        Shape::Flat(n) => n,
    };
    let layer = match l.layer {
        Layer::Conv { out, kernel, .. } => {
            format!("conv {}→{out} {kernel}×{kernel}", channels(l.input))
        }
        Layer::MaxPool { size } => format!("max-pool {size}×{size}"),
        Layer::Pad { by } => format!("zero padding {by}"),
        Layer::Relu => "relu".into(),
        Layer::Dense { out, .. } => format!("dense {}→{out}", l.input.len()),
    };
    KeptLayer {
        layer,
        output: shape(l.output),
        parameters: l.params,
    }
}

/// A network has no rules to show: what it is, layer by layer.
fn explain_network(architecture: &str, layers: &[KeptLayer]) -> String {
    let total: usize = layers.iter().map(|l| l.parameters).sum();
    let mib = total as f64 * 4.0 / f64::from(1u32 << 20);
    let mut out = format!(
        "convolutional network {architecture}, {total} parameters ({mib:.3} MiB as float32); a network has no rules to show, only its layers:\n"
    );
    for l in layers {
        out += &format!(
            "  {:<18} → {:<10} {:>9} parameters\n",
            l.layer, l.output, l.parameters
        );
    }
    out
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptClause {
    pub literals: Vec<Literal>,
    /// One vote per class.
    pub weights: Vec<i32>,
}

/// Input bit `bit` set, or with `not`, clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Literal {
    pub bit: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not: bool,
}

/// What an input bit means on a table: set when the raw value of `feature` is above `above`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub feature: usize,
    pub above: f64,
}

impl KeptModel {
    pub fn logreg(model: &LogReg) -> KeptModel {
        let features = model.features();
        KeptModel::Logreg {
            weights: model
                .weights
                .chunks(features.max(1))
                .map(<[f64]>::to_vec)
                .collect(),
            biases: model.biases.clone(),
        }
    }

    /// A coalesced machine (one clause bank shared by the classes, a weight per class).
    pub fn coalesced(tm: &CoalescedTm) -> KeptModel {
        let bank = tm.bank();
        let bits = bank.features();
        let clauses = (0..tm.clauses())
            .filter_map(|j| {
                let literals = Self::literals(bank, j);
                (!literals.is_empty()).then(|| KeptClause {
                    literals,
                    weights: (0..tm.classes()).map(|c| tm.class_weights(c)[j]).collect(),
                })
            })
            .collect();
        KeptModel::Tm {
            bits,
            clauses,
            checkpoint: tm.to_bytes(),
        }
    }

    /// The literals a clause of `bank`'s clause `j` includes.
    fn literals(bank: &super::tm::ClauseBank, j: usize) -> Vec<Literal> {
        let (bits, fw) = (bank.features(), bank.feature_words());
        let include = bank.include(j);
        (0..2 * bits)
            .filter(|&l| {
                let (word, bit) = (l % bits / 64 + fw * (l / bits), l % bits % 64);
                include[word] >> bit & 1 == 1
            })
            .map(|l| Literal {
                bit: l % bits,
                not: l >= bits,
            })
            .collect()
    }

    /// A composite of convolutional machines (`composite` as written in the download).
    pub fn composite(
        machines: &[super::tm::conv::ConvTm],
        options: super::tm::composite::CompositeOptions,
    ) -> Option<KeptModel> {
        let first = machines.first()?;
        let spec = *first.spec();
        let (w, pixels) = (spec.patch, spec.patch * spec.patch * spec.channels);
        let literals = (0..spec.patch_features())
            .map(|k| match k {
                k if k < pixels => match spec.channels {
                    1 => format!("p({},{})", k / w, k % w),
                    c => format!("p({},{},{})", k / c / w, k / c % w, k % c),
                },
                k if k < pixels + spec.height - w => format!("y > {}", k - pixels),
                k => format!("x > {}", k - pixels - (spec.height - w)),
            })
            .collect();
        let mut kept = Vec::new();
        let mut checkpoints = Vec::new();
        for m in machines {
            let tm = m.multiclass()?;
            let classes = tm.classes();
            let mut clauses = Vec::new();
            for c in 0..classes {
                let bank = tm.bank(c);
                for (j, &weight) in tm.class_weights(c).iter().enumerate() {
                    let literals = Self::literals(bank, j);
                    if literals.is_empty() || weight == 0 {
                        continue;
                    }
                    let mut weights = vec![0; classes];
                    weights[c] = super::tm::multiclass::MultiClassTm::polarity(j)
                        * i32::try_from(weight).unwrap_or(i32::MAX);
                    clauses.push(KeptClause { literals, weights });
                }
            }
            kept.push(clauses);
            checkpoints.push(tm.to_bytes());
        }
        Some(KeptModel::Composite {
            literals,
            normalization: crate::params::name_of(&options.normalization),
            clamp: options.clamp,
            machines: kept,
            checkpoints,
            stored: Vec::new(),
        })
    }

    /// Whether every number is finite: a diverged model (NaN weights) is not a model to keep,
    /// and JSON cannot hold it.
    pub fn is_finite(&self) -> bool {
        match self {
            KeptModel::Logreg { weights, biases } => weights
                .iter()
                .flatten()
                .chain(biases)
                .all(|v| v.is_finite()),
            KeptModel::Fcm { matrix } => matrix.iter().flatten().all(|v| v.is_finite()),
            KeptModel::Tm { .. } | KeptModel::Composite { .. } => true,
            KeptModel::Network { params, .. } => params
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
        }
    }

    /// Its machines without a clause, and whether every weight is finite.
    pub fn health(&self) -> crate::degenerate::ModelHealth {
        let (machines, empty_machines) = match self {
            KeptModel::Tm { clauses, .. } => (1, usize::from(clauses.is_empty())),
            KeptModel::Composite { machines, .. } => (
                machines.len(),
                machines.iter().filter(|m| m.is_empty()).count(),
            ),
            KeptModel::Logreg { .. } | KeptModel::Fcm { .. } | KeptModel::Network { .. } => (0, 0),
        };
        crate::degenerate::ModelHealth {
            machines,
            empty_machines,
            not_finite: !self.is_finite(),
        }
    }

    /// The binary checkpoint to write beside the file, with its file name's suffix (a
    /// composite's machines go below `machines/`: [`ModelFile::for_disk`]).
    pub fn checkpoints(&self) -> Vec<(String, &[u8])> {
        match self {
            KeptModel::Tm { checkpoint, .. } => vec![(".tm".into(), checkpoint.as_slice())],
            KeptModel::Network { params, .. } => vec![(".params".into(), params.as_slice())],
            _ => Vec::new(),
        }
    }

    /// A network's layers and parameters.
    pub fn network(cnn: &super::cnn::Cnn) -> KeptModel {
        KeptModel::Network {
            architecture: crate::params::name_of(&cnn.arch.name),
            layers: cnn.arch.layers.iter().map(kept_layer).collect(),
            params: cnn.params.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    pub fn fcm(model: &Fcm) -> KeptModel {
        let n = model.concepts();
        KeptModel::Fcm {
            matrix: model.matrix().chunks(n).map(<[f64]>::to_vec).collect(),
        }
    }
}

/// A composite machine's clause as text: its plain literals (pixels), then each thresholded
/// input (`y > 3`, or on a table `width > 1.7`) read as one interval (`y > 3 AND NOT y > 9`
/// reads `3 < y <= 9`), in the order they first appear.
fn patch_rule(names: &[String], clause: &KeptClause) -> String {
    let mut terms = Vec::new();
    let mut bounds: Vec<(&str, Option<f64>, Option<f64>)> = Vec::new();
    for l in &clause.literals {
        let name = &names[l.bit];
        let threshold = name
            .rsplit_once(" > ")
            .and_then(|(input, k)| Some((input, k.parse::<f64>().ok()?)));
        let Some((input, k)) = threshold else {
            terms.push(if l.not {
                format!("NOT {name}")
            } else {
                name.clone()
            });
            continue;
        };
        let at = match bounds.iter().position(|(n, _, _)| *n == input) {
            Some(at) => at,
            None => {
                bounds.push((input, None, None));
                bounds.len() - 1
            }
        };
        let (_, low, high) = &mut bounds[at];
        if l.not {
            *high = Some(high.map_or(k, |h| h.min(k)));
        } else {
            *low = Some(low.map_or(k, |v| v.max(k)));
        }
    }
    for (input, low, high) in bounds {
        terms.push(match (low, high) {
            (Some(low), Some(high)) => format!("{low} < {input} <= {high}"),
            (Some(low), None) => format!("{input} > {low}"),
            (None, Some(high)) => format!("{input} <= {high}"),
            (None, None) => unreachable!("an input enters with a bound"),
        });
    }
    terms.join(" AND ")
}

/// Every clause votes per class and includes at least one literal of `bits` inputs.
fn clauses_fit(clauses: &[KeptClause], classes: usize, bits: usize) -> bool {
    clauses.iter().all(|c| {
        c.weights.len() == classes
            && !c.literals.is_empty()
            && c.literals.iter().all(|l| l.bit < bits)
    })
}

/// One machine of a composite as stored once below `machines/`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMachine {
    pub id: String,
    /// `<id>.json`: its clauses.
    pub rules: Vec<u8>,
    /// `<id>.tm`: its checkpoint.
    pub checkpoint: Vec<u8>,
}

/// A kept model with the names that make it readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub format: String,
    pub version: u32,
    pub client: String,
    pub classes: Vec<String>,
    /// One per feature (`x<i>` where the data has no names).
    pub features: Vec<String>,
    /// How the client scaled its features before the model saw them (`local-zscore`: the
    /// coefficients are per standard deviation of the client's own training split).
    pub scaling: String,
    /// For a Tsetlin Machine on a table, what each input bit means (its thermometer code);
    /// empty where the features are the bits (booleanized images).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    pub model: KeptModel,
}

impl ModelFile {
    pub fn new(
        client: &str,
        classes: Vec<String>,
        features: Vec<String>,
        scaling: String,
        model: KeptModel,
    ) -> ModelFile {
        ModelFile {
            format: FORMAT.into(),
            version: VERSION,
            client: client.into(),
            classes,
            features,
            scaling,
            conditions: Vec::new(),
            model,
        }
    }

    /// What each input bit means on a table. A composite's machines read a row as one patch:
    /// their literals are named after the conditions themselves.
    pub fn with_conditions(mut self, conditions: Vec<Condition>) -> ModelFile {
        if let KeptModel::Composite { literals, .. } = &mut self.model {
            if literals.len() == conditions.len() {
                for (name, c) in literals.iter_mut().zip(&conditions) {
                    *name = format!("{} > {}", self.features[c.feature], c.above);
                }
            }
            return self;
        }
        ModelFile { conditions, ..self }
    }

    /// A clause as a conjunction over the features. On a table, a feature's literals make
    /// one interval (`x > 1.7 AND NOT x > 6.1` reads `1.7 < x <= 6.1`); bits that are the
    /// features read `pixel(3,4)` or `NOT pixel(3,4)`.
    fn rule_text(&self, clause: &KeptClause) -> String {
        if self.conditions.is_empty() {
            let terms: Vec<String> = clause
                .literals
                .iter()
                .map(|l| {
                    let name = &self.features[l.bit];
                    if l.not {
                        format!("NOT {name}")
                    } else {
                        name.clone()
                    }
                })
                .collect();
            return terms.join(" AND ");
        }
        // Per feature, in feature order: the largest cut it must be above, the smallest it
        // must not be above.
        let mut bounds: std::collections::BTreeMap<usize, (Option<f64>, Option<f64>)> =
            std::collections::BTreeMap::new();
        for l in &clause.literals {
            let c = self.conditions[l.bit];
            let (low, high) = bounds.entry(c.feature).or_default();
            if l.not {
                *high = Some(high.map_or(c.above, |h| h.min(c.above)));
            } else {
                *low = Some(low.map_or(c.above, |v| v.max(c.above)));
            }
        }
        let terms: Vec<String> = bounds
            .into_iter()
            .map(|(f, bound)| {
                let name = &self.features[f];
                match bound {
                    (Some(low), Some(high)) => format!("{low} < {name} <= {high}"),
                    (Some(low), None) => format!("{name} > {low}"),
                    (None, Some(high)) => format!("{name} <= {high}"),
                    (None, None) => unreachable!("a feature enters the map with a bound"),
                }
            })
            .collect();
        terms.join(" AND ")
    }

    /// Whether a literal holds on one row of raw feature values (for bits that are the
    /// features, a value other than 0 is a set bit).
    fn holds(&self, l: Literal, raw: &[f64]) -> bool {
        let set = match self.conditions.get(l.bit) {
            Some(c) => raw[c.feature] > c.above,
            None => raw[l.bit] != 0.0,
        };
        set != l.not
    }

    /// The class sums of a Tsetlin Machine's rules evaluated as written on one row of raw
    /// feature values; `None` for other models.
    pub fn class_sums(&self, raw: &[f64]) -> Option<Vec<i64>> {
        let KeptModel::Tm { clauses, .. } = &self.model else {
            return None;
        };
        if raw.len() != self.features.len() {
            return None;
        }
        let mut sums = vec![0i64; self.classes.len()];
        for clause in clauses {
            if clause.literals.iter().all(|&l| self.holds(l, raw)) {
                for (s, &w) in sums.iter_mut().zip(&clause.weights) {
                    *s += i64::from(w);
                }
            }
        }
        Some(sums)
    }

    /// The file as written to disk, and the machines to store below `machines/` (each under its
    /// id, the first 16 hex digits of the sha256 of its clauses and checkpoint: one file per
    /// distinct machine however many clients hold it).
    pub fn for_disk(&self) -> (ModelFile, Vec<StoredMachine>) {
        let KeptModel::Composite {
            literals,
            normalization,
            clamp,
            machines,
            checkpoints,
            ..
        } = &self.model
        else {
            return (self.clone(), Vec::new());
        };
        let stored: Vec<StoredMachine> = machines
            .iter()
            .enumerate()
            .map(|(k, clauses)| {
                let rules = serde_json::to_vec(clauses).expect("clauses serialize");
                let checkpoint = checkpoints.get(k).cloned().unwrap_or_default();
                let digest = Sha256::new()
                    .chain_update(&rules)
                    .chain_update(&checkpoint)
                    .finalize();
                let id = crate::hex::encode(&digest[..8]);
                StoredMachine {
                    id,
                    rules,
                    checkpoint,
                }
            })
            .collect();
        let file = ModelFile {
            model: KeptModel::Composite {
                literals: literals.clone(),
                normalization: normalization.clone(),
                clamp: *clamp,
                machines: Vec::new(),
                checkpoints: Vec::new(),
                stored: stored.iter().map(|m| m.id.clone()).collect(),
            },
            ..self.clone()
        };
        (file, stored)
    }

    /// Reads a model file, a composite's stored machines from `machines/` beside it.
    pub fn read(path: &Path) -> Result<ModelFile, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut file = ModelFile::parse(&bytes)?;
        file.load_machines(path.parent().unwrap_or(Path::new(".")))?;
        Ok(file)
    }

    /// Fills a version 2 composite's machines from `dir/machines/<id>.json` (and checks them
    /// as [`ModelFile::parse`] does); other models are left as they are.
    pub fn load_machines(&mut self, dir: &Path) -> Result<(), String> {
        let classes = self.classes.len();
        let KeptModel::Composite {
            literals,
            machines,
            stored,
            ..
        } = &mut self.model
        else {
            return Ok(());
        };
        for id in std::mem::take(stored) {
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("machine id {id:?} is not a hex digest"));
            }
            let path = dir.join(MACHINES_DIR).join(format!("{id}.json"));
            let bytes =
                std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let clauses: Vec<KeptClause> =
                serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            if !clauses_fit(&clauses, classes, literals.len()) {
                return Err(format!(
                    "{}: the machine's shape does not match the model's",
                    path.display()
                ));
            }
            machines.push(clauses);
        }
        Ok(())
    }

    /// Reads a file, refusing another format, a newer version, or a model whose shape does
    /// not match its names.
    pub fn parse(bytes: &[u8]) -> Result<ModelFile, String> {
        let file: ModelFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if file.format != FORMAT {
            return Err(format!("format {:?}, not {FORMAT:?}", file.format));
        }
        if file.version > VERSION {
            return Err(format!(
                "version {} of the model format; this flint reads up to {VERSION}",
                file.version
            ));
        }
        let (f, k) = (file.features.len(), file.classes.len());
        let fits = match &file.model {
            KeptModel::Logreg { weights, biases } => {
                let outputs = super::logreg::outputs_for(k);
                weights.len() == outputs
                    && biases.len() == outputs
                    && weights.iter().all(|w| w.len() == f)
            }
            KeptModel::Fcm { matrix } => {
                matrix.len() == f + k && matrix.iter().all(|row| row.len() == f + k)
            }
            KeptModel::Tm { bits, clauses, .. } => {
                let conditions_fit = if file.conditions.is_empty() {
                    *bits == f
                } else {
                    *bits == file.conditions.len() && file.conditions.iter().all(|c| c.feature < f)
                };
                conditions_fit && clauses_fit(clauses, k, *bits)
            }
            KeptModel::Composite {
                literals, machines, ..
            } => machines.iter().all(|m| clauses_fit(m, k, literals.len())),
            KeptModel::Network { layers, .. } => {
                layers.last().is_some_and(|l| l.output == k.to_string())
            }
        };
        if !fits {
            return Err(format!(
                "the model's shape does not match its {f} features and {k} classes"
            ));
        }
        Ok(file)
    }

    /// The model as text: for logistic regression each output's `top` largest coefficients by
    /// magnitude, for an FCM its `top` strongest links, for a Tsetlin Machine (or each machine
    /// of a composite) the `top` clauses voting most for each class.
    pub fn explain(&self, top: usize) -> String {
        match &self.model {
            KeptModel::Logreg { weights, biases } => self.explain_logreg(weights, biases, top),
            KeptModel::Fcm { matrix } => self.explain_fcm(matrix, top),
            KeptModel::Tm { clauses, .. } => self.explain_tm(clauses, top),
            KeptModel::Network {
                architecture,
                layers,
                ..
            } => explain_network(architecture, layers),
            KeptModel::Composite {
                literals,
                normalization,
                clamp,
                machines,
                ..
            } => self.explain_composite(literals, normalization, *clamp, machines, top),
        }
    }

    fn explain_logreg(&self, weights: &[Vec<f64>], biases: &[f64], top: usize) -> String {
        let mut out = String::new();
        let scale = match self.scaling.as_str() {
            "local-zscore" => " (per standard deviation of the client's training split)",
            "local-minmax" => " (per range of the client's training split)",
            _ => "",
        };
        out += &format!("logistic regression, coefficients{scale}\n");
        for (o, (row, bias)) in weights.iter().zip(biases).enumerate() {
            let target = if weights.len() == 1 {
                format!(
                    "{} (against {})",
                    self.classes.get(1).map_or("1", String::as_str),
                    self.classes.first().map_or("0", String::as_str)
                )
            } else {
                self.classes[o].clone()
            };
            out += &format!("  class {target}: bias {bias:+.4}\n");
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()).then(a.cmp(&b)));
            for &i in order.iter().take(top) {
                out += &format!("    {:+.4}  {}\n", row[i], self.features[i]);
            }
        }
        out
    }

    fn explain_fcm(&self, matrix: &[Vec<f64>], top: usize) -> String {
        let mut out = String::new();
        let concepts: Vec<String> = self
            .features
            .iter()
            .cloned()
            .chain(self.classes.iter().map(|c| format!("class {c}")))
            .collect();
        out += &format!(
            "fuzzy cognitive map, {} concepts; the strongest links:\n",
            concepts.len()
        );
        let mut links: Vec<(usize, usize, f64)> = matrix
            .iter()
            .enumerate()
            .flat_map(|(s, row)| {
                row.iter()
                    .enumerate()
                    .filter(|(_, w)| **w != 0.0)
                    .map(move |(t, &w)| (s, t, w))
            })
            .collect();
        links.sort_by(|a, b| {
            b.2.abs()
                .total_cmp(&a.2.abs())
                .then((a.0, a.1).cmp(&(b.0, b.1)))
        });
        for (s, t, w) in links.into_iter().take(top) {
            out += &format!("  {w:+.4}  {} -> {}\n", concepts[s], concepts[t]);
        }
        out
    }

    fn explain_tm(&self, clauses: &[KeptClause], top: usize) -> String {
        let mut out = String::new();
        out += &format!(
            "tsetlin machine, {} clauses with literals; per class, the clauses that vote for it most:\n",
            clauses.len()
        );
        for (c, class) in self.classes.iter().enumerate() {
            let mut order: Vec<&KeptClause> = clauses.iter().filter(|k| k.weights[c] > 0).collect();
            order.sort_by_key(|k| std::cmp::Reverse(k.weights[c]));
            out += &format!("  class {class}: {} clauses vote for it\n", order.len());
            for k in order.into_iter().take(top) {
                out += &format!("    {:+}  {}\n", k.weights[c], self.rule_text(k));
            }
        }
        out
    }

    fn explain_composite(
        &self,
        literals: &[String],
        normalization: &str,
        clamp: bool,
        machines: &[Vec<KeptClause>],
        top: usize,
    ) -> String {
        let mut out = String::new();
        out += &format!(
            "composite of {} ({normalization} normalization{}); a clause fires when it holds on some patch (a table's row is one patch)\n",
            crate::text::count(machines.len() as u64, "machine"),
            if clamp {
                ", sums clamped to [-T, T]"
            } else {
                ""
            }
        );
        for (m, clauses) in machines.iter().enumerate() {
            let held: Vec<&str> = (0..self.classes.len())
                .filter(|&c| clauses.iter().any(|k| k.weights[c] > 0))
                .map(|c| self.classes[c].as_str())
                .collect();
            out += &format!(
                "  machine {}: {} clauses; classes with positive votes: {}\n",
                m + 1,
                clauses.len(),
                held.join(", ")
            );
            for (c, class) in self.classes.iter().enumerate() {
                let mut order: Vec<&KeptClause> =
                    clauses.iter().filter(|k| k.weights[c] > 0).collect();
                order.sort_by_key(|k| std::cmp::Reverse(k.weights[c]));
                for k in order.into_iter().take(top) {
                    out += &format!(
                        "    class {class}: {:+}  {}\n",
                        k.weights[c],
                        patch_rule(literals, k)
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn a_logistic_regression_keeps_one_row_per_output_and_reads_back() {
        let mut m = LogReg::for_classes(3, 3);
        m.weights = vec![0.1, -2.0, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0, -3.0];
        m.biases = vec![0.5, -0.5, 0.0];
        let f = ModelFile::new(
            "c",
            names("k", 3),
            names("f", 3),
            "none".into(),
            KeptModel::logreg(&m),
        );
        let back = ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert_eq!(
            f.explain(2),
            "logistic regression, coefficients\n  class k0: bias +0.5000\n    -2.0000  f1\n    +0.5000  f2\n\
             \x20 class k1: bias -0.5000\n    +1.0000  f0\n    +0.0000  f1\n\
             \x20 class k2: bias +0.0000\n    -3.0000  f2\n    +0.0000  f0\n"
        );
        // A diverged model is not kept.
        let mut diverged = m.clone();
        diverged.weights[4] = f64::NAN;
        assert!(KeptModel::logreg(&m).is_finite());
        assert!(!KeptModel::logreg(&diverged).is_finite());
        let binary = LogReg::for_classes(2, 2);
        let f = ModelFile::new(
            "c",
            vec!["no".into(), "yes".into()],
            names("f", 2),
            "local-zscore".into(),
            KeptModel::logreg(&binary),
        );
        assert!(
            f.explain(1).contains("class yes (against no)"),
            "{}",
            f.explain(1)
        );
        assert!(ModelFile::parse(&serde_json::to_vec(&f).unwrap()).is_ok());
    }

    #[test]
    fn an_fcm_keeps_its_whole_matrix_and_names_its_concepts() {
        let mut params = vec![0.0; Fcm::parameter_count(2, 2)];
        params[1] = -0.9; // feature 1 -> class 0
        params[2] = 0.3; // class 1 -> class 0
        let m = Fcm::from_parameters(2, 2, params).unwrap();
        let f = ModelFile::new(
            "c",
            vec!["B".into(), "M".into()],
            vec!["radius".into(), "area".into()],
            "local-minmax".into(),
            KeptModel::fcm(&m),
        );
        let KeptModel::Fcm { matrix } = &f.model else {
            unreachable!()
        };
        assert_eq!(matrix.len(), 4);
        assert_eq!(matrix[1][2], -0.9);
        assert_eq!(matrix[3][2], 0.3);
        assert_eq!(
            f.explain(2),
            "fuzzy cognitive map, 4 concepts; the strongest links:\n  -0.9000  area -> class B\n  +0.3000  class M -> class B\n"
        );
        assert_eq!(
            ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap(),
            f
        );
    }

    /// The complete rule set, evaluated as written on the raw feature values, gives
    /// the machine's own class sums and predictions on every test row, also after a round trip
    /// through the file.
    #[test]
    fn a_tsetlin_machines_rules_on_raw_values_give_its_class_sums() {
        use crate::data::Dataset;
        use crate::data::booleanize::Thermometer;
        use crate::model::tm::FeedbackMasks;
        use crate::rng::derive_rng;
        let mut rng = derive_rng(3, "rules", 0);
        let blobs = |n: u32, offset: u32| {
            let mut x = Vec::new();
            let mut y = Vec::new();
            for i in offset..offset + n {
                let c = i % 3;
                let (cx, cy) = [(-2.0, 0.0), (2.0, 0.0), (0.0, 3.0)][c as usize];
                let jitter = |k: u32| f64::from((i * 7919 + k * 104_729) % 1000) / 500.0 - 1.0;
                x.extend([cx + jitter(1), cy + jitter(2), jitter(3)]);
                y.push(c);
            }
            Dataset {
                features: 3,
                x,
                y,
                classes: vec!["a".into(), "b".into(), "c".into()],
                categorical: Vec::new(),
                feature_names: vec!["width".into(), "height".into(), "noise".into()],
            }
        };
        let (train, test) = (blobs(600, 0), blobs(300, 600));
        let code = Thermometer::from_quantiles(&train, 5);
        let (bits_train, bits_test) = (code.encode(&train), code.encode(&test));
        let hyper = crate::model::tm::TmHyper {
            weighted: true,
            ..crate::model::tm::testing::hyper(40, 15, 3.0)
        };
        let mut tm = CoalescedTm::new(hyper, code.bits(), 3, &mut rng);
        let mut masks = FeedbackMasks::new(3.0, &mut rng);
        for _ in 0..20 {
            tm.fit_epoch(&bits_train, &mut masks, &mut rng);
        }
        assert!(tm.accuracy(&bits_test) > 0.9, "the machine learned");
        let conditions = code
            .conditions()
            .into_iter()
            .map(|(feature, above)| Condition { feature, above })
            .collect();
        let file = ModelFile::new(
            "c",
            train.classes.clone(),
            train.feature_names.clone(),
            "none".into(),
            KeptModel::coalesced(&tm),
        )
        .with_conditions(conditions);
        let back = ModelFile::parse(&serde_json::to_vec(&file).unwrap()).unwrap();
        let predictions = tm.predict_batch(&bits_test);
        for (i, &predicted) in predictions.iter().enumerate() {
            let machine: Vec<i64> = tm
                .class_sums(bits_test.row(i))
                .into_iter()
                .map(i64::from)
                .collect();
            for f in [&file, &back] {
                let rules = f.class_sums(test.row(i)).unwrap();
                assert_eq!(rules, machine, "row {i}");
                let best = (0..3).fold(0, |b, c| if rules[c] > rules[b] { c } else { b });
                assert_eq!(best as u32, predicted, "row {i}");
            }
        }
        let text = file.explain(2);
        assert!(text.contains("class b: "), "{text}");
        assert!(
            text.lines()
                .any(|l| l.contains("width") && l.trim_start().starts_with('+')),
            "{text}"
        );
        // A feature's literals read as one interval.
        let clause = KeptClause {
            literals: vec![
                Literal { bit: 0, not: false },
                Literal { bit: 1, not: false },
                Literal { bit: 3, not: true },
                Literal { bit: 4, not: true },
                Literal { bit: 5, not: false },
            ],
            weights: vec![1, 0, 0],
        };
        let f = ModelFile {
            conditions: [(0, 1.0), (0, 2.0), (0, 3.0), (0, 4.0), (1, 5.0), (1, 6.0)]
                .map(|(feature, above)| Condition { feature, above })
                .to_vec(),
            ..file.clone()
        };
        // (An empty interval is printed as it is: such a clause never fires.)
        assert_eq!(f.rule_text(&clause), "2 < width <= 4 AND 6 < height <= 5");
    }

    #[test]
    fn a_patch_clause_reads_its_position_as_intervals() {
        let names: Vec<String> = [
            "p(0,0)", "p(0,1)", "y > 0", "y > 1", "y > 2", "x > 0", "x > 1",
        ]
        .map(String::from)
        .to_vec();
        let lit = |bit, not| Literal { bit, not };
        let clause = KeptClause {
            literals: vec![
                lit(0, false),
                lit(1, true),
                lit(2, false),
                lit(3, false),
                lit(4, true),
                lit(6, true),
            ],
            weights: vec![3],
        };
        assert_eq!(
            patch_rule(&names, &clause),
            "p(0,0) AND NOT p(0,1) AND 1 < y <= 2 AND x <= 1"
        );
    }

    #[test]
    fn another_format_a_newer_version_or_a_wrong_shape_is_refused() {
        let m = LogReg::for_classes(2, 2);
        let good = ModelFile::new(
            "c",
            names("k", 2),
            names("f", 2),
            "none".into(),
            KeptModel::logreg(&m),
        );
        let with = |edit: &dyn Fn(&mut ModelFile)| {
            let mut f = good.clone();
            edit(&mut f);
            ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap_err()
        };
        assert!(with(&|f| f.format = "other".into()).contains("format"));
        assert!(with(&|f| f.version = VERSION + 1).contains("reads up to"));
        assert!(with(&|f| f.features.pop().map_or((), drop)).contains("does not match"));
    }
}
