//! Splitting a dataset over clients. Every partitioner is a function of (dataset, seed), so each
//! client process computes the same split and keeps its own part: the clients an experiment
//! declares (`clients`), the section that chooses the split (`section`), the checked plan and
//! the split it makes (`plan`), the algorithms (`split`).

mod clients;
mod plan;
mod section;
mod split;
#[cfg(test)]
mod tests;

pub use clients::{ClientSection, ClientSpec, MAX_CLIENT_NAME, declare_clients};
pub use plan::{ClassSplit, PartitionPlan, partition};
pub use section::{PartitionDefaults, PartitionKind, PartitionSection};
pub use split::*;
