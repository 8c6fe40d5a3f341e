use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, require};

/// How the server combines the clients' networks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum OneShotRule {
    /// The n_k-weighted mean (FedAvg after one round).
    #[default]
    Fedavg,
    /// Fed-OneShot: every client's network, the mean of their logits deciding.
    Ensemble,
    /// RegMean: each dense layer from the clients' Gram matrices; the rest averaged.
    Regmean,
    /// FedFisher: each parameter weighted by the clients' diagonal Fisher information.
    Fedfisher,
    /// OT-Fusion: neurons aligned to the first client's network, then averaged.
    OtFusion,
    /// DENSE: a student distilled on the server from the ensemble, on generated images.
    Dense,
}

impl OneShotRule {
    pub fn name(self) -> &'static str {
        match self {
            OneShotRule::Fedavg => "fedavg",
            OneShotRule::Ensemble => "ensemble",
            OneShotRule::Regmean => "regmean",
            OneShotRule::Fedfisher => "fedfisher",
            OneShotRule::OtFusion => "ot-fusion",
            OneShotRule::Dense => "dense",
        }
    }
}

/// What a client uploads beside its network.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum OneShotUploads {
    /// What `rule` needs: RegMean's Gram matrices, FedFisher's Fisher diagonal, or nothing.
    #[default]
    Rule,
    /// Both statistics, so that every rule can be replayed on one training.
    EveryRule,
}

/// What the clients' uploads carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    pub gram: bool,
    pub fisher: bool,
}

/// `[oneshot]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OneShotHyper {
    pub rule: OneShotRule,
    pub uploads: OneShotUploads,
    /// RegMean's α: each Gram matrix's off-diagonal entries are scaled by it (Jin et al.
    /// 2023, §3.3; 1 keeps them whole). The authors' code picks 0.1 or 0.9 on a validation
    /// set, which a one-shot server does not hold: 0.9, replayable at 0.1.
    pub regmean_alpha: f64,
    /// DENSE's server epochs: each trains the generator, keeps a batch of images and distils the
    /// student on all kept (FedTMOS fixes 100 for its distillation baselines, Appendix A).
    pub distill_epochs: u32,
    /// DENSE's generator steps per server epoch (the authors' code: 30).
    pub generator_steps: u32,
    /// Images the generator makes per step, and the student's batch (their code: 256).
    pub synthesis_batch: u32,
    /// The temperature of the student's KL divergence to the ensemble (their code: 20).
    pub temperature: f64,
    /// The weight of DENSE's adversarial term (their code: 0.5).
    pub adversarial: f64,
}

impl Default for OneShotHyper {
    fn default() -> Self {
        OneShotHyper {
            rule: OneShotRule::Fedavg,
            uploads: OneShotUploads::Rule,
            regmean_alpha: 0.9,
            distill_epochs: 100,
            generator_steps: 30,
            synthesis_batch: 256,
            temperature: 20.0,
            adversarial: 0.5,
        }
    }
}

impl OneShotHyper {
    pub fn check(self) -> ParamResult<OneShotHyper> {
        let a = self.regmean_alpha;
        require(
            "oneshot.regmean_alpha",
            "above 0 and at most 1",
            a,
            a > 0.0 && a <= 1.0,
        )?;
        let count = |key, value: u32, most: u32, rule| {
            require(key, rule, value, (1..=most).contains(&value))
        };
        count(
            "oneshot.distill_epochs",
            self.distill_epochs,
            10_000,
            "from 1 to 10,000",
        )?;
        count(
            "oneshot.generator_steps",
            self.generator_steps,
            10_000,
            "from 1 to 10,000",
        )?;
        count(
            "oneshot.synthesis_batch",
            self.synthesis_batch,
            4_096,
            "from 1 to 4,096",
        )?;
        // DENSE keeps every image it generates: 3 kB each on MNIST.
        let kept = u64::from(self.distill_epochs) * u64::from(self.synthesis_batch);
        require(
            "oneshot.distill_epochs × oneshot.synthesis_batch",
            "at most 1,000,000 kept images",
            kept,
            kept <= 1_000_000,
        )?;
        let t = self.temperature;
        require(
            "oneshot.temperature",
            "above 0",
            t,
            t > 0.0 && t.is_finite(),
        )?;
        let adv = self.adversarial;
        require(
            "oneshot.adversarial",
            "at least 0",
            adv,
            adv >= 0.0 && adv.is_finite(),
        )?;
        Ok(self)
    }

    /// What the rule itself needs, whatever the clients were asked to send.
    pub fn rule_needs(&self) -> Needs {
        Needs {
            gram: self.rule == OneShotRule::Regmean,
            fisher: self.rule == OneShotRule::Fedfisher,
        }
    }

    pub fn needs(&self) -> Needs {
        let every = self.uploads == OneShotUploads::EveryRule;
        Needs {
            gram: every || self.rule == OneShotRule::Regmean,
            fisher: every || self.rule == OneShotRule::Fedfisher,
        }
    }
}
