//! The splitting algorithms, each a function of (labels, seed), so each client process computes
//! the same split and keeps its own part.

use rand::seq::SliceRandom;

use crate::rng::{FlintRng, derive_rng};
use crate::{FlintError, Result};

/// Row indices grouped by class label.
#[derive(Debug, Clone)]
pub struct ClassPools(Vec<Vec<usize>>);

impl ClassPools {
    pub fn new(labels: &[u32], classes: usize) -> Result<ClassPools> {
        let mut pools: Vec<Vec<usize>> = vec![Vec::new(); classes];
        for (i, &c) in labels.iter().enumerate() {
            let c = c as usize;
            if c >= classes {
                return Err(FlintError::Partition(format!(
                    "label {c} of row {i} is not below {classes} classes"
                )));
            }
            pools[c].push(i);
        }
        Ok(ClassPools(pools))
    }

    /// Only the rows for which `keep` is true, grouped as before.
    pub fn filter(&self, keep: impl Fn(usize) -> bool) -> ClassPools {
        ClassPools(
            self.0
                .iter()
                .map(|p| p.iter().copied().filter(|&i| keep(i)).collect())
                .collect(),
        )
    }

    pub fn classes(&self) -> usize {
        self.0.len()
    }

    /// `samples` rows split over the classes in proportion to `p` (largest remainders, so the
    /// counts sum to `samples` exactly), drawn without replacement when the class has enough
    /// rows and with replacement when not. `client` names the client in errors.
    pub fn draw(
        &self,
        p: &[f64],
        samples: usize,
        rng: &mut FlintRng,
        client: usize,
    ) -> Result<Vec<usize>> {
        use rand::RngExt;
        use rand::seq::IndexedRandom;
        let mut part = Vec::with_capacity(samples);
        for (c, n) in apportion(p, samples).into_iter().enumerate() {
            if n == 0 {
                continue;
            }
            let pool = &self.0[c];
            if pool.is_empty() {
                return Err(FlintError::Partition(format!(
                    "client {client} needs {n} samples of class {c}, which has no rows"
                )));
            }
            if n <= pool.len() {
                part.extend(pool.sample(rng, n).copied());
            } else {
                part.extend((0..n).map(|_| pool[rng.random_range(0..pool.len())]));
            }
        }
        Ok(part)
    }
}

/// Integer counts summing to `total`, proportional to `p` (the largest-remainder method; ties
/// go to the lower class).
pub fn apportion(p: &[f64], total: usize) -> Vec<usize> {
    let sum: f64 = p.iter().sum();
    if p.is_empty() || sum <= 0.0 {
        return vec![0; p.len()];
    }
    let exact: Vec<f64> = p.iter().map(|x| x / sum * total as f64).collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let short = total - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &c in order.iter().take(short) {
        counts[c] += 1;
    }
    counts
}

/// TPFL §6.3: class proportions p ~ Dirichlet(alpha·1) of one client. Tiny α can underflow
/// every component to 0; the client then holds one class, drawn uniformly.
pub fn dirichlet_proportions(
    classes: usize,
    alpha: f64,
    rng: &mut FlintRng,
    client: usize,
) -> Result<Vec<f64>> {
    use rand::RngExt;
    use rand_distr::multi::Dirichlet;
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(FlintError::Partition(format!(
            "client {client}: alpha must be positive, got {alpha}"
        )));
    }
    let dist = Dirichlet::new(&vec![alpha; classes])
        .map_err(|e| FlintError::Partition(format!("client {client}: {e}")))?;
    let p: Vec<f64> = rng.sample(&dist);
    if p.iter().any(|v| !v.is_finite()) || p.iter().sum::<f64>() <= 0.0 {
        let pick = rng.random_range(0..classes);
        return Ok((0..classes)
            .map(|c| f64::from(u8::from(c == pick)))
            .collect());
    }
    Ok(p)
}

