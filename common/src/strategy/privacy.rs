//! `[dp]`: differential privacy for the strategies that average, with its accountant.
//!
//! Neighbouring runs differ in one client's update, replaced by any other; the aggregation
//! weights are public (they follow from the data summaries every client declares in the clear).
//!
//! - **Central** (McMahan et al. 2018, "Learning differentially private recurrent language
//!   models", Algorithm 1 with a fixed clip): the server clips each client's change from the
//!   round's global model to `clip` in L2 norm, takes the strategy's weighted mean, and adds
//!   Gaussian noise of standard deviation `noise_multiplier × clip × max weight` to it.
//!   Replacing one clipped change moves the mean by at most `2 × weight × clip`, so each round
//!   is the Gaussian mechanism at sensitivity / scale = 2 / `noise_multiplier`. (Adding or
//!   removing a client instead renormalises the weights: McMahan et al.'s fixed-denominator
//!   estimator would be needed for that relation; not built.)
//! - **Local**: each client clips its own change and adds noise of standard deviation
//!   `noise_multiplier × clip` before it uploads; any two clipped changes differ by at most
//!   `2 × clip`, so each upload is the same mechanism, at 2 / `noise_multiplier`, whatever the
//!   server does. At one multiplier both spend the same ε; central noise is added once to the
//!   mean, scaled by the largest weight, while local noise comes with every update and the
//!   mean only averages it down.
//!
//! The privacy spent is the mechanism's zero-concentrated DP, composed over the rounds a client
//! took part in and converted to (ε, δ) by OpenDP's own privacy maps (`make_gaussian`,
//! `make_composition`, `make_zCDP_to_approxDP`): no subsampling amplification is claimed (a
//! round's clients are not a secret Poisson sample), so the figure is an upper bound.
//!
//! By default the noise is drawn from generators derived from the run's seed, so a run is
//! reproducible and a resumed server adds exactly the noise it added before; but whoever holds
//! the seed (every client) can draw the same noise. Given a [`NoiseKey`] (a secret only that
//! process holds), the noise comes from a ChaCha stream keyed by it and by (seed, round): a
//! process started again with the same key still adds the same noise, and the seed alone no
//! longer tells it (docs/guide/strategies.md §Differential privacy).

use std::collections::BTreeMap;

use opendp::combinators::{make_composition, make_zCDP_to_approxDP};
use opendp::core::Measurement;
use opendp::domains::{AtomDomain, VectorDomain};
use opendp::measurements::make_gaussian;
use opendp::measures::ZeroConcentratedDivergence;
use opendp::metrics::L2Distance;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::params::{ParamError, ParamResult, require};
use crate::rng::derive_seed;
use crate::{ClientId, FlintError, Result, Round};

/// Where the noise is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// No differential privacy: the papers' runs.
    Off,
    /// The server clips each change and noises the mean (it sees the clipped updates).
    Central,
    /// Each client clips and noises its own change before it uploads.
    Local,
}

/// `[dp]`: the mechanism, the clip and the noise. Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DpHyper {
    /// `off`, `central` (the server clips and noises the mean) or `local` (each client clips and
    /// noises its own change).
    pub mechanism: Mechanism,
    /// The largest L2 norm of one client's change from the round's global model, in the
    /// model's own units (required when the mechanism is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip: Option<f64>,
    /// The noise's standard deviation over the sensitivity's scale: `central` adds
    /// `noise_multiplier × clip × max weight` to the mean, `local` `noise_multiplier × clip` to
    /// each change (default 1).
    pub noise_multiplier: f64,
    /// The δ at which ε is reported (default 1e-5).
    pub delta: f64,
}

impl Default for DpHyper {
    fn default() -> Self {
        DpHyper {
            mechanism: Mechanism::Off,
            clip: None,
            noise_multiplier: 1.0,
            delta: 1e-5,
        }
    }
}

impl DpHyper {
    /// The settings, refused where a value is out of range or the clip is missing.
    pub fn check(self) -> ParamResult<DpHyper> {
        if self.is_off() {
            if self.clip.is_some() {
                return Err(ParamError::Inconsistent(
                    "dp.clip is read only with dp.mechanism = \"central\" or \"local\"".into(),
                ));
            }
            return Ok(self);
        }
        let Some(clip) = self.clip else {
            return Err(ParamError::Inconsistent(
                "dp.mechanism needs dp.clip, the largest L2 norm of one client's change".into(),
            ));
        };
        require("dp.clip", "positive", clip, clip.is_finite() && clip > 0.0)?;
        let z = self.noise_multiplier;
        require(
            "dp.noise_multiplier",
            "positive",
            z,
            z.is_finite() && z > 0.0,
        )?;
        let d = self.delta;
        require("dp.delta", "above 0 and below 1", d, d > 0.0 && d < 1.0)?;
        Ok(self)
    }

