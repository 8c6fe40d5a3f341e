//! Particle swarm optimisation over the box [−1, 1]^d (Blind FL, "FCM automatic construction with
//! Particle Swarm Optimisation", eq. 5–6):
//!
//! `v ← v + U(0,φ₁) ⊗ (pbest − w) + U(0,φ₂) ⊗ (gbest − w)`, `w ← w + v`.
//!
//! The paper's update has no inertia term, so nothing damps the velocity but the clamp
//! `|v| ≤ max_velocity`; positions are clamped to [−1, 1], the FCM weight range. Each particle's
//! fitness is sampled after its move and the swarm's best is updated at once (asynchronous gbest),
//! so later particles of the same iteration already follow it. Deterministic for a given generator.

use rand::RngExt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, at_least, positive, require};
use crate::rng::FlintRng;

/// `[pso]`: particle swarm optimisation of the FCM weights (Blind FL paper, eq. 5–6); the
/// defaults are the paper's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PsoHyper {
    /// Particles.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub swarm: usize,
    /// Moves of the whole swarm per round, after the initial evaluation.
    #[serde(deserialize_with = "at_least::<0, _, _>")]
    pub iterations: usize,
    /// Upper bound φ₁ of the cognitive (own best) factor U(0, φ₁).
    pub phi1: f64,
    /// Upper bound φ₂ of the social (swarm best) factor U(0, φ₂).
    pub phi2: f64,
    /// Velocity clamp per component.
    pub max_velocity: f64,
}

impl Default for PsoHyper {
    fn default() -> Self {
        PsoHyper {
            swarm: 10,
            iterations: 20,
            phi1: 2.0,
            phi2: 2.0,
            max_velocity: 0.2,
        }
    }
}

impl PsoHyper {
    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<PsoHyper> {
        let non_negative =
            |key, v: f64| require(key, "zero or positive", v, v.is_finite() && v >= 0.0);
        require("pso.swarm", "at least 1", self.swarm, self.swarm > 0)?;
        non_negative("pso.phi1", self.phi1)?;
        non_negative("pso.phi2", self.phi2)?;
        positive("pso.max_velocity", self.max_velocity)?;
        Ok(self)
    }
}

impl PsoHyper {
    /// Fitness evaluations one run makes: the initial swarm, then one per particle per iteration.
    pub fn evaluations(&self) -> usize {
        self.swarm * (self.iterations + 1)
    }
}

/// The swarm's best position and fitness after a run.
#[derive(Debug, Clone, PartialEq)]
pub struct PsoOutcome {
    pub best: Vec<f64>,
    pub fitness: f64,
    pub evaluations: usize,
}

