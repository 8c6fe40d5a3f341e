//! FedFisher (Jhunjhunwala et al.) with diagonal Fisher information: the global model maximises
//! the product of the clients' Laplace posteriors, N(w_k, (n_k F_k)⁻¹), whose optimum with
//! diagonal F_k is, parameter by parameter, w = Σ_k p_k F_k w_k / Σ_k p_k F_k (p_k = n_k / n).
//! The authors' code reaches this point by Adam iterations picked on a validation set; with no
//! such set on a one-shot server, Flint takes the closed form (their "Fisher merge").

/// Where the weighted Fisher information is below this, no client says anything of the
/// parameter: it takes the weighted mean, as the authors' code does.
pub const NO_INFORMATION: f64 = 1e-6;

pub fn merge(nets: &[&[f32]], fishers: &[&[f32]], weights: &[f64]) -> Vec<f32> {
    let len = nets.first().map_or(0, |v| v.len());
    (0..len)
        .map(|i| {
            let (mut f, mut fw, mut mean) = (0.0, 0.0, 0.0);
            for ((net, fisher), p) in nets.iter().zip(fishers).zip(weights) {
                let (w, fi) = (f64::from(net[i]), p * f64::from(fisher[i]));
                f += fi;
                fw += fi * w;
                mean += p * w;
            }
            match f < NO_INFORMATION {
                true => mean as f32,
                false => (fw / f) as f32,
            }
        })
        .collect()
}