    pub fn is_off(&self) -> bool {
        self.mechanism == Mechanism::Off
    }

    /// Refuses settings whose ε the accountant cannot give over `rounds` (a multiplier so
    /// small that its figures overflow): found when the run is checked, not at a round.
    pub fn check_accountable(&self, rounds: u32) -> Result<()> {
        if self.is_off() {
            return Ok(());
        }
        match Accountant::new(*self).spent(rounds) {
            Ok((_, epsilon)) if epsilon.is_finite() => Ok(()),
            Ok(_) | Err(_) => Err(FlintError::Config(format!(
                "dp.noise_multiplier = {} over {rounds} rounds: the accountant cannot bound ε \
                 (its figures overflow); raise the multiplier",
                self.noise_multiplier
            ))),
        }
    }

    /// What a grid's table adds to the setting: ", dp central ×3, clip 0.1"; empty when off.
    pub fn setting_note(&self) -> String {
        match self.is_off() {
            true => String::new(),
            false => format!(
                ", dp {} ×{}, clip {}",
                crate::params::name_of(&self.mechanism),
                self.noise_multiplier,
                self.clip_norm()
            ),
        }
    }

    fn clip_norm(&self) -> f64 {
        self.clip.unwrap_or(f64::INFINITY)
    }

    /// `noise_multiplier × clip`: the noise on one change (local), or on the mean per unit of
    /// the largest weight (central).
    fn noise_scale(&self) -> f64 {
        self.noise_multiplier * self.clip_norm()
    }
}

/// The round's privacy as `results.json` records it: what was added, and the most any one client
/// has spent so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrivacySpent {
    pub mechanism: Mechanism,
    pub clip: f64,
    pub noise_multiplier: f64,
    /// The noise's standard deviation: on the round's mean (`central`) or on each change
    /// (`local`).
    pub noise_std: f64,
    /// `central`: the round's changes the server clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clipped: Option<u32>,
    /// `central`: whether the server's noise came from a secret key (`--dp-noise-key-file`)
    /// rather than the run's seed alone, which every client holds. `local`: absent (each
    /// client's key is its own; the server cannot tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_noise: Option<bool>,
    /// The most rounds one client has taken part in so far: what it has spent.
    pub rounds: u32,
    /// Zero-concentrated DP over those rounds.
    pub rho: f64,
    pub epsilon: f64,
    pub delta: f64,
}

type Gaussian = Measurement<
    VectorDomain<AtomDomain<f64>>,
    L2Distance<f64>,
    ZeroConcentratedDivergence,
    Vec<f64>,
>;

/// OpenDP's Gaussian mechanism at the run's noise multiplier, asked what rounds of it cost.
pub struct Accountant {
    hyper: DpHyper,
}

fn accountant_error(e: opendp::error::Error) -> FlintError {
    FlintError::Model(format!("dp accountant: {e}"))
}

impl Accountant {
    pub fn new(hyper: DpHyper) -> Accountant {
        Accountant { hyper }
    }

    /// One round: OpenDP's Gaussian mechanism at scale `noise_multiplier` (sensitivities are in
    /// units of the clip, so the scale is the multiplier).
    fn round(&self) -> Result<Gaussian> {
        make_gaussian(
            VectorDomain::new(AtomDomain::<f64>::new_non_nan()),
            L2Distance::<f64>::default(),
            self.hyper.noise_multiplier,
            None,
        )
        .map_err(accountant_error)
    }

    /// ρ and ε (at `dp.delta`) after `rounds` of the mechanism.
    pub fn spent(&self, rounds: u32) -> Result<(f64, f64)> {
        if rounds == 0 {
            return Ok((0.0, 0.0));
        }
        let fail = accountant_error;
        let composed = make_composition(vec![self.round()?; rounds as usize]).map_err(fail)?;
        // One change replaced by any other within the clip: twice the clip, in units of the
        // clip (the scale is the multiplier).
        let d_in = 2.0;
        let rho = composed.map(&d_in).map_err(fail)?;
        let epsilon = make_zCDP_to_approxDP(composed)
            .map_err(fail)?
            .map(&d_in)
            .map_err(fail)?
            .epsilon(self.hyper.delta)
            .map_err(fail)?;
        Ok((rho, epsilon))
    }
}

