//! A connection's socket with a bound on how long an answer may wait to be written.
//!
//! hyper times the reading of request headers, not the writing of answers: a client that
//! pipelines requests and never reads its answers fills the socket's buffers, and the
//! connection then waits forever, holding one of the `max_connections` slots (eight such
//! sockets locked `/healthz` out with 429 for as long as they stayed). [`WriteBound`] fails a
//! write that makes no progress for the bound, so hyper closes that connection and frees its
//! slot; a client that reads, however slowly, keeps its connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `S` whose writes fail with `TimedOut` after `bound` without progress.
pub struct WriteBound<S> {
    inner: S,
    bound: Duration,
    /// Armed when a write is pending, cleared when one makes progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteBound<S> {
    pub fn new(inner: S, bound: Duration) -> Self {
        Self {
            inner,
            bound,
            stalled: None,
        }
    }

    /// A write's outcome: progress (or an error) disarms the timer, `Pending` arms it.
    fn settle<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }

    /// After the inner write's `Pending`: arms the timer if it is not, and fails once it fires.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let bound = self.bound;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(bound)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read none of its answer for {} s",
                    bound.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future;

impl<S: AsyncRead + Unpin> AsyncRead for WriteBound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteBound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.settle(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.settle(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.settle(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
