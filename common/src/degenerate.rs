//! A model that learned nothing says so. From the evaluations the clients report
//! each round: models that predict one class for every test row, and accuracy below what always
//! answering the most common class would score — the two faces of an empty or untrained model,
//! which otherwise reports majority-class accuracy as if it had learned it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::ConfusionMatrix;
use crate::{ClientId, Round};

/// One symptom in one round, with the clients that show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    pub round: Round,
    pub kind: WarningKind,
    /// The clients whose models show it on their own test split; empty for the shared test set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<ClientId>,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    /// Every test row predicted as one class, where the rows hold at least two.
    OneClass,
    /// Fewer rows right than the most common class holds.
    BelowMajority,
    /// At or above the most common class, but not significantly ([`SIGNIFICANCE`]) on the
    /// rows measured: they cannot tell the model from one that learned nothing.
    NearChance,
    /// A Tsetlin Machine, or a machine of a composite, with no clause that includes a literal:
    /// it votes nothing, and its class sums are all 0.
    NoClauses,
    /// A weight that is NaN or infinite: training diverged.
    NotFinite,
    /// The clients train on fewer rows per class, on average, than [`FEW_ROWS_PER_CLASS`].
    FewRows,
    /// The round's aggregation failed: the model stayed as it was.
    AggregationFailed,
    /// A Fuzzy Cognitive Map asked to tell apart at least [`FCM_MANY_CLASSES`] classes: said
    /// before the run, as round 0.
    ManyClasses,
}

/// The one-sided binomial test's level: an accuracy at or above the most common class's share
/// whose chance of arising from a model no better than that share is at least this is warned.
pub const SIGNIFICANCE: f64 = 0.05;

/// The share of the most common class's errors a model must fix (Heidke's skill against the
/// majority: (accuracy − majority) / (1 − majority)) to count as more than near chance, however
/// many rows make it significant: 0.058 against a majority of 0.041 on 26 classes fixes 1.8 %.
pub const MIN_SKILL: f64 = 0.1;

/// The chance that a predictor whose accuracy is the majority share answers at least `correct`
/// of `total` rows right (the binomial tail, one-sided).
pub fn above_majority_p(correct: u64, total: u64, majority: u64) -> f64 {
    use statrs::distribution::{Binomial, DiscreteCDF};
    if correct == 0 || majority >= total {
        return 1.0;
    }
    let share = majority as f64 / total as f64;
    Binomial::new(share, total).map_or(1.0, |b| b.sf(correct - 1))
}

/// What makes an accuracy at or above the majority's near chance, if anything: too few rows to
/// tell it from the majority ([`SIGNIFICANCE`]), or too little of the majority's errors fixed
/// ([`MIN_SKILL`]).
fn near_chance(correct: u64, total: u64, majority: u64, classes: usize) -> Option<String> {
    if correct < majority || majority >= total {
        return None;
    }
    let share = |n: u64| n as f64 / total as f64;
    let (accuracy, base) = (share(correct), share(majority));
    let chance = 1.0 / classes.max(1) as f64;
    let p = above_majority_p(correct, total, majority);
    if p >= SIGNIFICANCE {
        return Some(format!(
            "{accuracy:.3} of {total} rows right, not significantly above the {base:.3} of always answering the most common class (one-sided binomial p = {p:.2}; uniform chance {chance:.3}): these rows cannot tell the model from one that learned nothing"
        ));
    }
    let skill = (accuracy - base) / (1.0 - base);
    (skill < MIN_SKILL).then(|| {
        format!(
            "{accuracy:.3} of {total} rows right against the {base:.3} of always answering the most common class (uniform chance {chance:.3}): it fixes {:.1} % of that answer's errors, under {:.0} %, barely more than a model that learned nothing",
            100.0 * skill,
            100.0 * MIN_SKILL
        )
    })
}

/// Training rows per class and client, on average, below which a run says its clients hold
/// too little to learn from. On six public tables at the defaults (docs/results/tables.md), the
/// three where every Tsetlin strategy came within 5 points of central TM held 22.8 or more; the
/// three where they did not, 4 to 14.
pub const FEW_ROWS_PER_CLASS: f64 = 20.0;

