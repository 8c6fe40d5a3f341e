//! Every model ⇄ proto conversion, one style: `encode_*` builds a [`Payload`], `decode_*` checks
//! one against the run's shape (never the sender's) and returns the model. A received update is
//! decoded once, on arrival, into an [`Update`]; nothing downstream sees its payload again.

use std::collections::BTreeMap;

use proto::payload::Kind;
use proto::{
    AdjacencyMatrix, ClassWeights, ConfidenceWinner, GiniIndex, LinearModel, Payload, TmComposite,
    TmModel,
};

use super::include_code;
use super::weight_code::{self, WeightCoding};
use super::{kind_name, proto};
use crate::metrics::LocalMetrics;
use crate::model::fcm::Fcm;
use crate::model::logreg::LogReg;
use crate::model::tm::parts::{ClassParts, IncludeBits, TmParts, TmUpload};
use crate::{ClientId, FlintError, Result, Round};

/// A checked update, as aggregation takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// FedAvg: a client's logistic regression.
    Linear(LogReg),
    /// Blind FL: a client's map and its own metrics on its test split.
    Map { map: Fcm, local: LocalMetrics },
    /// TPFL: the confidence winner with its absolute weights (a delta already rebuilt).
    Winner(Winner),
    /// FedTMOS: the classes a client holds and its Gini index.
    Tm(TmUpload),
    /// The neural baselines: a network's parameters.
    Network(Vec<f32>),
    /// IFCA: the network a client trained from cluster `cluster`'s model.
    ClusterNetwork { cluster: u32, params: Vec<f32> },
    /// The one-shot rules: a network with the statistics its rule needs.
    Statistics(super::network::NetworkStatistics),
}

impl Update {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Update::Linear(_) => "linear_model",
            Update::Map { .. } => "adjacency_matrix",
            Update::Winner(_) => "confidence_winner",
            Update::Tm(_) => "tm_upload",
            Update::Network(_) | Update::ClusterNetwork { .. } | Update::Statistics(_) => {
                "network_params"
            }
        }
    }
}

/// TPFL Algorithm 1, step 6, as aggregation takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Winner {
    pub class: u32,
    pub confidence: f64,
    pub weights: Vec<i32>,
}

/// A confidence winner as it travels: its weights are the client's own, or with
/// `delta_base_round > 0` its own minus what it was sent for that class in that round.
#[derive(Debug, Clone, PartialEq)]
pub struct WinnerUpload {
    pub class: u32,
    pub confidence: f64,
    pub weights: Vec<i32>,
    pub delta_base_round: Round,
}

fn invalid<T>(message: String) -> Result<T> {
    Err(FlintError::InvalidUpdate(message))
}

fn kind<'a, T>(
    p: &'a Payload,
    what: &str,
    pick: impl Fn(&'a Kind) -> Option<&'a T>,
) -> Result<&'a T> {
    p.kind.as_ref().and_then(pick).ok_or_else(|| {
        FlintError::InvalidUpdate(format!("expected {what} payload, got {}", kind_name(p)))
    })
}

fn finite(what: &str, values: &[f32]) -> Result<()> {
    match values.iter().position(|w| !w.is_finite()) {
        Some(i) => invalid(format!("{what} weight {i} is {}, not finite", values[i])),
        None => Ok(()),
    }
}

pub fn encode_linear(m: &LogReg) -> Payload {
    let (bias, class_biases) = match m.biases.as_slice() {
        [b] => (*b as f32, Vec::new()),
        many => (0.0, many.iter().map(|&b| b as f32).collect()),
    };
    Payload {
        kind: Some(Kind::LinearModel(LinearModel {
            weights: m.weights.iter().map(|&w| w as f32).collect(),
            bias,
            class_biases,
        })),
    }
}

