//! The models Flint federates. Each has a hyper-parameter type validated once into a checked form.

pub mod cnn;
pub mod fcm;
pub mod kept;
pub mod kmeans;
pub mod logreg;
pub mod pso;
pub mod tm;
