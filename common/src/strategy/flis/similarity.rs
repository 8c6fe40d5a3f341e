use crate::ClientId;

/// Each client with its cluster (itself among the members), in client-id order.
pub type Clusters = Vec<(ClientId, Vec<ClientId>)>;

/// Inference similarity (Morafah et al. 2023, as the authors' code computes it): each
/// network's predictions on the server's images as one-hot rows A_i, and
/// sim(i, j) = ⟨A_i, A_j⟩ / (‖A_i‖ ‖A_j‖), which for one-hot rows is the fraction of images the
/// two predict alike.
pub fn inference_similarity(predictions: &[Vec<u32>]) -> Vec<Vec<f64>> {
    let n = predictions.len();
    let mut sim = vec![vec![1.0; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = (&predictions[i], &predictions[j]);
            let alike = a.iter().zip(b).filter(|(x, y)| x == y).count();
            let s = alike as f64 / a.len().max(1) as f64;
            sim[i][j] = s;
            sim[j][i] = s;
        }
    }
    sim
}

/// Each client's cluster: itself and every client at least `threshold` similar to it, in
/// client-id order. Clusters overlap and need not be transitive, as in the authors' code.
pub fn neighbourhoods(clients: &[ClientId], sim: &[Vec<f64>], threshold: f64) -> Clusters {
    clients
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let near = clients
                .iter()
                .enumerate()
                .filter(|&(j, _)| j == i || sim[i][j] >= threshold)
                .map(|(_, &d)| d)
                .collect();
            (c, near)
        })
        .collect()
}