/// One weight per feature of the run (per class as well, beyond two classes) and a bias per
/// logit, every value finite.
pub fn decode_linear(p: &Payload, features: usize, classes: usize) -> Result<LogReg> {
    let m = kind(p, "a linear_model", |k| match k {
        Kind::LinearModel(m) => Some(m),
        _ => None,
    })?;
    let outputs = crate::model::logreg::outputs_for(classes);
    let expected = features.saturating_mul(outputs);
    if m.weights.len() != expected {
        let per = if outputs == 1 {
            "one per feature".to_string()
        } else {
            format!("one per feature for each of {outputs} classes")
        };
        return invalid(format!(
            "linear_model has {} weights, expected {expected} ({per})",
            m.weights.len()
        ));
    }
    finite("linear_model", &m.weights)?;
    let biases = if outputs == 1 {
        if !m.class_biases.is_empty() {
            return invalid("linear_model of two classes has class_biases".into());
        }
        vec![m.bias]
    } else {
        if m.class_biases.len() != outputs || m.bias != 0.0 {
            return invalid(format!(
                "linear_model has {} class_biases, expected {outputs} (and bias 0)",
                m.class_biases.len()
            ));
        }
        m.class_biases.clone()
    };
    if let Some(b) = biases.iter().find(|b| !b.is_finite()) {
        return invalid(format!("linear_model bias is {b}, not finite"));
    }
    Ok(LogReg {
        weights: m.weights.iter().map(|&w| f64::from(w)).collect(),
        biases: biases.iter().map(|&b| f64::from(b)).collect(),
    })
}

/// A map as the wire carries it: the whole n × n matrix as packed floats, and, in an upload,
/// the client's metrics on its test split (zeros in a download).
pub fn encode_map(m: &Fcm, local: Option<LocalMetrics>) -> Payload {
    let local = local.unwrap_or(LocalMetrics {
        accuracy: 0.0,
        precision: 0.0,
    });
    Payload {
        kind: Some(Kind::AdjacencyMatrix(AdjacencyMatrix {
            concepts: m.concepts() as u32,
            weights: m.matrix().iter().map(|&w| w as f32).collect(),
            local_accuracy: local.accuracy,
            local_precision: local.precision,
        })),
    }
}

/// Checks the shape against the run (features + classes concepts), that every value is finite,
/// the map's own rules (range, learnable links), and metrics in [0, 1].
pub fn decode_map(p: &Payload, features: usize, classes: usize) -> Result<(Fcm, LocalMetrics)> {
    let m = kind(p, "an adjacency_matrix", |k| match k {
        Kind::AdjacencyMatrix(m) => Some(m),
        _ => None,
    })?;
    let n = features + classes;
    if m.concepts as usize != n || m.weights.len() != n * n {
        return invalid(format!(
            "adjacency_matrix of {} concepts with {} weights, expected {n}×{n} ({features} features + {classes} classes)",
            m.concepts,
            m.weights.len()
        ));
    }
    finite("adjacency_matrix", &m.weights)?;
    for (what, v) in [
        ("local_accuracy", m.local_accuracy),
        ("local_precision", m.local_precision),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return invalid(format!(
                "adjacency_matrix {what} is {v}, expected a value in [0, 1]"
            ));
        }
    }
    let w: Vec<f64> = m.weights.iter().map(|&w| f64::from(w)).collect();
    let map = Fcm::from_matrix(features, classes, &w).map_err(|e| match e {
        FlintError::Model(m) => FlintError::InvalidUpdate(m),
        other => other,
    })?;
    let local = LocalMetrics {
        accuracy: m.local_accuracy,
        precision: m.local_precision,
    };
    Ok((map, local))
}

/// One class's weights in the form `coding` names.
fn class_weights(class: u32, weights: &[i32], coding: WeightCoding) -> ClassWeights {
    let (weights, coded) = match coding {
        WeightCoding::Varint => (weights.to_vec(), Vec::new()),
        WeightCoding::Arithmetic => (Vec::new(), weight_code::encode(weights)),
    };
    ClassWeights {
        class_index: class,
        weights,
        coded,
    }
}