/// A run's clients hold few training rows for its classes, from the counts they declared at
/// Join (`train_class_counts` per client): said once, in the last round.
pub fn few_training_rows(round: Round, counts: &BTreeMap<ClientId, Vec<u64>>) -> Option<Warning> {
    let classes = counts.values().map(Vec::len).max().filter(|&c| c > 0)?;
    let rows: u64 = counts.values().flatten().sum();
    let per_client = rows as f64 / counts.len() as f64;
    let per_class = per_client / classes as f64;
    if per_class >= FEW_ROWS_PER_CLASS {
        return None;
    }
    Some(Warning {
        round,
        kind: WarningKind::FewRows,
        clients: Vec::new(),
        message: format!(
            "the clients train on {per_client:.0} rows each on average, {per_class:.1} per class: too few for a model to learn much from, and each client's test split is as small (fewer clients, or `central`, shows what the data allows; docs/guide/strategies.md, \"When a model learns nothing\")"
        ),
    })
}

/// Classes from which a Fuzzy Cognitive Map is warned of before the run. The papers' tables
/// have two; on the six public tables at the defaults (docs/results/tables.md) Blind and
/// Blended FL were 0.63 on digits' ten classes against FedAvg's 0.95, and at chance (0.058,
/// majority 0.041) on a generated table of 26.
pub const FCM_MANY_CLASSES: usize = 10;

/// A Fuzzy Cognitive Map of `classes` output concepts, warned of before the run where they
/// are many: its maps learn little there.
pub fn fcm_on_many_classes(classes: usize) -> Option<Warning> {
    (classes >= FCM_MANY_CLASSES).then(|| Warning {
        round: 0,
        kind: WarningKind::ManyClasses,
        clients: Vec::new(),
        message: format!(
            "a Fuzzy Cognitive Map on {classes} classes: on the tables measured its maps fell far behind logistic regression from ten classes on (0.63 against 0.95 on ten, chance on 26; docs/results/tables.md); `fedavg` or a Tsetlin strategy learns such a table"
        ),
    })
}

/// What a client's model at the end of the run says about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelHealth {
    /// Tsetlin Machines in the model (a composite's machines; 0 for other models).
    pub machines: usize,
    /// Those with no clause that includes a literal.
    pub empty_machines: usize,
    pub not_finite: bool,
}

/// The warnings of the clients' final models (`round`, the run's last), from their health.
pub fn model_warnings(round: Round, models: &[(String, ClientId, ModelHealth)]) -> Vec<Warning> {
    let empty: Vec<&(String, ClientId, ModelHealth)> = models
        .iter()
        .filter(|(_, _, h)| h.empty_machines > 0)
        .collect();
    let diverged: Vec<&(String, ClientId, ModelHealth)> =
        models.iter().filter(|(_, _, h)| h.not_finite).collect();
    let mut warnings = Vec::new();
    if !empty.is_empty() {
        let shown: Vec<String> = empty
            .iter()
            .take(4)
            .map(|(name, _, h)| format!("{name}: {} of {}", h.empty_machines, h.machines))
            .collect();
        warnings.push(Warning {
            round,
            kind: WarningKind::NoClauses,
            clients: empty.iter().map(|(_, id, _)| *id).collect(),
            message: format!(
                "round {round}: {} of {} clients' models hold machines with no clauses ({}{}): such a machine votes nothing (docs/guide/strategies.md, \"When a model learns nothing\")",
                empty.len(),
                models.len(),
                shown.join(", "),
                if empty.len() > 4 { ", …" } else { "" }
            ),
        });
    }
    if !diverged.is_empty() {
        let names: Vec<&str> = diverged
            .iter()
            .take(4)
            .map(|(n, _, _)| n.as_str())
            .collect();
        warnings.push(Warning {
            round,
            kind: WarningKind::NotFinite,
            clients: diverged.iter().map(|(_, id, _)| *id).collect(),
            message: format!(
                "round {round}: {} of {} clients' models have weights that are not finite ({}): training diverged (a smaller learning rate?)",
                diverged.len(),
                models.len(),
                names.join(", ")
            ),
        });
    }
    warnings
}

/// What a round's warnings are read against: the class names and the clients' names.
pub struct Names<'a> {
    pub classes: &'a [String],
    pub client: &'a dyn Fn(ClientId) -> String,
}

