//! Step 6 (Algorithm 3): each server model's classes averaged, include bits by top K; and
//! steps 1–6 in one call.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use super::clustering::{ModelPlan, cluster, reassign};
use super::scaling::{entries, mean};
use super::section::{BitsBy, FedTmosServerParams};
use crate::model::tm::parts::{ClassParts, IncludeBits, TmParts, TmUpload};
use crate::rng::FlintRng;
use crate::strategy::robust::RobustHyper;
use crate::{ClientId, FlintError, Result};

/// Step 6: Algorithm 3 over the plans. `scaled` holds every contributor's scaled weights; their
/// mean (Algorithm 3, line 3) is `robust`'s combination where that is not the plain mean.
pub fn average<U: Borrow<TmUpload>>(
    plans: &[ModelPlan],
    uploads: &BTreeMap<ClientId, U>,
    scaled: &BTreeMap<(ClientId, u32), Vec<u32>>,
    top_k: usize,
    bits_by: BitsBy,
    robust: &RobustHyper,
) -> Result<Vec<TmParts>> {
    let missing = |client: ClientId, class: u32| {
        FlintError::Model(format!(
            "client {client} contributes class {class} but uploaded none"
        ))
    };
    // Every class has the machine's shape: take it from any upload.
    let (clauses, include_len) = uploads
        .values()
        .find_map(|u| u.borrow().parts.classes.values().next())
        .map_or((0, 0), |c| (c.weights.len(), c.include.0.len()));
    let zeros = vec![0u32; clauses];
    let mut out = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut model = TmParts::default();
        for (&class, contributors) in &plan.contributors {
            let vectors: Vec<&Vec<u32>> = contributors
                .iter()
                .map(|&j| match scaled.get(&(j, class)) {
                    Some(v) => Ok(v),
                    None if plan.absent.contains(&(j, class)) => Ok(&zeros),
                    None => Err(missing(j, class)),
                })
                .collect::<Result<_>>()?;
            let weights = clause_weights(&vectors, clauses, robust);
            let mut ranked: Vec<(ClientId, f64)> = contributors
                .iter()
                .zip(&vectors)
                .map(|(&j, v)| {
                    let score = match bits_by {
                        BitsBy::Samples => uploads
                            .get(&j)
                            .and_then(|u| u.borrow().parts.classes.get(&class))
                            .map_or(0.0, |c| c.samples as f64),
                        BitsBy::MeanWeight => mean(v),
                    };
                    (j, score)
                })
                .collect();
            // Highest first; the lower client id on a tie. A client counted twice counts once.
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            ranked.dedup_by_key(|r| r.0);
            ranked.retain(|(j, _)| !plan.absent.contains(&(*j, class)));
            // A class only absent contributors give has no literal, in the machine's shape.
            let mut include = IncludeBits(vec![0; include_len]);
            for (j, _) in ranked.iter().take(top_k) {
                let bits = uploads
                    .get(j)
                    .and_then(|u| u.borrow().parts.classes.get(&class))
                    .ok_or_else(|| missing(*j, class))?;
                include.or(&bits.include);
            }
            let parts = ClassParts {
                weights,
                include,
                samples: 0,
            };
            model.classes.insert(class, parts);
        }
        out.push(model);
    }
    Ok(out)
}

/// One class's clause weights from its contributors' scaled vectors: their mean, floored (the
/// code's integer cast), or `robust`'s combination of them.
fn clause_weights(vectors: &[&Vec<u32>], clauses: usize, robust: &RobustHyper) -> Vec<u32> {
    if robust.is_plain() {
        return (0..clauses)
            .map(|i| {
                let sum: f64 = vectors.iter().map(|v| f64::from(v[i])).sum();
                (sum / vectors.len() as f64) as u32
            })
            .collect();
    }
    let rows: Vec<Vec<f64>> = vectors
        .iter()
        .map(|v| v.iter().map(|&w| f64::from(w)).collect())
        .collect();
    let views: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
    let equal = vec![1.0 / rows.len() as f64; rows.len()];
    // Combinations of non-negative weights stay non-negative; the cast floors as above.
    robust
        .combine(&views, &equal)
        .0
        .into_iter()
        .map(|w| w as u32)
        .collect()
}

/// What steps 1–6 made of a round's uploads.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps {
    pub models: Vec<TmParts>,
    pub plans: Vec<ModelPlan>,
    /// x.
    pub scale: f64,
    /// Vectors that entered k-means, and its k.
    pub vectors: usize,
    pub clusters: usize,
}

/// Steps 1–6 on a round's uploads.
pub fn server_steps<U: Borrow<TmUpload>>(
    uploads: &BTreeMap<ClientId, U>,
    params: &FedTmosServerParams,
    robust: &RobustHyper,
    rng: &mut FlintRng,
) -> Result<Steps> {
    let (entries, x) = entries(
        uploads,
        params.sigma,
        params.filter,
        params.weight_resolution,
    );
    let clusters = cluster(&entries, params.k_max, rng)?;
    let plans = reassign(&clusters, params.models, params.fill_from);
    let vectors = entries.len();
    // Every contributor a plan names is one of the clustered entries, already scaled.
    let scaled: BTreeMap<(ClientId, u32), Vec<u32>> = entries
        .into_iter()
        .map(|e| ((e.client, e.class), e.scaled))
        .collect();
    let models = average(
        &plans,
        uploads,
        &scaled,
        params.top_k,
        params.bits_by,
        robust,
    )?;
    Ok(Steps {
        models,
        plans,
        scale: x,
        vectors,
        clusters: clusters.len(),
    })
}
