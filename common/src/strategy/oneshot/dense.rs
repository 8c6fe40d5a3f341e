//! DENSE (Zhang et al. 2022a), data-free one-shot FL by distillation on the server: a generator
//! is trained to make images the clients' ensemble is sure of (the cross-entropy against
//! sampled labels) and on which a student disagrees with it (the adversarial term); the student,
//! started from the clients' mean, is distilled from the ensemble on every image generated so
//! far. Each server epoch is `generator_steps` Adam steps on the generator and its latent codes,
//! the batch of lowest loss kept, then one pass of the student over everything kept, as the
//! authors' code runs it (FedFisher's copy of it: Adam at 10⁻³, β = (0.5, 0.999); KL at
//! temperature 20 for the student, SGD 0.01 with momentum 0.9). The networks' passes over a
//! generated batch are independent, so they run on the server's cores and are summed in order.
//!
//! Two things differ, both said in the guide: the generator is a two-layer perceptron
//! (latent 256 → 512 → the image, sigmoid), not their convolutional one with batch norms, whose
//! ~10⁸ multiply-adds an image are out of reach of a CPU server at 30 steps of 256 an epoch; and
//! the teachers (LeNet-5) have no batch norms, so their statistics term is zero, as it is for
//! any network without them in their code. No augmentation of the generated images.

use rand::RngExt;
use rand::seq::SliceRandom;
use rand_distr::StandardNormal;

use super::OneShotHyper;
use crate::model::cnn::arch::{Layer, Shape, dense};
use crate::model::cnn::net::{self, Tape};
use crate::model::cnn::{Architecture, Cnn, argmax, softmax};
use crate::parallel;
use crate::rng::FlintRng;

const LATENT: usize = 256;
const HIDDEN: usize = 512;
const GENERATOR_LR: f32 = 1e-3;
const STUDENT_LR: f32 = 0.01;
const STUDENT_MOMENTUM: f32 = 0.9;

/// The distilled student, from the clients' `teachers` and their weighted mean `start`, the
/// networks' passes on `threads` threads (the same student for any count).
pub fn distill(
    threads: usize,
    arch: &Architecture,
    teachers: &[&[f32]],
    start: Vec<f32>,
    hyper: &OneShotHyper,
    rng: &mut FlintRng,
) -> Vec<f32> {
    let mut run = Distillation::new(arch, teachers, start, hyper, threads, rng);
    for epoch in 1..=hyper.distill_epochs {
        let loss = run.synthesize(rng);
        let kd = run.distill_student(rng);
        tracing::info!(
            epoch,
            of = hyper.distill_epochs,
            images = run.pool_len(),
            generator_loss = loss,
            student_loss = kd,
            "dense: server epoch"
        );
    }
    run.student.params
}

struct Distillation<'a> {
    arch: &'a Architecture,
    teachers: &'a [&'a [f32]],
    student: Cnn,
    generator: Cnn,
    hyper: &'a OneShotHyper,
    classes: usize,
    /// Every kept image, and the ensemble's mean logits on it.
    pool: Vec<f32>,
    pool_logits: Vec<f32>,
    velocity: Vec<f32>,
    /// Each teacher's pass, then the student's, kept from step to step (a pass's buffers are
    /// megabytes at a batch of 256).
    passes: Vec<Pass>,
    threads: usize,
}

/// One network's pass over the generated batch, and its gradient in the images.
#[derive(Default)]
struct Pass {
    tape: Tape,
    dx: Vec<f32>,
}