/// One weight per clause, from either form (a sender may use either; the count is the run's).
fn weights_of(cw: &ClassWeights, clauses: usize) -> Result<Vec<i32>> {
    let class = cw.class_index;
    if cw.coded.is_empty() {
        if cw.weights.len() != clauses {
            return invalid(format!(
                "{} weights for class {class}, expected one per clause ({clauses})",
                cw.weights.len()
            ));
        }
        return Ok(cw.weights.clone());
    }
    if !cw.weights.is_empty() {
        return invalid(format!(
            "class {class} carries its weights both as varints and coded"
        ));
    }
    weight_code::decode(&cw.coded, clauses)
        .or_else(|why| invalid(format!("coded weights of class {class}: {why}")))
}

pub fn encode_winner(w: &WinnerUpload, coding: WeightCoding) -> Payload {
    Payload {
        kind: Some(Kind::ConfidenceWinner(ConfidenceWinner {
            class_index: w.class,
            confidence: w.confidence,
            weights: Some(class_weights(w.class, &w.weights, coding)),
            delta_base_round: w.delta_base_round,
        })),
    }
}

/// A class of the run, one weight per clause, the weights of the winning class, a finite
/// confidence. A delta is returned as sent: only the server knows its base.
pub fn decode_winner(p: &Payload, classes: usize, clauses: usize) -> Result<WinnerUpload> {
    let w = kind(p, "a confidence_winner", |k| match k {
        Kind::ConfidenceWinner(m) => Some(m),
        _ => None,
    })?;
    if w.class_index as usize >= classes {
        return invalid(format!(
            "confidence winner class {} of {classes} classes",
            w.class_index
        ));
    }
    let Some(cw) = &w.weights else {
        return invalid("confidence_winner carries no weights".into());
    };
    if cw.class_index != w.class_index {
        return invalid(format!(
            "confidence winner class {} with the weights of class {}",
            w.class_index, cw.class_index
        ));
    }
    if !w.confidence.is_finite() {
        return invalid(format!("confidence {} is not finite", w.confidence));
    }
    Ok(WinnerUpload {
        class: w.class_index,
        confidence: w.confidence,
        weights: weights_of(cw, clauses)?,
        delta_base_round: w.delta_base_round,
    })
}

pub fn encode_class_weights(class: u32, weights: &[i32], coding: WeightCoding) -> Payload {
    Payload {
        kind: Some(Kind::ClassWeights(class_weights(class, weights, coding))),
    }
}

/// One class of the run and one weight per clause.
pub fn decode_class_weights(
    p: &Payload,
    classes: usize,
    clauses: usize,
) -> Result<(u32, Vec<i32>)> {
    let cw = kind(p, "a class_weights", |k| match k {
        Kind::ClassWeights(m) => Some(m),
        _ => None,
    })?;
    if cw.class_index as usize >= classes {
        return invalid(format!(
            "class_weights of class {} of {classes} classes",
            cw.class_index
        ));
    }
    Ok((cw.class_index, weights_of(cw, clauses)?))
}

/// The shape every exchanged Tsetlin Machine must have: the run's, never the sender's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmShape {
    pub classes: usize,
    pub clauses: usize,
    /// Literals per clause (2 × the machine's features).
    pub literals: usize,
    /// How weights and include bits are written (a receiver reads either form).
    pub coding: WeightCoding,
}

fn encode_tm_parts(parts: &TmParts, shape: TmShape) -> TmModel {
    let classes = || parts.classes.iter();
    let weights = |c: &ClassParts| -> Vec<i32> {
        c.weights
            .iter()
            .map(|&w| w.min(i32::MAX as u32) as i32)
            .collect()
    };
    let (include_bits, coded_include_bits) = match shape.coding {
        WeightCoding::Varint => (
            classes().map(|(_, c)| c.include.0.clone()).collect(),
            vec![],
        ),
        WeightCoding::Arithmetic => {
            let code =
                |c: &ClassParts| include_code::encode(&c.include, shape.clauses, shape.literals);
            (vec![], classes().map(|(_, c)| code(c)).collect())
        }
    };
    TmModel {
        clauses: shape.clauses as u32,
        literals: shape.literals as u32,
        class_weights: classes()
            .map(|(&class, c)| class_weights(class, &weights(c), shape.coding))
            .collect(),
        include_bits,
        class_counts: classes().map(|(_, c)| c.samples).collect(),
        coded_include_bits,
    }
}

