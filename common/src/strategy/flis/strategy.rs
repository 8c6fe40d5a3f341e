use serde::Serialize;

use super::{FlisHyper, FlisServer};
use crate::data::DataShape;
use crate::data::pixels::PixelRows;
use crate::model::cnn::CnnHyper;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::fedavg_cnn::needs_images;
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FlisSpec {
    pub cnn: CnnHyper,
    pub flis: FlisHyper,
}

impl Strategy for FlisSpec {
    /// Each cluster's mean weights its members by the rows they declare.
    const FACTS: Facts = Facts {
        one_model: false,
        declared_weights: true,
        ..Facts::federated(ModelKind::Cnn)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, shape: &DataShape) -> ParamResult<Self> {
        needs_images(shape, "flis")?;
        Ok(FlisSpec {
            cnn: c.cnn,
            flis: c.flis,
        })
    }
}

impl StrategyParams for FlisSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    /// Without its images: every aggregation is refused (the shells build it with them).
    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        self.server_holding(classes, seed, robust, PixelRows::empty(0, classes))
    }

    fn server_images_per_class(&self) -> Option<usize> {
        Some(self.flis.server_per_class as usize)
    }

    fn server_holding(
        &self,
        classes: usize,
        seed: u64,
        robust: RobustHyper,
        held: PixelRows,
    ) -> Box<dyn ServerStrategy> {
        Box::new(FlisServer {
            arch: self.cnn.architecture,
            classes,
            seed,
            robust,
            hyper: self.flis,
            held,
            kept: Vec::new(),
        })
    }

    /// The client's network is its cluster's mean, downloaded.
    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.flis = Some(self.flis);
    }

    fn setting(&self, images: bool, compression: crate::wire::Compression) -> String {
        let model = self.model().setting(images, compression);
        let variant = match self.flis.variant {
            super::FlisVariant::Dc => "dc",
            super::FlisVariant::Hc => "hc",
        };
        format!("{model}, {variant}, threshold {}", self.flis.threshold())
    }
}