/// A round's warnings: the clients' models on their own test splits, then the model on the
/// shared test set where the run has one.
pub fn round_warnings(
    round: Round,
    evals: &BTreeMap<ClientId, ConfusionMatrix>,
    global: Option<&ConfusionMatrix>,
    names: &Names,
) -> Vec<Warning> {
    let mut warnings = Vec::new();
    let one_class = one_class_clients(round, evals, names);
    // Every model answering one class is near chance already said.
    let all_one_class = one_class
        .as_ref()
        .is_some_and(|w| w.clients.len() == evals.len());
    warnings.extend(one_class);
    let pooled = pooled_below_majority(round, evals);
    warnings.extend(pooled.filter(|w| !(all_one_class && w.kind == WarningKind::NearChance)));
    if let Some(cm) = global {
        warnings.extend(shared_test_set(round, cm, names));
    }
    warnings
}

fn one_class_clients(
    round: Round,
    evals: &BTreeMap<ClientId, ConfusionMatrix>,
    names: &Names,
) -> Option<Warning> {
    let found: Vec<(ClientId, usize)> = evals
        .iter()
        .filter_map(|(&id, cm)| only_class(cm).map(|c| (id, c)))
        .collect();
    if found.is_empty() {
        return None;
    }
    const SHOWN: usize = 4;
    let mut shown: Vec<String> = found
        .iter()
        .take(SHOWN)
        .map(|&(id, c)| format!("{} → {:?}", (names.client)(id), class_name(names, c)))
        .collect();
    if found.len() > SHOWN {
        shown.push("…".into());
    }
    Some(Warning {
        round,
        kind: WarningKind::OneClass,
        clients: found.iter().map(|&(id, _)| id).collect(),
        message: format!(
            "round {round}: {} of {} clients' models predict one class for every test row ({})",
            found.len(),
            evals.len(),
            shown.join(", ")
        ),
    })
}

/// The clients' test rows pooled: right answers against the pooled rows' most common class
/// (not each client's own, which under a non-IID split no one model could match).
fn pooled_below_majority(
    round: Round,
    evals: &BTreeMap<ClientId, ConfusionMatrix>,
) -> Option<Warning> {
    let mut per_class: Vec<u64> = Vec::new();
    let (mut correct, mut total) = (0, 0);
    for cm in evals.values() {
        per_class.resize(per_class.len().max(cm.classes()), 0);
        for (t, rows) in per_class.iter_mut().enumerate().take(cm.classes()) {
            *rows += (0..cm.classes()).map(|p| cm.get(t, p)).sum::<u64>();
        }
        correct += cm.correct();
        total += cm.total();
    }
    let majority = per_class.iter().copied().max().unwrap_or(0);
    if total == 0 {
        return None;
    }
    if let Some(what) = near_chance(correct, total, majority, per_class.len()) {
        return Some(Warning {
            round,
            kind: WarningKind::NearChance,
            clients: evals.keys().copied().collect(),
            message: format!("round {round}: the clients' models answer {what}"),
        });
    }
    if correct >= majority {
        return None;
    }
    let share = |n: u64| n as f64 / total as f64;
    Some(Warning {
        round,
        kind: WarningKind::BelowMajority,
        clients: evals.keys().copied().collect(),
        message: format!(
            "round {round}: the clients' models answer {:.3} of their test rows right, below the {:.3} that always answering the most common class would",
            share(correct),
            share(majority)
        ),
    })
}

fn shared_test_set(round: Round, cm: &ConfusionMatrix, names: &Names) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if let Some(c) = only_class(cm) {
        warnings.push(Warning {
            round,
            kind: WarningKind::OneClass,
            clients: Vec::new(),
            message: format!(
                "round {round}: the model predicts {:?} for every row of the shared test set",
                class_name(names, c)
            ),
        });
    }
    let total = cm.total();
    let said = !warnings.is_empty();
    if let Some(what) =
        near_chance(cm.correct(), total, cm.majority_rows(), cm.classes()).filter(|_| !said)
    {
        warnings.push(Warning {
            round,
            kind: WarningKind::NearChance,
            clients: Vec::new(),
            message: format!("round {round}: on the shared test set the model answers {what}"),
        });
    }
    if total > 0 && cm.correct() < cm.majority_rows() {
        warnings.push(Warning {
            round,
            kind: WarningKind::BelowMajority,
            clients: Vec::new(),
            message: format!(
                "round {round}: the model answers {:.3} of the shared test set right, below the {:.3} of its most common class",
                cm.correct() as f64 / total as f64,
                cm.majority_rows() as f64 / total as f64
            ),
        });
    }
    warnings
}