/// `change` brought within `clip` in L2 norm; whether it had to be.
pub fn clip_change(change: &mut [f64], clip: f64) -> bool {
    let norm = change.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm <= clip {
        return false;
    }
    let scale = clip / norm;
    change.iter_mut().for_each(|x| *x *= scale);
    true
}

/// A secret only this process holds, from `--dp-noise-key-file`: the noise it adds is then drawn
/// from a ChaCha stream keyed by it (rand's `StdRng`), which the run's seed alone cannot draw.
#[derive(Clone)]
pub struct NoiseKey([u8; 32]);

impl std::fmt::Debug for NoiseKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NoiseKey(..)")
    }
}

/// Fewer secret bytes than this are refused: a key is only as secret as it is long.
pub const NOISE_KEY_MIN_BYTES: usize = 16;

impl NoiseKey {
    /// The key a file's bytes make; refused under [`NOISE_KEY_MIN_BYTES`].
    pub fn from_secret(bytes: &[u8]) -> Result<NoiseKey> {
        if bytes.len() < NOISE_KEY_MIN_BYTES {
            return Err(FlintError::Config(format!(
                "a dp noise key needs at least {NOISE_KEY_MIN_BYTES} bytes of secret, got {} \
                 (e.g. head -c 32 /dev/urandom > noise.key)",
                bytes.len()
            )));
        }
        let mut h = Sha256::new();
        h.update(b"flint dp noise key\0");
        h.update(bytes);
        Ok(NoiseKey(h.finalize().into()))
    }

    /// The key a file of secret bytes makes.
    pub fn from_file(path: &std::path::Path) -> Result<NoiseKey> {
        let secret = std::fs::read(path).map_err(|e| FlintError::io(path, e))?;
        NoiseKey::from_secret(&secret)
    }

    /// The stream for one purpose of (seed, who, round).
    pub fn rng(&self, seed: u64, purpose: &str, who: u64, round: Round) -> StdRng {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(seed.to_le_bytes());
        h.update(purpose.as_bytes());
        h.update(who.to_le_bytes());
        h.update(round.to_le_bytes());
        StdRng::from_seed(h.finalize().into())
    }
}

/// A client's local noise under a key: its stream for each round.
#[derive(Debug, Clone)]
pub struct ClientNoise {
    pub key: NoiseKey,
    pub seed: u64,
    pub client: ClientId,
}

impl ClientNoise {
    pub fn rng(&self, round: Round) -> StdRng {
        self.key
            .rng(self.seed, "dp-local", u64::from(self.client), round)
    }
}

fn add_noise<R: rand::Rng + ?Sized>(values: &mut [f64], std: f64, rng: &mut R) {
    for v in values {
        let z: f64 = StandardNormal.sample(rng);
        *v += std * z;
    }
}

/// A client's local mechanism: `trained` becomes `global` plus its change clipped and noised,
/// the noise drawn from the client's own stream.
pub fn privatize_locally<R: rand::Rng + ?Sized>(
    hyper: &DpHyper,
    global: &[f64],
    trained: &mut [f64],
    rng: &mut R,
) -> Result<()> {
    // A short base would leave part of the model unnoised: refused, never sent.
    if global.len() != trained.len() {
        return Err(FlintError::Model(format!(
            "dp: a model of {} values and a download of {}: no change to noise",
            trained.len(),
            global.len()
        )));
    }
    let mut change: Vec<f64> = trained.iter().zip(global).map(|(t, g)| t - g).collect();
    clip_change(&mut change, hyper.clip_norm());
    add_noise(&mut change, hyper.noise_scale(), rng);
    for ((t, g), c) in trained.iter_mut().zip(global).zip(change) {
        *t = g + c;
    }
    Ok(())
}

/// A server half's `[dp]` (none where it is off) given a key for its noise, where it adds any:
/// what [`ServerStrategy::set_noise_key`](crate::strategy::ServerStrategy::set_noise_key) says.
pub fn key_noise(privacy: &mut Option<PrivateMean>, key: NoiseKey) -> bool {
    match privacy {
        Some(p) if p.adds_noise() => {
            p.set_key(key);
            true
        }
        _ => false,
    }
}