/// Minimises `fitness` over [−1, 1]^dim. The first particles start at `seeds` (clamped; e.g. the
/// model a client already holds), the others uniformly at random; initial velocities are uniform
/// in ±max_velocity.
pub fn minimise(
    dim: usize,
    hyper: &PsoHyper,
    seeds: &[&[f64]],
    rng: &mut FlintRng,
    mut fitness: impl FnMut(&[f64]) -> f64,
) -> PsoOutcome {
    assert!(dim > 0, "pso needs at least one dimension");
    let n = hyper.swarm;
    let vmax = hyper.max_velocity;
    let mut position = vec![0.0; n * dim];
    let mut velocity = vec![0.0; n * dim];
    for (p, w) in position.chunks_mut(dim).enumerate().take(n) {
        match seeds.get(p) {
            Some(seed) => {
                for (x, s) in w.iter_mut().zip(seed.iter()) {
                    *x = s.clamp(-1.0, 1.0);
                }
            }
            None => w.iter_mut().for_each(|x| *x = rng.random_range(-1.0..=1.0)),
        }
    }
    for v in &mut velocity {
        *v = rng.random_range(-vmax..=vmax);
    }
    let mut own_best = position.clone();
    let mut own_fit = vec![f64::INFINITY; n];
    let mut best = vec![0.0; dim];
    let mut best_fit = f64::INFINITY;
    let mut evaluations = 0;
    for (w, own) in position.chunks(dim).zip(own_fit.iter_mut()) {
        let f = fitness(w);
        evaluations += 1;
        *own = f;
        if f < best_fit {
            best_fit = f;
            best.copy_from_slice(w);
        }
    }
    for _ in 0..hyper.iterations {
        let particles = position
            .chunks_mut(dim)
            .zip(velocity.chunks_mut(dim))
            .zip(own_best.chunks_mut(dim))
            .zip(own_fit.iter_mut());
        for (((w, v), pb), own) in particles {
            for i in 0..dim {
                let r1: f64 = rng.random::<f64>() * hyper.phi1;
                let r2: f64 = rng.random::<f64>() * hyper.phi2;
                let vi = v[i] + r1 * (pb[i] - w[i]) + r2 * (best[i] - w[i]);
                v[i] = vi.clamp(-vmax, vmax);
                w[i] = (w[i] + v[i]).clamp(-1.0, 1.0);
            }
            let f = fitness(w);
            evaluations += 1;
            if f < *own {
                *own = f;
                pb.copy_from_slice(w);
            }
            if f < best_fit {
                best_fit = f;
                best.copy_from_slice(w);
            }
        }
    }
    PsoOutcome {
        best,
        fitness: best_fit,
        evaluations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    fn shifted_sphere(w: &[f64]) -> f64 {
        // Optimum at (0.3, −0.6, 0.9, −0.2, 0.5), value 0.
        let target = [0.3, -0.6, 0.9, -0.2, 0.5];
        w.iter().zip(target).map(|(x, t)| (x - t) * (x - t)).sum()
    }

    #[test]
    fn finds_the_optimum_of_a_shifted_sphere() {
        let h = PsoHyper {
            swarm: 20,
            iterations: 200,
            ..PsoHyper::default()
        };
        let out = minimise(5, &h, &[], &mut derive_rng(1, "pso", 0), shifted_sphere);
        assert!(out.fitness < 1e-3, "fitness {}", out.fitness);
        assert_eq!(out.evaluations, h.evaluations());
        for (x, t) in out.best.iter().zip([0.3, -0.6, 0.9, -0.2, 0.5]) {
            assert!((x - t).abs() < 0.05, "{:?}", out.best);
        }
    }

    #[test]
    fn same_generator_same_swarm() {
        let h = PsoHyper::default();
        let run = |seed| minimise(5, &h, &[], &mut derive_rng(seed, "pso", 0), shifted_sphere);
        assert_eq!(run(4), run(4));
        assert_ne!(run(4).best, run(5).best);
    }

    #[test]
    fn a_seed_particle_at_the_optimum_is_kept() {
        // A client's previous model seeds one particle; the swarm can never do worse than it.
        let opt = [0.3, -0.6, 0.9, -0.2, 0.5];
        let h = PsoHyper {
            iterations: 3,
            ..PsoHyper::default()
        };
        let out = minimise(5, &h, &[&opt], &mut derive_rng(2, "pso", 0), shifted_sphere);
        assert_eq!(out.fitness, 0.0);
        assert_eq!(out.best, opt);
    }

    #[test]
    fn positions_stay_in_the_weight_range() {
        let h = PsoHyper {
            max_velocity: 1.0,
            phi1: 4.0,
            phi2: 4.0,
            ..PsoHyper::default()
        };
        let mut seen_outside = false;
        minimise(3, &h, &[], &mut derive_rng(3, "pso", 0), |w| {
            seen_outside |= w.iter().any(|x| !(-1.0..=1.0).contains(x));
            -w.iter().sum::<f64>()
        });
        assert!(!seen_outside);
    }

    #[test]
    fn bad_hyper_parameters_say_what_was_expected() {
        let s = PsoHyper {
            swarm: 0,
            ..Default::default()
        };
        assert_eq!(
            s.check().unwrap_err().to_string(),
            "pso.swarm must be at least 1, got 0"
        );
        let s = PsoHyper {
            max_velocity: 0.0,
            ..Default::default()
        };
        assert!(
            s.check()
                .unwrap_err()
                .to_string()
                .contains("max_velocity must be positive")
        );
    }
}
