//! The algorithm sections of an experiment file, listed once ([`with_sections`]): the
//! experiment file's keys, [`Sections`] and the resolved file all come from this list. Each is
//! checked once, whether the run's strategy reads it or not ([`Checked`]).

use super::fcm::FcmSpec;
use super::tpfl::TmSpec;
use crate::data::DataShape;
use crate::model::logreg::LogRegHyper;
use crate::model::tm::{ClauseBanks, TmHyper};
use crate::params::ParamResult;
use crate::strategy::ahp::AhpHyper;
use crate::strategy::fedtmos::FedTmosHyper;
use crate::strategy::robust::RobustHyper;

/// Hands the list of sections, `name: Type` in the order a resolved file writes them, to the
/// macro `$then`. A strategy with a section of its own adds one line here.
macro_rules! with_sections {
    ($then:ident) => {
        $then! {
            logreg: crate::model::logreg::LogRegSection,
            ahp: crate::strategy::ahp::AhpSection,
            fcm: crate::strategy::fcm::FcmSection,
            pso: crate::model::pso::PsoHyper,
            tm: crate::model::tm::TmSection,
            tpfl: crate::strategy::tpfl::TpflHyper,
            fedtmos: crate::strategy::fedtmos::FedTmosSection,
            /// The convolutional network of the neural baselines and its local training.
            cnn: crate::model::cnn::CnnHyper,
            fedprox: crate::strategy::fedprox::FedProxHyper,
            ifca: crate::strategy::ifca::IfcaHyper,
            flis: crate::strategy::flis::FlisHyper,
            oneshot: crate::strategy::oneshot::OneShotHyper,
            /// How the server averages, against clients that lie (coordinate-wise median or
            /// trimmed mean, clipping, a weight cap); absent: the papers' mean.
            robust: crate::strategy::robust::RobustHyper,
            /// Differential privacy of the averaging strategies (central or local Gaussian
            /// noise, clipping, the accountant's ε); absent: none.
            dp: crate::strategy::privacy::DpHyper,
        }
    };
}
pub(crate) use with_sections;

macro_rules! sections_struct {
    ($($(#[$doc:meta])* $name:ident: $ty:ty,)*) => {
        /// The algorithm sections of an experiment file, each as written (`None` where absent,
        /// read at its defaults).
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct Sections {
            $($(#[$doc])* pub $name: Option<$ty>,)*
        }
    };
}
with_sections!(sections_struct);

/// Every section, checked once, whether the strategy uses it or not: a typo in one this
/// strategy ignores is still a typo the user wants to hear about. On a table, the keys a section
/// leaves out take the table's defaults: the Tsetlin Machine's size ([`TmHyper::for_table`],
/// not the image machine's), logistic regression's steps ([`LogRegHyper::for_classes`]), the
/// FCM's iteration cap ([`super::fcm::settle_steps`]).
pub struct Checked {
    pub logreg: LogRegHyper,
    pub ahp: AhpHyper,
    pub fcm: FcmSpec,
    pub tm: TmSpec,
    pub fedtmos: FedTmosHyper,
    pub cnn: crate::model::cnn::CnnHyper,
    pub fedprox: crate::strategy::fedprox::FedProxHyper,
    pub ifca: crate::strategy::ifca::IfcaHyper,
    pub flis: crate::strategy::flis::FlisHyper,
    pub oneshot: crate::strategy::oneshot::OneShotHyper,
    pub robust: RobustHyper,
    pub dp: crate::strategy::privacy::DpHyper,
}

impl Checked {
    pub fn of(s: &Sections, banks: ClauseBanks, shape: &DataShape) -> ParamResult<Checked> {
        let (mut fcm, aggregation) = s.fcm.unwrap_or_default().check()?;
        let (tm, logreg) = (s.tm.unwrap_or_default(), s.logreg.unwrap_or_default());
        let (tm, logreg) = match shape.table {
            true => (
                tm.over(TmHyper::for_table(shape.classes, banks, tm.clauses)),
                logreg.over(LogRegHyper::for_classes(shape.classes)),
            ),
            false => (
                tm.over(TmHyper::default()),
                logreg.over(LogRegHyper::default()),
            ),
        };
        let iterations = s.fcm.and_then(|f| f.max_iterations);
        if shape.table {
            fcm.max_iterations = iterations.unwrap_or(super::fcm::settle_steps(shape.classes));
        }
        Ok(Checked {
            logreg: logreg.check()?,
            ahp: s.ahp.clone().unwrap_or_default().check()?,
            fcm: FcmSpec {
                fcm,
                pso: s.pso.unwrap_or_default().check()?,
                aggregation,
                dp: crate::strategy::privacy::DpHyper::default(),
            },
            tm: TmSpec {
                tm: tm.check()?,
                tpfl: s.tpfl.unwrap_or_default().check()?,
                dp: crate::strategy::privacy::DpHyper::default(),
            },
            fedtmos: s.fedtmos.unwrap_or_default().check()?,
            cnn: s.cnn.unwrap_or_default().check()?,
            fedprox: s.fedprox.unwrap_or_default().check()?,
            ifca: s.ifca.unwrap_or_default().check()?,
            flis: s.flis.unwrap_or_default().check()?,
            oneshot: s.oneshot.unwrap_or_default().check()?,
            robust: s.robust.unwrap_or_default().check()?,
            dp: s.dp.unwrap_or_default().check()?,
        })
    }
}
