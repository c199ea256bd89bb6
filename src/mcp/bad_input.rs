//! Saying so when the client sends a line the protocol library drops without a word.
//!
//! rmcp ignores a line that is not JSON (answering one could start an error storm with a
//! peer that echoes what it gets, and the other MCP SDKs ignore it too) and drops a line
//! over its length limit. A client waiting for an answer to such a line waits forever; a
//! line on stderr, where clients keep a server's log, says what happened. Well-formed JSON
//! that is not a request gets rmcp's own error answer, so it is not reported here.

use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use tokio::io::{AsyncRead, ReadBuf};

/// Passes `inner`'s bytes through unchanged, and reports each line rmcp will drop.
pub struct ReportBadLines<R> {
    pub inner: R,
    line: Vec<u8>,
    /// The line so far is longer than rmcp takes (its bytes are no longer kept).
    overlong: bool,
    report: fn(&str),
}

impl<R> ReportBadLines<R> {
    pub fn new(inner: R) -> Self {
        Self::reporting_to(inner, |text| eprintln!("chitti mcp: {text}"))
    }

    fn reporting_to(inner: R, report: fn(&str)) -> Self {
        ReportBadLines {
            inner,
            line: Vec::new(),
            overlong: false,
            report,
        }
    }

    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let part = &bytes[..end.unwrap_or(bytes.len())];
            if !self.overlong && self.line.len() + part.len() > DEFAULT_MAX_LINE_LENGTH {
                self.overlong = true;
                self.line = Vec::new();
            }
            if !self.overlong {
                self.line.extend_from_slice(part);
            }
            let Some(end) = end else { break };
            if let Some(problem) = self.problem() {
                (self.report)(&problem);
            }
            self.line.clear();
            self.overlong = false;
            bytes = &bytes[end + 1..];
        }
    }

    /// What is wrong with the line just ended, if rmcp will drop it unanswered.
    fn problem(&self) -> Option<String> {
        if self.overlong {
            return Some(format!(
                "dropped an input line longer than {DEFAULT_MAX_LINE_LENGTH} bytes; it gets no \
                 answer"
            ));
        }
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        // Parsed as rmcp parses it: lines that merely skim as JSON (a lone UTF-16
        // surrogate escape, nesting past serde's depth limit) fail there as syntax too.
        let e = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(line).err()?;
        use serde_json::error::Category;
        matches!(e.classify(), Category::Syntax | Category::Eof).then(|| {
            format!(
                "ignored an input line that is not JSON ({e}); it gets no answer. Send each \
                 JSON-RPC message as one line of UTF-8 JSON"
            )
        })
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ReportBadLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            self.take(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::AsyncReadExt;

    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// Every line rmcp drops unanswered is reported once, whatever the reads' sizes; the
    /// bytes pass through unchanged; JSON rmcp answers itself is not reported.
    #[tokio::test]
    async fn lines_that_are_not_json_are_reported_and_passed_on() {
        let input: Vec<u8> = [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"[..],
            b"this is not json\n",
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\r\n",
            b"\n",
            b"{\"id\":null,\"jsonrpc\":\"1.0\"}\n",
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\r\n",
            // JSON to a skim, not to rmcp's parse (a review saw these dropped unsaid).
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"a\":\"\\udce9\"}}\n",
            &[
                &b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":"[..],
                &[b'['; 200],
                &[b']'; 200],
                b"}\n",
            ]
            .concat(),
            b"[1,2",
        ]
        .concat();
        let mut reader = ReportBadLines::reporting_to(chunked(&input, 7), |text| {
            SAID.lock().unwrap().push(text.to_string())
        });
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, input);
        let said = SAID.lock().unwrap().clone();
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said.iter().all(|s| s.contains("not JSON")), "{said:?}");
    }

    #[test]
    fn an_overlong_line_is_reported_without_being_kept() {
        fn note(text: &str) {
            assert!(text.contains("longer than"), "{text}");
            OVERLONG.lock().unwrap().push(());
        }
        static OVERLONG: Mutex<Vec<()>> = Mutex::new(Vec::new());
        let mut reader = ReportBadLines::reporting_to((), note);
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..=(DEFAULT_MAX_LINE_LENGTH >> 20) {
            reader.take(&chunk);
        }
        assert!(reader.line.is_empty() && reader.overlong);
        reader.take(b"\n{}\n");
        assert_eq!(OVERLONG.lock().unwrap().len(), 1);
    }

    /// `input` delivered `step` bytes per read.
    fn chunked(input: &[u8], step: usize) -> Chunked {
        Chunked {
            data: input.to_vec(),
            at: 0,
            step,
        }
    }

    struct Chunked {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Chunked {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let end = (self.at + self.step)
                .min(self.data.len())
                .min(self.at + buf.remaining());
            buf.put_slice(&self.data[self.at..end]);
            self.at = end;
            Poll::Ready(Ok(()))
        }
    }
}
