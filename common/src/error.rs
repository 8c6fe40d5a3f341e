use std::path::PathBuf;

/// Errors of the core. Messages are lowercase and say what was wrong and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum FlintError {
    #[error("invalid experiment: {0}")]
    Config(String),
    // The cause is in the message, so it is not also a `source` (anyhow would print it twice).
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot find {file} in the data directory {dir}; set FLINT_DATA_DIR or --data-dir")]
    MissingData { file: PathBuf, dir: PathBuf },
    #[error("bad data in {path}: {reason}")]
    Data { path: PathBuf, reason: String },
    #[error("cannot partition the data: {0}")]
    Partition(String),
    #[error("invalid update: {0}")]
    InvalidUpdate(String),
    #[error("invalid model: {0}")]
    Model(String),
    /// A malformed request other than an update (a bad data summary or evaluation).
    #[error("{0}")]
    InvalidRequest(String),
    /// A request that does not fit the run's state: wrong round, wrong run, finished.
    #[error("{0}")]
    Precondition(String),
    /// A client id or name this run does not know (or that has not joined).
    #[error("{0}")]
    UnknownClient(String),
    /// A call that does not say who makes it (no client token, no client certificate).
    #[error("{0}")]
    Unauthenticated(String),
    /// A call by someone other than the client it names.
    #[error("{0}")]
    PermissionDenied(String),
    /// A call the server has no room for now (its budget for uploads in flight); try again.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A delta update whose base the server no longer holds: the client sends the weights
    /// themselves instead.
    #[error("{0}")]
    NoBase(String),
    /// A secure aggregation message of an attempt the server no longer runs (it restarted in
    /// the middle of the round): the client starts the round's protocol again with fresh keys.
    #[error("{0}")]
    Restarted(String),
}

pub type Result<T, E = FlintError> = std::result::Result<T, E>;

impl FlintError {
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        FlintError::Io {
            path: path.into(),
            error,
        }
    }

    pub fn data(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        FlintError::Data {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