/// A server half's kept state where its only state is its `[dp]`'s.
pub fn snapshot_of(privacy: &Option<PrivateMean>) -> crate::strategy::StrategyState {
    match privacy {
        Some(p) => crate::strategy::StrategyState::of(p.state()),
        None => crate::strategy::StrategyState::stateless(),
    }
}

/// [`snapshot_of`]'s state given back to `who`'s server half.
pub fn restore_into(
    privacy: &mut Option<PrivateMean>,
    state: crate::strategy::StrategyState,
    who: &str,
) -> Result<()> {
    match privacy {
        Some(p) => p.restore(state.expect::<PrivacyState>(&format!("{who} under [dp]"))?),
        None => state.expect_stateless(who)?,
    }
    Ok(())
}

/// One group of [`PrivateMean::central_groups`]: its id, its clients, their vectors and weights (at
/// most 1 in all), and the base their changes are measured from.
pub struct CentralGroup<'a> {
    /// Which group (TPFL: the class): it picks the group's noise stream.
    pub id: u32,
    pub clients: Vec<ClientId>,
    pub vectors: Vec<&'a [f64]>,
    pub weights: Vec<f64>,
    pub base: Vec<f64>,
}

/// What the server keeps between rounds under `[dp]`: the global model the next round's changes
/// are measured from (`central`), and the rounds each client has taken part in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrivacyState {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub global: Vec<f64>,
    pub rounds: BTreeMap<ClientId, u32>,
}

impl crate::strategy::report::Tagged for PrivacyState {
    const TAG: &'static str = "dp";
}

/// The server's half: clips and noises (`central`) or only counts (`local`), and says what the
/// round spent.
pub struct PrivateMean {
    hyper: DpHyper,
    seed: u64,
    accountant: Accountant,
    state: PrivacyState,
    key: Option<NoiseKey>,
}

impl PrivateMean {
    pub fn new(hyper: DpHyper, seed: u64) -> PrivateMean {
        PrivateMean {
            accountant: Accountant::new(hyper),
            hyper,
            seed,
            state: PrivacyState::default(),
            key: None,
        }
    }

    /// The central noise from `key` rather than the seed alone.
    pub fn set_key(&mut self, key: NoiseKey) {
        self.key = Some(key);
    }

    /// Whether this server adds the noise (a key for it means something).
    pub fn adds_noise(&self) -> bool {
        self.hyper.mechanism == Mechanism::Central
    }

    pub fn state(&self) -> &PrivacyState {
        &self.state
    }

    pub fn restore(&mut self, state: PrivacyState) {
        self.state = state;
    }

    /// `central`: the round's vectors (one per client in `clients`' order, all one length)
    /// combined by `weights` (summing to 1): each change from the global model clipped, the
    /// weighted mean, the noise; `initial` is the model round 1 started from. Nothing is kept
    /// unless all of it succeeds.
    pub fn central(
        &mut self,
        round: Round,
        clients: &[ClientId],
        vectors: &[&[f64]],
        weights: &[f64],
        initial: impl FnOnce() -> Vec<f64>,
    ) -> Result<(Vec<f64>, PrivacySpent)> {
        let len = vectors.first().map_or(0, |v| v.len());
        let global = match self.state.global.is_empty() {
            true => initial(),
            false => self.state.global.clone(),
        };
        if global.len() != len {
            return Err(FlintError::InvalidUpdate(format!(
                "dp: updates of {len} values against a global model of {}",
                global.len()
            )));
        }
        let mut rng = self.noise_rng(round, 0);
        let (mean, clipped, std) = self.noised(&global, vectors, weights, &mut rng);
        let spent = self.spend(clients, std, Some(clipped))?;
        self.state.global.clone_from(&mean);
        Ok((mean, spent))
    }

    /// The model the next round's changes are measured from, where the strategy post-processes
    /// the noised mean before it broadcasts it (Blind FL clamps the map to its weights' range).
    pub fn rebase(&mut self, global: &[f64]) {
        self.state.global = global.to_vec();
    }