/// Class `i`'s include bits, from either form.
fn include_of(m: &TmModel, i: usize, class: u32, shape: TmShape) -> Result<IncludeBits> {
    if m.coded_include_bits.is_empty() {
        let bits = &m.include_bits[i];
        let bytes = IncludeBits::bytes_for(shape.clauses, shape.literals);
        if bits.len() != bytes {
            return invalid(format!(
                "{} include bytes for class {class}, expected {bytes}",
                bits.len()
            ));
        }
        return Ok(IncludeBits(bits.clone()));
    }
    include_code::decode(&m.coded_include_bits[i], shape.clauses, shape.literals)
        .or_else(|why| invalid(format!("coded include bits of class {class}: {why}")))
}

/// Classes of the run, each once, one non-negative weight per clause, include bits of the
/// run's size, a sample count per class.
fn decode_tm_parts(m: &TmModel, shape: TmShape) -> Result<TmParts> {
    if m.clauses as usize != shape.clauses || m.literals as usize != shape.literals {
        return invalid(format!(
            "tm_model of {} clauses of {} literals, expected {} of {}",
            m.clauses, m.literals, shape.clauses, shape.literals
        ));
    }
    let n = m.class_weights.len();
    let bit_sets = m.include_bits.len() + m.coded_include_bits.len();
    let one_form = m.include_bits.is_empty() || m.coded_include_bits.is_empty();
    if bit_sets != n || !one_form || m.class_counts.len() != n {
        return invalid(format!(
            "tm_model has {n} classes of weights, {} of include bits, {} coded and {} counts",
            m.include_bits.len(),
            m.coded_include_bits.len(),
            m.class_counts.len()
        ));
    }
    let mut classes = BTreeMap::new();
    for (i, (cw, &samples)) in m.class_weights.iter().zip(&m.class_counts).enumerate() {
        let class = cw.class_index;
        if class as usize >= shape.classes {
            return invalid(format!(
                "tm_model class {class} of {} classes",
                shape.classes
            ));
        }
        let weights = weights_of(cw, shape.clauses)?;
        if let Some(w) = weights.iter().find(|w| **w < 0) {
            return invalid(format!("class {class} has clause weight {w}, below 0"));
        }
        let parts = ClassParts {
            weights: weights.iter().map(|&w| w as u32).collect(),
            include: include_of(m, i, class, shape)?,
            samples,
        };
        if classes.insert(class, parts).is_some() {
            return invalid(format!("tm_model has class {class} twice"));
        }
    }
    Ok(TmParts { classes })
}

pub fn encode_tm_upload(u: &TmUpload, shape: TmShape) -> Payload {
    Payload {
        kind: Some(Kind::TmUpload(proto::TmUpload {
            model: Some(encode_tm_parts(&u.parts, shape)),
            gini_index: Some(GiniIndex {
                value: u.gini_index,
            }),
        })),
    }
}

/// [`decode_tm_parts`], every class with samples, and a Gini index Σ p² in (0, 1].
pub fn decode_tm_upload(p: &Payload, shape: TmShape) -> Result<TmUpload> {
    let u = kind(p, "a tm_upload", |k| match k {
        Kind::TmUpload(u) => Some(u),
        _ => None,
    })?;
    let Some(model) = &u.model else {
        return invalid("tm_upload carries no model".into());
    };
    let parts = decode_tm_parts(model, shape)?;
    if parts.classes.is_empty() {
        return invalid("tm_upload holds no class".into());
    }
    if let Some((c, _)) = parts.classes.iter().find(|(_, c)| c.samples == 0) {
        return invalid(format!("tm_upload class {c} has no samples"));
    }
    if parts
        .classes
        .values()
        .try_fold(0u64, |n, c| n.checked_add(c.samples))
        .is_none()
    {
        return invalid("tm_upload class counts overflow".into());
    }
    let gini_index = u.gini_index.as_ref().map_or(f64::NAN, |g| g.value);
    if !(gini_index > 0.0 && gini_index <= 1.0) {
        return invalid(format!(
            "gini index {gini_index}, expected a value in (0, 1]"
        ));
    }
    Ok(TmUpload { parts, gini_index })
}

