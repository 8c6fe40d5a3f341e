//! A request body that says it has ended with its last frame. tonic's request
//! bodies learn they are over only when polled once more after their last message, so HTTP/2
//! sends that message in one DATA frame and then an empty DATA frame with END_STREAM: 9 bytes
//! per call, and under TLS a record of its own (31 bytes). Holding one frame back while the
//! next is already there lets hyper set END_STREAM on the last DATA frame instead. A frame is
//! never held while the body waits, so nothing is delayed.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    pub struct EndsWithLastFrame<B: Body> {
        #[pin]
        inner: B,
        held: Option<Frame<B::Data>>,
        inner_done: bool,
    }
}

impl<B: Body> EndsWithLastFrame<B> {
    pub fn new(inner: B) -> Self {
        EndsWithLastFrame {
            inner,
            held: None,
            inner_done: false,
        }
    }
}

impl<B: Body> Body for EndsWithLastFrame<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        loop {
            if *this.inner_done {
                return Poll::Ready(this.held.take().map(Ok));
            }
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(previous) = this.held.replace(frame) {
                        return Poll::Ready(Some(Ok(previous)));
                    }
                }
                // The call fails with it: nothing held is handed on after an error.
                Poll::Ready(Some(Err(e))) => {
                    *this.held = None;
                    *this.inner_done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => *this.inner_done = true,
                // The next frame is not there yet: hand on the one held rather than wait.
                Poll::Pending => {
                    return match this.held.take() {
                        Some(frame) => Poll::Ready(Some(Ok(frame))),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && (self.inner_done || self.inner.is_end_stream())
    }

    /// Unknown: an exact hint would add a content-length header to every call.
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Wraps every request body of a client channel in [`EndsWithLastFrame`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EndStreamLayer;

impl<S> tower_layer::Layer<S> for EndStreamLayer {
    type Service = EndStream<S>;

    fn layer(&self, inner: S) -> EndStream<S> {
        EndStream { inner }
    }
}

#[derive(Debug, Clone)]
pub struct EndStream<S> {
    inner: S,
}

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for EndStream<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> S::Future {
        self.inner
            .call(req.map(|b| tonic::body::Body::new(EndsWithLastFrame::new(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};

    fn frames(n: usize) -> EndsWithLastFrame<impl Body<Data = Bytes, Error = std::io::Error>> {
        let items = (0..n).map(|i| Ok(Frame::data(Bytes::from(vec![i as u8; i + 1]))));
        EndsWithLastFrame::new(StreamBody::new(tokio_stream::iter(
            items.collect::<Vec<_>>(),
        )))
    }

    #[tokio::test]
    async fn the_last_frame_says_the_body_has_ended_and_no_frame_is_lost() {
        for n in 0..4 {
            let mut body = frames(n);
            let mut seen = Vec::new();
            while let Some(frame) = body.frame().await {
                let data = frame.unwrap().into_data().unwrap();
                // What hyper asks right after each DATA frame to set END_STREAM on it.
                seen.push((data.to_vec(), body.is_end_stream()));
            }
            let want: Vec<(Vec<u8>, bool)> =
                (0..n).map(|i| (vec![i as u8; i + 1], i + 1 == n)).collect();
            assert_eq!(seen, want, "{n} frames");
            assert!(body.is_end_stream());
        }
    }
}
