//! OT-Fusion (Singh & Jaggi 2020, §4, "wts" alignment): layer by layer, each client's neurons
//! are matched to those of the first client's network (the pivot) by exact optimal transport
//! between uniform measures over the neurons, with the Euclidean distance between their
//! incoming weights (already re-ordered by the previous layer's match) as ground cost; the
//! aligned networks are then averaged, weights n_k / n. Between two layers of equal width the
//! optimal plan is a permutation (Birkhoff), found here as an assignment; the output layer's
//! neurons are the classes and stay in place.

use pathfinding::kuhn_munkres::kuhn_munkres_min;
use pathfinding::matrix::Matrix;

use crate::model::cnn::Architecture;

/// Costs are compared as integers: a millionth of a unit of distance.
const COST_SCALE: f64 = 1e6;

/// The fused network, and how many hidden neurons, over every client, the alignment moved
/// from their own place (0: the networks were aligned already, and the fusion is their mean).
pub fn fuse(arch: &Architecture, nets: &[&[f32]], weights: &[f64]) -> (Vec<f32>, u32) {
    let Some(pivot) = nets.first() else {
        return (Vec::new(), 0);
    };
    let (aligned, moved): (Vec<Vec<f32>>, Vec<u32>) =
        nets.iter().map(|net| align(arch, net, pivot)).unzip();
    let views: Vec<&[f32]> = aligned.iter().map(Vec::as_slice).collect();
    let fused = crate::strategy::fedavg_cnn::weighted_mean(&views, weights);
    (fused, moved.iter().sum())
}

/// `net` with every hidden layer's neurons re-ordered to match `pivot`'s, and how many moved.
pub fn align(arch: &Architecture, net: &[f32], pivot: &[f32]) -> (Vec<f32>, u32) {
    let mut out = net.to_vec();
    let mut moved = 0;
    let layers: Vec<_> = arch.layers.iter().filter(|l| l.params > 0).collect();
    let mut previous: Option<Vec<usize>> = None;
    for (at, l) in layers.iter().enumerate() {
        let (span, biases, neurons) = (l.split().0, l.split().1, l.neurons());
        let per = span / neurons;
        // Each neuron's incoming weights (inputs in the pivot's order) and its bias.
        let rows: Vec<Vec<f32>> = (0..neurons)
            .map(|o| {
                let w = &net[l.offset + o * per..][..per];
                let mut row = reorder_inputs(w, previous.as_deref());
                row.extend((biases > 0).then(|| net[l.offset + span + o]));
                row
            })
            .collect();
        let pivot_rows: Vec<&[f32]> = (0..neurons)
            .map(|o| &pivot[l.offset + o * per..][..per])
            .collect();
        let order = match at + 1 == layers.len() {
            true => (0..neurons).collect(),
            false => matching(&rows, &pivot_rows, per),
        };
        moved += order.iter().enumerate().filter(|(s, f)| s != *f).count() as u32;
        for (slot, &from) in order.iter().enumerate() {
            out[l.offset + slot * per..][..per].copy_from_slice(&rows[from][..per]);
            if biases > 0 {
                out[l.offset + span + slot] = rows[from][per];
            }
        }
        previous = Some(order);
    }
    (out, moved)
}

/// A neuron's incoming weights with the previous layer's neurons (blocks of equal size: a
/// channel's kernel or its flattened plane, or one input) in the new order.
fn reorder_inputs(w: &[f32], order: Option<&[usize]>) -> Vec<f32> {
    let Some(order) = order else {
        return w.to_vec();
    };
    let block = w.len() / order.len();
    order
        .iter()
        .flat_map(|&from| &w[from * block..(from + 1) * block])
        .copied()
        .collect()
}

/// `order[slot]`: which of `rows` goes to the pivot's neuron `slot`, at the least total
/// Euclidean distance between incoming weights (biases are compared where both have them).
fn matching(rows: &[Vec<f32>], pivot: &[&[f32]], per: usize) -> Vec<usize> {
    let n = rows.len();
    let mut costs = Vec::with_capacity(n * n);
    for row in rows {
        for p in pivot {
            let d: f64 = row[..per]
                .iter()
                .zip(*p)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum();
            costs.push((d.sqrt() * COST_SCALE).round() as i64);
        }
    }
    let Ok(matrix) = Matrix::from_vec(n, n, costs) else {
        return (0..n).collect();
    };
    let (_, to_slot) = kuhn_munkres_min(&matrix);
    let mut order = vec![0; n];
    for (from, &slot) in to_slot.iter().enumerate() {
        order[slot] = from;
    }
    order
}