/// What a `TmComposite` download holds: the machines to predict with, and (FedTMOS with
/// baselines) every client's own machine, in client-id order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompositeDownload {
    pub models: Vec<TmParts>,
    pub ensemble: Vec<(ClientId, TmParts)>,
}

pub fn encode_tm_composite(d: &CompositeDownload, shape: TmShape) -> Payload {
    Payload {
        kind: Some(Kind::TmComposite(TmComposite {
            models: d.models.iter().map(|m| encode_tm_parts(m, shape)).collect(),
            ensemble: d
                .ensemble
                .iter()
                .map(|(_, m)| encode_tm_parts(m, shape))
                .collect(),
            ensemble_clients: d.ensemble.iter().map(|&(id, _)| id).collect(),
        })),
    }
}

/// Between 1 and `max_models` models of the run's shape, and at most `max_clients` client
/// models, one per client id, ids in increasing order.
pub fn decode_tm_composite(
    p: &Payload,
    shape: TmShape,
    max_models: usize,
    max_clients: usize,
) -> Result<CompositeDownload> {
    let c = kind(p, "a tm_composite", |k| match k {
        Kind::TmComposite(c) => Some(c),
        _ => None,
    })?;
    if c.models.is_empty() || c.models.len() > max_models {
        return invalid(format!(
            "tm_composite of {} models, expected 1 to {max_models}",
            c.models.len()
        ));
    }
    if c.ensemble.len() != c.ensemble_clients.len() || c.ensemble.len() > max_clients {
        return invalid(format!(
            "tm_composite has {} client models for {} client ids, expected at most {max_clients}",
            c.ensemble.len(),
            c.ensemble_clients.len()
        ));
    }
    if !c.ensemble_clients.windows(2).all(|w| w[0] < w[1]) {
        return invalid("tm_composite client ids are not increasing".into());
    }
    let models = c
        .models
        .iter()
        .map(|m| decode_tm_parts(m, shape))
        .collect::<Result<_>>()?;
    let ensemble = c
        .ensemble_clients
        .iter()
        .zip(&c.ensemble)
        .map(|(&id, m)| decode_tm_parts(m, shape).map(|parts| (id, parts)))
        .collect::<Result<_>>()?;
    Ok(CompositeDownload { models, ensemble })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_survives_its_round_trip() {
        let lr = LogReg::binary(vec![0.5, -2.0], 0.25);
        assert_eq!(decode_linear(&encode_linear(&lr), 2, 2).unwrap(), lr);
        // Three classes: a row and a bias each; the two-class form is refused for them.
        let multi = LogReg {
            weights: vec![0.5, -2.0, 1.0, 0.0, 0.25, -0.5],
            biases: vec![0.25, -1.0, 0.5],
        };
        assert_eq!(decode_linear(&encode_linear(&multi), 2, 3).unwrap(), multi);
        let e = decode_linear(&encode_linear(&lr), 2, 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected 6 (one per feature for each of 3 classes)"),
            "{e}"
        );
        let e = decode_linear(&encode_linear(&multi), 2, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 2 (one per feature)"), "{e}");
        let map = Fcm::from_parameters(1, 2, vec![1.0, 0.5, -1.0, 0.0]).unwrap();
        let local = LocalMetrics {
            accuracy: 0.75,
            precision: 0.5,
        };
        assert_eq!(
            decode_map(&encode_map(&map, Some(local)), 1, 2).unwrap(),
            (map, local)
        );
        let w = WinnerUpload {
            class: 2,
            confidence: 7.0,
            weights: vec![3, -1],
            delta_base_round: 4,
        };
        for coding in [WeightCoding::Arithmetic, WeightCoding::Varint] {
            assert_eq!(decode_winner(&encode_winner(&w, coding), 3, 2).unwrap(), w);
            let cw = encode_class_weights(1, &[5, 6], coding);
            assert_eq!(decode_class_weights(&cw, 2, 2).unwrap(), (1, vec![5, 6]));
        }
    }

    #[test]
    fn tm_uploads_and_composites_round_trip_and_are_checked_against_the_run() {
        tm_round_trips(WeightCoding::Arithmetic);
        tm_round_trips(WeightCoding::Varint);
    }

    fn tm_round_trips(coding: WeightCoding) {
        let shape = TmShape {
            classes: 3,
            clauses: 2,
            literals: 6,
            coding,
        };
        let class = |w: u32, bits: u8, samples| ClassParts {
            weights: vec![w, w + 1],
            include: IncludeBits(vec![bits, 0]),
            samples,
        };
        let parts = TmParts {
            classes: BTreeMap::from([(0, class(3, 0b101, 40)), (2, class(1, 0b010, 10))]),
        };
        let up = TmUpload {
            parts: parts.clone(),
            gini_index: 0.68,
        };
        assert_eq!(
            decode_tm_upload(&encode_tm_upload(&up, shape), shape).unwrap(),
            up
        );
        let download = CompositeDownload {
            models: vec![parts.clone(), TmParts::default()],
            ensemble: vec![(1, parts.clone()), (4, parts.clone())],
        };
        let c = encode_tm_composite(&download, shape);
        assert_eq!(decode_tm_composite(&c, shape, 4, 2).unwrap(), download);
        assert!(decode_tm_composite(&c, shape, 1, 2).is_err());
        let e = decode_tm_composite(&c, shape, 4, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 client models for 2 client ids, expected at most 1"),
            "{e}"
        );
        let mut swapped = c.clone();
        if let Some(Kind::TmComposite(t)) = &mut swapped.kind {
            t.ensemble_clients.reverse();
        }
        let e = decode_tm_composite(&swapped, shape, 4, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not increasing"), "{e}");
        let other = TmShape {
            clauses: 3,
            ..shape
        };
        let e = decode_tm_upload(&encode_tm_upload(&up, shape), other)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 clauses of 6 literals, expected 3 of 6"),
            "{e}"
        );
        let few = TmShape {
            classes: 2,
            ..shape
        };
        let e = decode_tm_upload(&encode_tm_upload(&up, shape), few)
            .unwrap_err()
            .to_string();
        assert!(e.contains("class 2 of 2 classes"), "{e}");
        let lying = TmUpload {
            gini_index: 1.5,
            ..up
        };
        let e = decode_tm_upload(&encode_tm_upload(&lying, shape), shape)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gini index 1.5"), "{e}");
    }

    #[test]
    fn shapes_come_from_the_run_not_the_sender() {
        let e = decode_class_weights(&encode_class_weights(2, &[1], WeightCoding::Varint), 2, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("class 2 of 2 classes"), "{e}");
        let e = decode_linear(&encode_class_weights(0, &[1], WeightCoding::Varint), 1, 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected a linear_model payload, got class_weights"),
            "{e}"
        );
    }

    #[test]
    fn coded_weights_are_read_by_the_runs_clause_count() {
        let w: Vec<i32> = (0..300).map(|i| (i * 7 % 120) - 40).collect();
        let p = encode_class_weights(1, &w, WeightCoding::Arithmetic);
        assert_eq!(decode_class_weights(&p, 2, 300).unwrap(), (1, w.clone()));
        let e = decode_class_weights(&p, 2, 299).unwrap_err().to_string();
        assert!(e.contains("coded weights of class 1"), "{e}");
        let mut both = p.clone();
        if let Some(Kind::ClassWeights(cw)) = &mut both.kind {
            cw.weights = w.clone();
        }
        let e = decode_class_weights(&both, 2, 300).unwrap_err().to_string();
        assert!(e.contains("both as varints and coded"), "{e}");
    }
}