    /// `central` over groups averaged apart (TPFL's clusters): each group's changes from its own
    /// base clipped, its weighted mean noised at its largest weight from its own stream (group
    /// `id`'s is the id + 1-th of the round). Every client of every group spends the round once;
    /// the record holds the largest noise.
    pub fn central_groups(
        &mut self,
        round: Round,
        groups: &[CentralGroup<'_>],
    ) -> Result<(Vec<Vec<f64>>, PrivacySpent)> {
        let mut means = Vec::with_capacity(groups.len());
        let (mut clipped, mut largest) = (0, 0.0f64);
        for group in groups {
            if group.vectors.iter().any(|v| v.len() != group.base.len()) {
                return Err(FlintError::InvalidUpdate(format!(
                    "dp: a group's vectors against a base of {} values",
                    group.base.len()
                )));
            }
            let mut rng = self.noise_rng(round, u64::from(group.id) + 1);
            let (mean, c, std) = self.noised(&group.base, &group.vectors, &group.weights, &mut rng);
            means.push(mean);
            clipped += c;
            largest = largest.max(std);
        }
        let clients: Vec<ClientId> = groups
            .iter()
            .flat_map(|g| g.clients.iter().copied())
            .collect();
        let spent = self.spend(&clients, largest, Some(clipped))?;
        Ok((means, spent))
    }

    /// `base` plus the weighted mean of each vector's change from it, clipped, and the noise
    /// at the largest weight: the mean, how many changes were clipped, the noise's std.
    fn noised(
        &self,
        base: &[f64],
        vectors: &[&[f64]],
        weights: &[f64],
        rng: &mut StdRng,
    ) -> (Vec<f64>, u32, f64) {
        let mut clipped = 0;
        let changes: Vec<Vec<f64>> = vectors
            .iter()
            .map(|v| {
                let mut change: Vec<f64> = v.iter().zip(base).map(|(x, g)| x - g).collect();
                clipped += u32::from(clip_change(&mut change, self.hyper.clip_norm()));
                change
            })
            .collect();
        let views: Vec<&[f64]> = changes.iter().map(Vec::as_slice).collect();
        let mut mean = weighted_mean(&views, weights);
        let max_weight = weights.iter().copied().fold(0.0, f64::max);
        let std = self.hyper.noise_scale() * max_weight;
        add_noise(&mut mean, std, rng);
        mean.iter_mut().zip(base).for_each(|(m, g)| *m += g);
        (mean, clipped, std)
    }

    /// `local`: the clients noised their own changes; the round is only counted.
    pub fn count(&mut self, clients: &[ClientId]) -> Result<PrivacySpent> {
        self.spend(clients, self.hyper.noise_scale(), None)
    }

    /// The round's record, once the accountant has its figure; then the clients' rounds are
    /// counted.
    fn spend(
        &mut self,
        clients: &[ClientId],
        noise_std: f64,
        clipped: Option<u32>,
    ) -> Result<PrivacySpent> {
        let mut counted = self.state.rounds.clone();
        for id in clients {
            *counted.entry(*id).or_default() += 1;
        }
        let rounds = counted.values().copied().max().unwrap_or(0);
        let (rho, epsilon) = self.accountant.spent(rounds)?;
        self.state.rounds = counted;
        Ok(PrivacySpent {
            mechanism: self.hyper.mechanism,
            clip: self.hyper.clip_norm(),
            noise_multiplier: self.hyper.noise_multiplier,
            noise_std,
            clipped,
            secret_noise: self.adds_noise().then_some(self.key.is_some()),
            rounds,
            rho,
            epsilon,
            delta: self.hyper.delta,
        })
    }

    /// The central noise's `who`-th stream for `round` (0: the one mean's): the key's, or the
    /// seed's alone.
    fn noise_rng(&self, round: Round, who: u64) -> StdRng {
        match (&self.key, who) {
            (Some(key), _) => key.rng(self.seed, "dp-central", who, round),
            (None, 0) => StdRng::seed_from_u64(derive_seed(self.seed, "dp-central", round)),
            (None, _) => {
                let purpose = format!("dp-central-{who}");
                StdRng::seed_from_u64(derive_seed(self.seed, &purpose, round))
            }
        }
    }
}

fn weighted_mean(vectors: &[&[f64]], weights: &[f64]) -> Vec<f64> {
    let mut mean = vec![0.0; vectors.first().map_or(0, |v| v.len())];
    for (v, w) in vectors.iter().zip(weights) {
        mean.iter_mut().zip(v.iter()).for_each(|(m, x)| *m += w * x);
    }
    mean
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    fn central(z: f64, clip: f64) -> DpHyper {
        DpHyper {
            mechanism: Mechanism::Central,
            clip: Some(clip),
            noise_multiplier: z,
            delta: 1e-5,
        }
        .check()
        .unwrap()
    }

    #[test]
    fn the_accountant_composes_rounds_and_converts_as_opendp_and_the_zcdp_bounds_say() {
        // One round of the Gaussian mechanism at sensitivity / scale Δ / z is ρ = Δ² / (2 z²)
        // (Bun & Steinke 2016, Proposition 1.6), here Δ = 2 (one change replaced by any other);
        // ρ adds over rounds (Lemma 1.7).
        let accountant = Accountant::new(central(2.0, 1.0));
        let (rho, epsilon) = accountant.spent(10).unwrap();
        assert!((rho - 10.0 * 4.0 / 8.0).abs() < 1e-12, "{rho}");
        // ρ-zCDP gives (ρ + 2 √(ρ ln 1/δ), δ)-DP (Proposition 1.3); OpenDP's conversion is at
        // least as tight, and no bound is below ρ.
        let loose = rho + 2.0 * (rho * (1e5f64).ln()).sqrt();
        assert!(
            epsilon > rho && epsilon <= loose,
            "{epsilon} against {loose}"
        );
        // The same figure straight from OpenDP's maps.
        let direct =
            make_zCDP_to_approxDP(make_composition(vec![accountant.round().unwrap(); 10]).unwrap())
                .unwrap()
                .map(&2.0)
                .unwrap()
                .epsilon(1e-5)
                .unwrap();
        assert_eq!(epsilon, direct);
        // A local upload is the same mechanism at the same multiplier.
        let local = DpHyper {
            mechanism: Mechanism::Local,
            ..central(2.0, 1.0)
        };
        assert_eq!(Accountant::new(local).spent(10).unwrap(), (rho, epsilon));
        assert_eq!(accountant.spent(0).unwrap(), (0.0, 0.0));
    }

    #[test]
    fn a_multiplier_whose_epsilon_overflows_is_refused_when_the_run_is_checked() {
        let tiny = central(0.01, 1.0);
        let e = tiny.check_accountable(10).unwrap_err().to_string();
        assert!(e.contains("cannot bound ε"), "{e}");
        assert!(central(1.0, 1.0).check_accountable(10).is_ok());
        assert!(DpHyper::default().check_accountable(10).is_ok());
    }

    #[test]
    fn a_change_is_clipped_to_the_norm_and_a_small_one_is_left_alone() {
        let mut big = vec![3.0, 4.0];
        assert!(clip_change(&mut big, 1.0));
        assert!((big[0] - 0.6).abs() < 1e-12 && (big[1] - 0.8).abs() < 1e-12);
        let mut small = vec![0.3, 0.4];
        assert!(!clip_change(&mut small, 1.0));
        assert_eq!(small, [0.3, 0.4]);
    }

    #[test]
    fn the_central_mean_clips_from_the_global_model_and_adds_the_noise_the_settings_imply() {
        let mut mean = PrivateMean::new(central(0.5, 1.0), 7);
        let dim = 20_000;
        let far = vec![10.0; dim];
        let near = vec![0.001; dim];
        let (out, spent) = mean
            .central(3, &[1, 2], &[&far, &near], &[0.75, 0.25], || vec![0.0; dim])
            .unwrap();
        // The far change is over the clip (10 × √20000), the near one not (0.001 × √20000).
        assert_eq!(spent.clipped, Some(1));
        let expected_std = 0.5 * 1.0 * 0.75;
        assert_eq!(spent.noise_std, expected_std);
        // Without the noise: 0.75 × (the far change clipped to norm 1) + 0.25 × 0.001.
        let clean = 0.75 / (dim as f64).sqrt() + 0.25 * 0.001;
        let noise: Vec<f64> = out.iter().map(|x| x - clean).collect();
        let sample_std = (noise.iter().map(|n| n * n).sum::<f64>() / dim as f64).sqrt();
        assert!(
            (sample_std / expected_std - 1.0).abs() < 0.03,
            "{sample_std}"
        );
        // The noise is the (seed, round) stream's: the same again, another round's not.
        let mut again = PrivateMean::new(central(0.5, 1.0), 7);
        let repeat = again
            .central(3, &[1, 2], &[&far, &near], &[0.75, 0.25], || vec![0.0; dim])
            .unwrap()
            .0;
        assert_eq!(repeat, out);
        assert_eq!(mean.state().global, out);
        assert_eq!(spent.rounds, 1);
        let (rho, epsilon) = mean.accountant.spent(1).unwrap();
        assert_eq!((spent.rho, spent.epsilon), (rho, epsilon));
    }

    #[test]
    fn the_rounds_spent_are_those_of_the_client_that_took_part_most() {
        let mut mean = PrivateMean::new(central(1.0, 1.0), 1);
        let v = [0.0, 0.0];
        let mut last = None;
        for (round, clients) in [(1, vec![1, 2]), (2, vec![1]), (3, vec![2, 3]), (4, vec![1])] {
            let vectors: Vec<&[f64]> = clients.iter().map(|_| &v[..]).collect();
            let weights = vec![1.0 / clients.len() as f64; clients.len()];
            let (_, spent) = mean
                .central(round, &clients, &vectors, &weights, || vec![0.0; 2])
                .unwrap();
            last = Some(spent);
        }
        assert_eq!(last.unwrap().rounds, 3);
        assert_eq!(mean.state().rounds[&3], 1);
    }

    #[test]
    fn a_local_upload_is_the_global_model_plus_its_change_clipped_and_noised() {
        let hyper = DpHyper {
            mechanism: Mechanism::Local,
            ..central(0.1, 1.0)
        };
        let global = vec![1.0, 1.0];
        let mut trained = vec![4.0, 5.0];
        let mut rng = derive_rng(3, "train", 1);
        privatize_locally(&hyper, &global, &mut trained, &mut rng).unwrap();
        let e = privatize_locally(&hyper, &[], &mut [1.0], &mut rng).unwrap_err();
        assert!(e.to_string().contains("no change to noise"), "{e}");
        let mut rng = derive_rng(3, "train", 1);
        let noise: [f64; 2] = [
            StandardNormal.sample(&mut rng),
            StandardNormal.sample(&mut rng),
        ];
        assert!((trained[0] - (1.0 + 0.6 + 0.1 * noise[0])).abs() < 1e-12);
        assert!((trained[1] - (1.0 + 0.8 + 0.1 * noise[1])).abs() < 1e-12);
    }

    fn under_key(key: NoiseKey) -> PrivateMean {
        let mut mean = PrivateMean::new(central(1.0, 1.0), 7);
        mean.set_key(key);
        mean
    }

    #[test]
    fn a_key_draws_noise_the_seed_alone_does_not_and_draws_it_again() {
        let key = NoiseKey::from_secret(b"sixteen byte key").unwrap();
        let (near, far) = (vec![0.0; 64], vec![0.0; 64]);
        let combine = |m: &mut PrivateMean| {
            m.central(2, &[1, 2], &[&near, &far], &[0.5, 0.5], || vec![0.0; 64])
                .unwrap()
        };
        let (keyed, spent) = combine(&mut under_key(key.clone()));
        assert_eq!(spent.secret_noise, Some(true));
        let (again, _) = combine(&mut under_key(key));
        assert_eq!(
            keyed, again,
            "a restarted server with its key adds the same noise"
        );
        let (seeded, spent) = combine(&mut PrivateMean::new(central(1.0, 1.0), 7));
        assert_eq!(spent.secret_noise, Some(false));
        assert_ne!(keyed, seeded);
        let other = NoiseKey::from_secret(b"another key, 16+").unwrap();
        let (other, _) = combine(&mut under_key(other));
        assert_ne!(keyed, other);
        let e = NoiseKey::from_secret(b"short").unwrap_err().to_string();
        assert!(e.contains("at least 16 bytes"), "{e}");
        assert_eq!(
            format!("{:?}", NoiseKey::from_secret(&[1; 32]).unwrap()),
            "NoiseKey(..)"
        );
    }

    #[test]
    fn settings_out_of_range_or_without_a_clip_are_refused() {
        let e = DpHyper {
            mechanism: Mechanism::Central,
            ..DpHyper::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("dp.mechanism needs dp.clip"), "{e}");
        let e = DpHyper {
            noise_multiplier: 0.0,
            ..central(1.0, 1.0)
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("dp.noise_multiplier"), "{e}");
        let e = DpHyper {
            clip: Some(1.0),
            ..DpHyper::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("dp.clip is read only"), "{e}");
        assert!(DpHyper::default().check().unwrap().is_off());
    }
}