/// TPFL §6.3 (and its code, docs/papers/tpfl.md §7): for client k, class proportions
/// p ~ Dirichlet(alphas[k]·1), counts ≈ p · samples (summing to `samples`), each class drawn from the rows of that
/// class (without replacement when there are enough, with replacement when not). Clients draw
/// independently, so they may share rows, as in the paper's code. Large α gives near-uniform
/// classes (IID); small α concentrates a client on few classes.
pub fn dirichlet(
    labels: &[u32],
    classes: usize,
    alphas: &[f64],
    samples: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = ClassPools::new(labels, classes)?;
    let mut parts = Vec::with_capacity(alphas.len());
    for (k, &alpha) in alphas.iter().enumerate() {
        let client = k + 1;
        let mut rng = derive_rng(seed, "dirichlet", client as u32);
        let p = dirichlet_proportions(classes, alpha, &mut rng, client)?;
        parts.push(pools.draw(&p, samples, &mut rng, client)?);
    }
    Ok(parts)
}

/// The rows by class, for a split over `clients` (at least one).
fn pools_for(labels: &[u32], classes: usize, clients: usize) -> Result<ClassPools> {
    if clients == 0 {
        return Err(FlintError::Partition("no clients to split over".into()));
    }
    ClassPools::new(labels, classes)
}

/// Proportions q ~ Dirichlet(α·1_n), with TPFL's fallback when tiny α underflows.
fn dirichlet_over(n: usize, alpha: f64, rng: &mut FlintRng, what: usize) -> Result<Vec<f64>> {
    if n == 1 {
        return Ok(vec![1.0]);
    }
    dirichlet_proportions(n, alpha, rng, what)
}

/// FedTMOS §4.3.1 (Hsu et al., 2019): for each class c, proportions over the `clients` from
/// Dirichlet(α·1_J); class c's shuffled rows are split at the cumulative ⌊q·n_c⌋ (the last
/// client takes the remainder). Every row goes to exactly one client. A draw that leaves a
/// client with fewer than 10 rows (fewer than its share when the data are small) is drawn
/// again, as NIID-Bench's implementation of this split does, up to 1,000 times; after that the
/// caller reports the empty clients.
pub fn dirichlet_by_class(
    labels: &[u32],
    classes: usize,
    clients: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, clients)?;
    let mut rng = derive_rng(seed, "dirichlet-by-class", 0);
    let least = 10.min(labels.len() / clients).max(1);
    let mut parts = Vec::new();
    for _ in 0..1000 {
        parts = vec![Vec::new(); clients];
        for c in 0..classes {
            let mut rows = pools.0[c].clone();
            rows.shuffle(&mut rng);
            let q = dirichlet_over(clients, alpha, &mut rng, c)?;
            let mut start = 0;
            let mut cum = 0.0;
            for (k, part) in parts.iter_mut().enumerate() {
                cum += q[k];
                let end = if k + 1 == clients {
                    rows.len()
                } else {
                    ((cum * rows.len() as f64).floor() as usize).clamp(start, rows.len())
                };
                part.extend_from_slice(&rows[start..end]);
                start = end;
            }
        }
        if parts.iter().all(|p| p.len() >= least) {
            break;
        }
    }
    Ok(parts)
}

/// The FedTMOS code's Dirichlet split (docs/papers/fedtmos.md §16), kept to show its effect:
/// P = Dirichlet(α·1_J) per class, "balanced" by J rounds of dividing by column then row sums,
/// and client j takes ⌊P[j][c] · total rows⌋ rows of class c as a cumulative slice of the class's
/// rows in dataset order. The counts scale with the whole dataset, not the class, so the first
/// clients take whole classes and later ones often get nothing.
pub fn dirichlet_fedtmos_code(
    labels: &[u32],
    classes: usize,
    clients: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, clients)?;
    let mut rng = derive_rng(seed, "dirichlet-fedtmos-code", 0);
    // p[j][c]
    let mut p = vec![vec![0.0; classes]; clients];
    for c in 0..classes {
        let q = dirichlet_over(clients, alpha, &mut rng, c)?;
        for (j, row) in p.iter_mut().enumerate() {
            row[c] = q[j];
        }
    }
    for _ in 0..clients {
        for c in 0..classes {
            let col: f64 = p.iter().map(|row| row[c]).sum();
            if col > 0.0 {
                p.iter_mut().for_each(|row| row[c] /= col);
            }
        }
        for row in p.iter_mut() {
            let sum: f64 = row.iter().sum();
            if sum > 0.0 {
                row.iter_mut().for_each(|v| *v /= sum);
            }
        }
    }
    let total = labels.len() as f64;
    let mut taken = vec![0usize; classes];
    let mut parts = Vec::with_capacity(clients);
    for row in &p {
        let mut part = Vec::new();
        for (c, &share) in row.iter().enumerate() {
            let pool = &pools.0[c];
            let n = (share * total).floor() as usize;
            let end = (taken[c] + n).min(pool.len());
            part.extend_from_slice(&pool[taken[c]..end]);
            taken[c] = end;
        }
        parts.push(part);
    }
    Ok(parts)
}