impl<'a> Distillation<'a> {
    fn new(
        arch: &'a Architecture,
        teachers: &'a [&'a [f32]],
        start: Vec<f32>,
        hyper: &'a OneShotHyper,
        threads: usize,
        rng: &mut FlintRng,
    ) -> Self {
        let layers = [dense(HIDDEN), Layer::Relu, dense(arch.input.len())];
        // Dense layers take any width: the placement cannot fail on a network's image.
        let shape = Architecture::place(arch.name, Shape::Flat(LATENT), &layers)
            .unwrap_or_else(|_| arch.clone());
        Distillation {
            arch,
            teachers,
            student: Cnn {
                arch: arch.clone(),
                params: start,
            },
            generator: Cnn::init(shape, rng),
            hyper,
            classes: arch.classes(),
            pool: Vec::new(),
            pool_logits: Vec::new(),
            velocity: Vec::new(),
            passes: (0..=teachers.len()).map(|_| Pass::default()).collect(),
            threads,
        }
    }

    fn pool_len(&self) -> usize {
        self.pool_logits.len() / self.classes.max(1)
    }

    /// One epoch of the generator; keeps its batch of lowest loss. Returns that loss.
    fn synthesize(&mut self, rng: &mut FlintRng) -> f64 {
        let b = self.hyper.synthesis_batch as usize;
        let mut z: Vec<f32> = (0..b * LATENT)
            .map(|_| rng.sample(StandardNormal))
            .collect();
        let targets: Vec<usize> = (0..b).map(|_| rng.random_range(0..self.classes)).collect();
        let mut adam = Adam::new(self.generator.params.len() + z.len());
        let (mut best, mut best_images) = (f64::INFINITY, Vec::new());
        let mut g_tape = Tape::default();
        let (mut images, mut dz, mut dimg) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.hyper.generator_steps {
            net::forward(
                &self.generator.arch,
                &self.generator.params,
                &z,
                b,
                &mut g_tape,
            );
            images.clear();
            images.extend(g_tape.logits().iter().map(|v| sigmoid(*v)));
            let loss = self.generator_loss(&images, &targets, &mut dimg);
            if loss < best {
                (best, best_images) = (loss, images.clone());
            }
            // Through the sigmoid, then the generator, on to its latent codes.
            let dout: Vec<f32> = dimg
                .iter()
                .zip(&images)
                .map(|(d, y)| d * y * (1.0 - y))
                .collect();
            net::backward_to_input(
                &self.generator.arch,
                &self.generator.params,
                &dout,
                &mut g_tape,
                &mut dz,
            );
            let mut both = std::mem::take(&mut self.generator.params);
            both.extend_from_slice(&z);
            let mut grad = g_tape.grad().to_vec();
            grad.extend_from_slice(&dz);
            adam.step(&mut both, &grad, GENERATOR_LR);
            let latent = both.split_off(both.len() - z.len());
            z = latent;
            self.generator.params = both;
        }
        let logits = self.ensemble_logits(&best_images, b);
        self.pool.extend_from_slice(&best_images);
        self.pool_logits.extend_from_slice(&logits);
        best
    }

    /// The generator's loss on `images` ([`loss_terms`]), its gradient in them written to
    /// `dimg`.
    fn generator_loss(&mut self, images: &[f32], targets: &[usize], dimg: &mut Vec<f32>) -> f64 {
        let (b, c, k) = (targets.len(), self.classes, self.teachers.len() as f32);
        let mut passes = std::mem::take(&mut self.passes);
        let nets: Vec<&[f32]> = self.nets().collect();
        let arch = self.arch;
        parallel::each_mut(&mut passes, self.threads, |i, pass| {
            net::forward(arch, nets[i], images, b, &mut pass.tape)
        });
        let (teacher_passes, student_pass) = passes.split_at(self.teachers.len());
        let t = mean_logits(teacher_passes, b * c);
        let s = student_pass[0].tape.logits();
        let (loss, dt, ds) = loss_terms(&t, s, targets, c, self.hyper.adversarial as f32);
        let dt_each: Vec<f32> = dt.iter().map(|d| d / k).collect();
        let student = self.teachers.len();
        parallel::each_mut(&mut passes, self.threads, |i, pass| {
            let d = if i == student { &ds } else { &dt_each };
            net::input_gradient(arch, nets[i], d, &mut pass.tape, &mut pass.dx);
        });
        // Summed in the networks' order: the same floats for any number of threads.
        dimg.clear();
        dimg.resize(images.len(), 0.0);
        for pass in &passes {
            dimg.iter_mut().zip(&pass.dx).for_each(|(a, d)| *a += d);
        }
        self.passes = passes;
        loss
    }

    /// Every teacher, then the student.
    fn nets(&self) -> impl Iterator<Item = &[f32]> {
        let student = self.student.params.as_slice();
        self.teachers
            .iter()
            .copied()
            .chain(std::iter::once(student))
    }

    /// The ensemble's mean logits on `n` images.
    fn ensemble_logits(&mut self, images: &[f32], n: usize) -> Vec<f32> {
        let (arch, teachers) = (self.arch, self.teachers);
        let passes = &mut self.passes[..teachers.len()];
        parallel::each_mut(passes, self.threads, |i, pass| {
            net::forward(arch, teachers[i], images, n, &mut pass.tape)
        });
        mean_logits(passes, n * self.classes)
    }

    /// One pass of the student over every kept image, in an order from `rng`: KL divergence to
    /// the ensemble at the run's temperature (× T², as their code scales it). Returns its mean.
    fn distill_student(&mut self, rng: &mut FlintRng) -> f64 {
        let (per, c) = (self.arch.input.len(), self.classes);
        let temperature = self.hyper.temperature as f32;
        let b = self.hyper.synthesis_batch as usize;
        let mut order: Vec<usize> = (0..self.pool_len()).collect();
        order.shuffle(rng);
        self.velocity.resize(self.student.params.len(), 0.0);
        let (mut tape, mut x, mut sum, mut batches) = (Tape::default(), Vec::new(), 0.0f64, 0);
        for rows in order.chunks(b) {
            x.clear();
            rows.iter()
                .for_each(|&r| x.extend_from_slice(&self.pool[r * per..(r + 1) * per]));
            net::forward(self.arch, &self.student.params, &x, rows.len(), &mut tape);
            let mut d = vec![0.0f32; rows.len() * c];
            let mut loss = 0.0f64;
            for (i, &r) in rows.iter().enumerate() {
                let q = softmax(&self.pool_logits[r * c..(r + 1) * c], temperature);
                let p = softmax(&tape.logits()[i * c..(i + 1) * c], temperature);
                for j in 0..c {
                    loss += f64::from(q[j] * (q[j].max(1e-12).ln() - p[j].max(1e-12).ln()));
                    d[i * c + j] = temperature * (p[j] - q[j]) / rows.len() as f32;
                }
            }
            net::backward_from(self.arch, &self.student.params, &d, &mut tape);
            for ((w, v), g) in self
                .student
                .params
                .iter_mut()
                .zip(&mut self.velocity)
                .zip(tape.grad())
            {
                *v = STUDENT_MOMENTUM * *v + g;
                *w -= STUDENT_LR * *v;
            }
            sum += loss * f64::from(temperature * temperature) / rows.len() as f64;
            batches += 1;
        }
        sum / f64::from(batches.max(1))
    }
}

