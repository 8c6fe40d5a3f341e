//! Fed-OneShot's ensemble (Guha et al. 2019): every client's network predicts, and the mean of
//! their logits decides, as the ensemble the data-free distillation baselines distil from
//! (DENSE, Co-Boosting) averages them.

use crate::model::cnn::{Cnn, Samples, argmax, net};

/// Each sample's class under the mean of the networks' logits, in batches of 256.
pub fn ensemble_predict(nets: &[Cnn], samples: &Samples) -> Vec<u32> {
    let Some(first) = nets.first() else {
        return vec![0; samples.len()];
    };
    let classes = first.arch.classes();
    let (mut tape, mut x) = (net::Tape::default(), Vec::new());
    let all: Vec<usize> = (0..samples.len()).collect();
    let mut out = Vec::with_capacity(samples.len());
    for batch in all.chunks(256) {
        samples.gather(batch, &mut x);
        let mut sum = vec![0.0f64; batch.len() * classes];
        for cnn in nets {
            net::forward(&cnn.arch, &cnn.params, &x, batch.len(), &mut tape);
            sum.iter_mut()
                .zip(tape.logits())
                .for_each(|(s, v)| *s += f64::from(*v));
        }
        out.extend(sum.chunks_exact(classes).map(|r| argmax(r) as u32));
    }
    out
}