/// The one class predicted for every row, where the rows hold at least two classes.
fn only_class(cm: &ConfusionMatrix) -> Option<usize> {
    let classes = cm.classes();
    let predicted: Vec<usize> = (0..classes)
        .filter(|&p| (0..classes).any(|t| cm.get(t, p) > 0))
        .collect();
    let truths = (0..classes)
        .filter(|&t| (0..classes).any(|p| cm.get(t, p) > 0))
        .count();
    match predicted[..] {
        [only] if truths >= 2 => Some(only),
        _ => None,
    }
}

fn class_name(names: &Names, c: usize) -> String {
    names
        .classes
        .get(c)
        .cloned()
        .unwrap_or_else(|| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> (Vec<String>, impl Fn(ClientId) -> String) {
        (vec!["no".into(), "yes".into()], |id: ClientId| {
            format!("client-{id}")
        })
    }

    fn cm(truth: &[u32], predicted: &[u32]) -> ConfusionMatrix {
        ConfusionMatrix::from_predictions(2, truth, predicted)
    }

    #[test]
    fn an_empty_model_that_answers_one_class_is_named_with_its_class() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        let evals = BTreeMap::from([
            (1, cm(&[0, 0, 1, 1, 1], &[1, 1, 1, 1, 1])),
            (2, cm(&[0, 1, 1], &[0, 1, 1])),
        ]);
        let w = round_warnings(3, &evals, None, &names);
        let kinds: Vec<WarningKind> = w.iter().map(|w| w.kind).collect();
        // 6 of 8 right against a majority of 5: eight rows cannot tell either.
        assert_eq!(kinds, [WarningKind::OneClass, WarningKind::NearChance]);
        assert_eq!(w[0].clients, vec![1]);
        assert_eq!(
            w[0].message,
            "round 3: 1 of 2 clients' models predict one class for every test row (client-1 → \"yes\")"
        );
    }

    #[test]
    fn one_class_is_no_symptom_where_the_rows_hold_one_class() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        let evals = BTreeMap::from([(1, cm(&[1, 1, 1], &[1, 1, 1]))]);
        assert!(round_warnings(1, &evals, None, &names).is_empty());
    }

    /// Under a non-IID split each client's own majority is an oracle no shared model matches:
    /// the baseline is the pooled rows' most common class.
    #[test]
    fn a_non_iid_split_is_judged_against_the_pooled_majority() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        // Client 1 holds "no" rows, client 2 "yes" rows; 36 of 40 right, pooled majority 20
        // of 40 (each client's own: all its rows).
        let rows = |class: u32| {
            (
                vec![class; 20],
                [vec![class; 18], vec![1 - class; 2]].concat(),
            )
        };
        let ((t1, p1), (t2, p2)) = (rows(0), rows(1));
        let evals = BTreeMap::from([(1, cm(&t1, &p1)), (2, cm(&t2, &p2))]);
        assert!(round_warnings(1, &evals, None, &names).is_empty());
    }

    /// The binomial tail against the majority share: P(X ≥ 6) for X ~ B(8, 1/2) is 37/256.
    #[test]
    fn the_tail_above_the_majority_is_the_binomial_one() {
        assert!((above_majority_p(6, 8, 4) - 37.0 / 256.0).abs() < 1e-12);
        assert!((above_majority_p(8, 8, 4) - 1.0 / 256.0).abs() < 1e-12);
        assert_eq!(above_majority_p(0, 8, 4), 1.0);
        assert_eq!(above_majority_p(8, 8, 8), 1.0);
    }

    /// At or above the majority is not enough: on few rows a model no better than the
    /// majority share would score as well by chance, and is warned, pooled and shared alike;
    /// the same accuracy on ten times the rows is not.
    #[test]
    fn an_accuracy_the_rows_cannot_tell_from_the_majority_is_warned() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        let few = |n: usize| {
            let truth = [vec![0; 5 * n], vec![1; 5 * n]].concat();
            let predicted = [vec![0; 4 * n], vec![1; 3 * n], vec![0; 2 * n], vec![1; n]].concat();
            cm(&truth, &predicted)
        };
        // 0.7 right where the majority is 0.5: 7 of 10 (p = 0.17), then 70 of 100.
        let evals = BTreeMap::from([(1, few(1))]);
        let w = round_warnings(4, &evals, Some(&few(1)), &names);
        let kinds: Vec<(WarningKind, usize)> =
            w.iter().map(|w| (w.kind, w.clients.len())).collect();
        assert_eq!(
            kinds,
            [(WarningKind::NearChance, 1), (WarningKind::NearChance, 0)]
        );
        assert!(
            w[1].message.contains(
                "the model answers 0.700 of 10 rows right, not significantly above the 0.500"
            ) && w[1].message.contains("p = 0.17"),
            "{}",
            w[1].message
        );
        let evals = BTreeMap::from([(1, few(10))]);
        assert!(round_warnings(4, &evals, Some(&few(10)), &names).is_empty());
        // A model answering one class is said to once, not again as near chance.
        let one = cm(&[0, 0, 0, 1, 1], &[0; 5]);
        let evals = BTreeMap::from([(1, one.clone()), (2, one.clone())]);
        let kinds: Vec<WarningKind> = round_warnings(4, &evals, Some(&one), &names)
            .iter()
            .map(|w| w.kind)
            .collect();
        assert_eq!(kinds, [WarningKind::OneClass, WarningKind::OneClass]);
    }

    /// Significant is not enough either: FCMs on 26 classes scored 0.058 against a majority of
    /// 0.041 on thousands of rows, far beyond luck and still next to nothing learned.
    #[test]
    fn an_accuracy_barely_above_the_majority_is_warned_however_many_rows() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        // 5,000 rows of which "no" holds 4,000 (0.800); 4,080 right (0.816): p ≈ 0.002, skill 8 %.
        let shared = |right_yes: usize| {
            let truth = [vec![0; 4000], vec![1; 1000]].concat();
            let predicted = [vec![0; 4000], vec![1; right_yes], vec![0; 1000 - right_yes]].concat();
            cm(&truth, &predicted)
        };
        let w = round_warnings(1, &BTreeMap::new(), Some(&shared(80)), &names);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].kind, WarningKind::NearChance);
        assert!(
            w[0].message
                .contains("0.816 of 5000 rows right against the 0.800")
                && w[0]
                    .message
                    .contains("fixes 8.0 % of that answer's errors, under 10 %"),
            "{}",
            w[0].message
        );
        // 4,150 right (0.830) fixes 15 %: learned.
        assert!(round_warnings(1, &BTreeMap::new(), Some(&shared(150)), &names).is_empty());
    }

    #[test]
    fn accuracy_below_the_majority_class_is_warned_pooled_and_on_the_shared_test_set() {
        let (classes, client) = names();
        let names = Names {
            classes: &classes,
            client: &client,
        };
        // 2 of 5 right where "no" holds 3 of 5: below the majority, yet two classes predicted.
        let bad = cm(&[0, 0, 0, 1, 1], &[1, 1, 0, 0, 1]);
        let evals = BTreeMap::from([(1, bad.clone()), (2, bad.clone())]);
        let w = round_warnings(2, &evals, Some(&bad), &names);
        let kinds: Vec<(WarningKind, usize)> =
            w.iter().map(|w| (w.kind, w.clients.len())).collect();
        assert_eq!(
            kinds,
            vec![
                (WarningKind::BelowMajority, 2),
                (WarningKind::BelowMajority, 0)
            ]
        );
        assert!(
            w[0].message
                .contains("0.400 of their test rows right, below the 0.600"),
            "{}",
            w[0].message
        );
        assert!(
            w[1].message
                .contains("0.400 of the shared test set right, below the 0.600"),
            "{}",
            w[1].message
        );
    }

    #[test]
    fn a_map_on_many_classes_is_warned_of_before_the_run() {
        assert!(fcm_on_many_classes(2).is_none());
        assert!(fcm_on_many_classes(FCM_MANY_CLASSES - 1).is_none());
        let w = fcm_on_many_classes(26).unwrap();
        assert_eq!((w.round, w.kind), (0, WarningKind::ManyClasses));
        assert!(w.message.contains("26 classes"), "{}", w.message);
    }

    #[test]
    fn clients_with_few_rows_per_class_are_told_so_once() {
        let counts = |per: u64, classes: usize| -> BTreeMap<ClientId, Vec<u64>> {
            (1..=10).map(|id| (id, vec![per; classes])).collect()
        };
        let w = few_training_rows(5, &counts(4, 3)).expect("4 rows per class");
        assert_eq!((w.round, w.kind), (5, WarningKind::FewRows));
        assert!(
            w.message.contains("12 rows each on average, 4.0 per class"),
            "{}",
            w.message
        );
        assert!(few_training_rows(5, &counts(20, 3)).is_none());
        assert!(few_training_rows(5, &BTreeMap::new()).is_none());
    }
}
