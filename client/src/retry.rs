//! Calls made before a client's machine starts (Claim, Join), tried again by the machine's
//! rule ([`Backoff`]) while the server is unreachable.

use std::time::Duration;

use tonic::Status;

use crate::core::Backoff;

/// How long one Join attempt may take before it is tried again (the server answers a Join at
/// once; only a lost connection takes longer).
pub(crate) const JOIN_ATTEMPT: Duration = Duration::from_secs(10);

/// `call` until it is answered, while it fails with a code a repeat may cure and within
/// `total`; each attempt given at most `attempt` (these calls answer at once: in a burst of
/// connections a call can wait on a connection the server never saw, forever; bounded, it is
/// tried again on a new one).
pub(crate) async fn retry_bounded<T, F, Fut>(
    total: Duration,
    attempt: Duration,
    what: &str,
    mut call: F,
) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
{
    let mut backoff = Backoff::new(total);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        let outcome = tokio::time::timeout(attempt, call())
            .await
            .unwrap_or_else(|_| {
                let limit = attempt.as_secs_f64();
                Err(Status::unavailable(format!("no answer within {limit} s")))
            });
        let s = match outcome {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) => s,
        };
        let failing_for = failing_since
            .get_or_insert_with(tokio::time::Instant::now)
            .elapsed();
        let Some(wait) = backoff.next(s.code(), failing_for) else {
            return Err(s);
        };
        tracing::debug!(what, code = ?s.code(), error = %s.message(), ?wait, "server unreachable; retrying");
        tokio::time::sleep(wait).await;
    }
}
