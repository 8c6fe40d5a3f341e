//! Splitting a dataset over clients. Every partitioner is a function of (dataset, seed), so each
//! client process computes the same split and keeps its own part.

use rand::seq::SliceRandom;

use super::Dataset;
use crate::rng::derive_rng;
use crate::{FlintError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    /// Shuffled, equal shares (the first `n mod k` clients get one more).
    Iid,
    /// Each client gets exactly its declared samples per class, drawn without replacement.
    Explicit,
}

impl PartitionKind {
    pub fn parse(s: Option<&str>) -> std::result::Result<PartitionKind, String> {
        match s.unwrap_or("iid") {
            "iid" => Ok(PartitionKind::Iid),
            "explicit" => Ok(PartitionKind::Explicit),
            other => Err(format!(
                "unknown partition.kind {other:?}; expected iid or explicit"
            )),
        }
    }
}

/// Row indices per client, in client order. `class_counts[k][c]` is used by `Explicit`.
pub fn partition(
    data: &Dataset,
    kind: PartitionKind,
    clients: usize,
    class_counts: &[Option<Vec<usize>>],
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let mut rng = derive_rng(seed, "partition", 0);
    match kind {
        PartitionKind::Iid => {
            if data.len() < clients {
                return Err(FlintError::Partition(format!(
                    "{} rows cannot give each of {clients} clients a sample",
                    data.len()
                )));
            }
            let mut all: Vec<usize> = (0..data.len()).collect();
            all.shuffle(&mut rng);
            let (base, extra) = (data.len() / clients, data.len() % clients);
            let mut parts = Vec::with_capacity(clients);
            let mut start = 0;
            for k in 0..clients {
                let len = base + usize::from(k < extra);
                parts.push(all[start..start + len].to_vec());
                start += len;
            }
            Ok(parts)
        }
        PartitionKind::Explicit => {
            let classes = data.classes.len();
            let mut pools: Vec<Vec<usize>> = vec![Vec::new(); classes];
            for (i, &c) in data.y.iter().enumerate() {
                pools[c as usize].push(i);
            }
            for (c, pool) in pools.iter_mut().enumerate() {
                pool.shuffle(&mut rng);
                let wanted: usize = class_counts.iter().flatten().map(|counts| counts[c]).sum();
                if wanted > pool.len() {
                    return Err(FlintError::Partition(format!(
                        "clients ask for {wanted} samples of class {:?} but the data has {}",
                        data.classes[c],
                        pool.len()
                    )));
                }
            }
            let mut taken = vec![0usize; classes];
            let mut parts = Vec::with_capacity(clients);
            for (k, counts) in class_counts.iter().enumerate().take(clients) {
                let counts = counts.as_ref().ok_or_else(|| {
                    FlintError::Partition(format!("client {} has no class_counts", k + 1))
                })?;
                let mut part = Vec::with_capacity(counts.iter().sum());
                for (c, &n) in counts.iter().enumerate() {
                    part.extend_from_slice(&pools[c][taken[c]..taken[c] + n]);
                    taken[c] += n;
                }
                parts.push(part);
            }
            Ok(parts)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(y: Vec<u32>) -> Dataset {
        Dataset {
            features: 1,
            x: vec![0.0; y.len()],
            y,
            classes: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn iid_covers_every_row_once_in_near_equal_parts() {
        let d = labels(vec![0; 10]);
        let parts = partition(&d, PartitionKind::Iid, 3, &[], 1).unwrap();
        assert_eq!(
            parts.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 3, 3]
        );
        let mut all: Vec<usize> = parts.concat();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn explicit_gives_exact_class_counts_without_overlap() {
        let d = labels(vec![0, 0, 0, 0, 1, 1, 1, 0, 1, 0]);
        let counts = vec![Some(vec![2, 1]), Some(vec![3, 2])];
        let parts = partition(&d, PartitionKind::Explicit, 2, &counts, 5).unwrap();
        for (part, want) in parts.iter().zip([[2, 1], [3, 2]]) {
            let got0 = part.iter().filter(|&&i| d.y[i] == 0).count();
            assert_eq!([got0, part.len() - got0], want);
        }
        let mut all = parts.concat();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 8);
    }

    #[test]
    fn explicit_refuses_to_overdraw_a_class() {
        let d = labels(vec![0, 1]);
        let err = partition(&d, PartitionKind::Explicit, 1, &[Some(vec![1, 2])], 0).unwrap_err();
        assert!(
            err.to_string()
                .contains("ask for 2 samples of class \"b\" but the data has 1"),
            "{err}"
        );
    }
}