/// Adam (Kingma & Ba 2015) with DENSE's β = (0.5, 0.999): three lines of arithmetic over one
/// flat vector, which no optimizer crate takes without its own tensor type.
struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Self {
        Adam {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    fn step(&mut self, params: &mut [f32], grad: &[f32], lr: f32) {
        let (b1, b2, eps) = (0.5f32, 0.999f32, 1e-8f32);
        self.t += 1;
        let (c1, c2) = (1.0 - b1.powi(self.t), 1.0 - b2.powi(self.t));
        for (((w, g), m), v) in params
            .iter_mut()
            .zip(grad)
            .zip(&mut self.m)
            .zip(&mut self.v)
        {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *w -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
        }
    }
}

/// The loss on a batch from the ensemble's mean logits `t` and the student's `s`, and its
/// gradients in both: the ensemble's cross-entropy against the sampled `targets` (the one-hot
/// term), minus `adv` × the KL divergence between the ensemble and the student on the images
/// where they agree.
fn loss_terms(
    t: &[f32],
    s: &[f32],
    targets: &[usize],
    c: usize,
    adv: f32,
) -> (f64, Vec<f32>, Vec<f32>) {
    let b = targets.len();
    let (mut loss, mut dt, mut ds) = (0.0f64, vec![0.0f32; b * c], vec![0.0f32; b * c]);
    for i in 0..b {
        let (ti, si) = (&t[i * c..(i + 1) * c], &s[i * c..(i + 1) * c]);
        let (q, p) = (softmax(ti, 1.0), softmax(si, 1.0));
        loss -= f64::from(q[targets[i]].max(1e-12).ln()) / b as f64;
        for j in 0..c {
            dt[i * c + j] += (q[j] - f32::from(u8::from(j == targets[i]))) / b as f32;
        }
        if argmax(ti) != argmax(si) || adv == 0.0 {
            continue;
        }
        let kl: f32 = (0..c)
            .map(|j| q[j] * (q[j].max(1e-12).ln() - p[j].max(1e-12).ln()))
            .sum();
        loss -= f64::from(adv * kl) / b as f64;
        for j in 0..c {
            let log_ratio = q[j].max(1e-12).ln() - p[j].max(1e-12).ln();
            dt[i * c + j] -= adv * q[j] * (log_ratio - kl) / b as f32;
            ds[i * c + j] -= adv * (p[j] - q[j]) / b as f32;
        }
    }
    (loss, dt, ds)
}

/// The teachers' mean logits, `len` of them: each divided by k before the sum, in the teachers'
/// order, so the floats are those of the recorded runs.
fn mean_logits(teacher_passes: &[Pass], len: usize) -> Vec<f32> {
    let k = teacher_passes.len() as f32;
    let mut t = vec![0.0f32; len];
    for pass in teacher_passes {
        t.iter_mut()
            .zip(pass.tape.logits())
            .for_each(|(s, v)| *s += v / k);
    }
    t
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cnn::ArchName;
    use crate::rng::derive_rng;

    fn linear(d: usize, out: usize) -> Architecture {
        let layers = [Layer::Dense { out, bias: true }];
        Architecture::place(ArchName::Cnn2, Shape::Flat(d), &layers).unwrap()
    }

    fn networks(arch: &Architecture, n: usize, rng: &mut FlintRng) -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                (0..arch.params)
                    .map(|_| rng.random_range(-1.0f32..1.0))
                    .collect()
            })
            .collect()
    }

    /// The generator's loss is differentiated by hand (cross-entropy of the ensemble, minus the
    /// masked KL divergence to the student): its gradient in the images against central finite
    /// differences.
    #[test]
    fn the_generator_loss_gradient_matches_finite_differences() {
        let arch = linear(4, 3);
        let mut rng = derive_rng(2, "dense-test", 0);
        let nets = networks(&arch, 3, &mut rng);
        let teachers: Vec<&[f32]> = nets[..2].iter().map(Vec::as_slice).collect();
        let hyper = OneShotHyper::default();
        let mut run = Distillation::new(&arch, &teachers, nets[2].clone(), &hyper, 1, &mut rng);
        let images: Vec<f32> = (0..8).map(|_| rng.random_range(0.0f32..1.0)).collect();
        let targets = [0, 2];
        let mut grad = Vec::new();
        run.generator_loss(&images, &targets, &mut grad);
        let eps = 1e-3f32;
        for i in 0..images.len() {
            let mut at = |delta: f32| {
                let mut x = images.clone();
                x[i] += delta;
                run.generator_loss(&x, &targets, &mut Vec::new())
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * f64::from(eps));
            let analytic = f64::from(grad[i]);
            assert!(
                (numeric - analytic).abs() < 0.02 * numeric.abs().max(1e-2),
                "image value {i}: analytic {analytic}, numeric {numeric}"
            );
        }
    }

    /// The same seed distils the same student, and the student moves from its start.
    #[test]
    fn distillation_is_reproducible_and_trains_the_student() {
        let arch = linear(16, 3);
        let mut rng = derive_rng(3, "dense-test", 0);
        let nets = networks(&arch, 3, &mut rng);
        let teachers: Vec<&[f32]> = nets.iter().map(Vec::as_slice).collect();
        let hyper = OneShotHyper {
            distill_epochs: 3,
            generator_steps: 4,
            synthesis_batch: 8,
            ..OneShotHyper::default()
        };
        let start = nets[0].clone();
        let once = distill(
            1,
            &arch,
            &teachers,
            start.clone(),
            &hyper,
            &mut derive_rng(5, "d", 0),
        );
        let again = distill(
            1,
            &arch,
            &teachers,
            start.clone(),
            &hyper,
            &mut derive_rng(5, "d", 0),
        );
        assert_eq!(once, again);
        assert_ne!(once, start);
        assert!(once.iter().all(|w| w.is_finite()));
        // The passes on threads: the same student to the bit, for any count.
        for threads in [0, 1, 2, 4, 16] {
            let on = distill(
                threads,
                &arch,
                &teachers,
                start.clone(),
                &hyper,
                &mut derive_rng(5, "d", 0),
            );
            assert_eq!(on, once, "{threads} threads");
        }
    }
}
