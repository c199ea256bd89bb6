//! Noticing the end of the client's input at once.
//!
//! When stdin closes, rmcp stops reading and then waits (up to 5 s) for the calls in
//! flight to answer before the session ends. A client that closes stdin is gone: its
//! commands must be killed now, not after that wait, so the reader itself says when it
//! reaches the end.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// Reads from `inner`; cancels `on_eof` when a read returns end of file (or fails).
pub struct EofSignal<R> {
    pub inner: R,
    pub on_eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                self.on_eof.cancel()
            }
            Poll::Ready(Err(_)) => self.on_eof.cancel(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn end_of_input_cancels_only_at_the_end() {
        let on_eof = CancellationToken::new();
        let mut reader = EofSignal {
            inner: &b"line\n"[..],
            on_eof: on_eof.clone(),
        };
        let mut first = [0u8; 5];
        reader.read_exact(&mut first).await.unwrap();
        assert!(!on_eof.is_cancelled());
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
        assert!(on_eof.is_cancelled());
    }
}