/// Client k takes the next `counts[k][c]` rows of class c in file order, as the FedTMOS code
/// slices its unshuffled class lists; so counts computed from the code's own draw (numpy's,
/// `scripts/fedtmos-experiments.py`) give exactly its clients. A class asked for more rows than
/// it has is refused, naming it.
pub fn split_by_counts(
    labels: &[u32],
    classes: usize,
    counts: &[Vec<usize>],
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, counts.len())?;
    for (c, pool) in pools.0.iter().enumerate() {
        let asked = counts.iter().try_fold(0usize, |sum, k| {
            sum.checked_add(k.get(c).copied().unwrap_or(0))
        });
        match asked {
            Some(asked) if asked <= pool.len() => {}
            Some(asked) => {
                return Err(FlintError::Partition(format!(
                    "the clients' class_counts ask for {asked} rows of class {c}, which has {}",
                    pool.len()
                )));
            }
            None => {
                return Err(FlintError::Partition(format!(
                    "the clients' class_counts ask for more rows of class {c} than a count holds"
                )));
            }
        }
    }
    let mut taken = vec![0usize; classes];
    Ok(counts
        .iter()
        .map(|k| {
            let mut part = Vec::new();
            for (c, &n) in k.iter().enumerate().take(classes) {
                part.extend_from_slice(&pools.0[c][taken[c]..taken[c] + n]);
                taken[c] += n;
            }
            part
        })
        .collect())
}

/// FedTMOS's S(β): client i holds class i mod C and β − 1 other classes drawn from the seed;
/// each class's shuffled rows are split evenly (sizes differ by at most one) over the clients
/// holding it, in client order. Rows of a class nobody holds go to no one.
pub fn classes_per_client(
    labels: &[u32],
    classes: usize,
    clients: usize,
    beta: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    use rand::seq::IndexedRandom;
    if beta == 0 || beta > classes {
        return Err(FlintError::Partition(format!(
            "each client must hold 1 to {classes} classes, not {beta}"
        )));
    }
    let pools = ClassPools::new(labels, classes)?;
    let mut rng = derive_rng(seed, "classes-per-client", 0);
    let held: Vec<Vec<usize>> = (0..clients)
        .map(|i| {
            let own = i % classes;
            let others: Vec<usize> = (0..classes).filter(|&c| c != own).collect();
            let mut set = vec![own];
            set.extend(others.sample(&mut rng, beta - 1).copied());
            set
        })
        .collect();
    Ok(split_by_sets(&pools, &held, classes, &mut rng))
}

/// Every class's rows, shuffled, split evenly over the clients whose set holds it, in client
/// order (the first ones get one more, as numpy's `array_split`).
pub(super) fn split_by_sets(
    pools: &ClassPools,
    held: &[Vec<usize>],
    classes: usize,
    rng: &mut FlintRng,
) -> Vec<Vec<usize>> {
    let clients = held.len();
    let mut parts = vec![Vec::new(); clients];
    for c in 0..classes {
        let holders: Vec<usize> = (0..clients).filter(|&i| held[i].contains(&c)).collect();
        if holders.is_empty() {
            continue;
        }
        let mut rows = pools.0[c].clone();
        rows.shuffle(rng);
        let (base, extra) = (rows.len() / holders.len(), rows.len() % holders.len());
        let mut start = 0;
        for (k, &i) in holders.iter().enumerate() {
            let len = base + usize::from(k < extra);
            parts[i].extend_from_slice(&rows[start..start + len]);
            start += len;
        }
    }
    parts
}

/// The 1-based ids of the clients a split left without rows, to report (never to drop
/// silently).
pub fn empty_clients(parts: &[Vec<usize>]) -> Vec<usize> {
    (0..parts.len())
        .filter(|&k| parts[k].is_empty())
        .map(|k| k + 1)
        .collect()
}
