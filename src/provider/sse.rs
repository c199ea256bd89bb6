//! Server-sent events, as both APIs stream them: `data:` lines, events separated by a
//! blank line. Bytes arrive in arbitrary chunks, so the parser keeps the unfinished tail.

#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of the line being received (a UTF-8 character may straddle two chunks).
    line: Vec<u8>,
    /// `data:` lines of the event being received.
    data: Vec<String>,
}

impl Parser {
    /// Feeds a chunk; returns the data of every event it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in chunk {
            if byte == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&String::from_utf8_lossy(&line), &mut events);
            } else {
                self.line.push(byte);
            }
        }
        events
    }

    /// The end of the stream: an event not closed by a blank line still counts.
    pub fn finish(mut self) -> Vec<String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&String::from_utf8_lossy(&line), &mut events);
        }
        self.line_done("", &mut events);
        events
    }

    fn line_done(&mut self, line: &str, events: &mut Vec<String>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(self.data.join("\n"));
                self.data.clear();
            }
        } else if let Some(value) = line.strip_prefix("data:") {
            self.data
                .push(value.strip_prefix(' ').unwrap_or(value).to_string());
        }
        // Comments (":…"), `event:`, `id:` and `retry:` carry nothing these APIs need.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_are_joined() {
        let mut p = Parser::default();
        let mut got = p.feed(b"data: {\"a\":");
        assert!(got.is_empty());
        got.extend(p.feed(b"1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n"));
        got.extend(p.feed(b"\n"));
        got.extend(p.finish());
        assert_eq!(got, vec!["{\"a\":1}", "x\ny"]);
    }

    #[test]
    fn a_multibyte_character_split_between_chunks_survives() {
        let text = "data: héllo ✓\n\n".as_bytes();
        let mut p = Parser::default();
        let mut got = Vec::new();
        for byte in text {
            got.extend(p.feed(std::slice::from_ref(byte)));
        }
        assert_eq!(got, vec!["héllo ✓"]);
    }

    #[test]
    fn an_unterminated_last_event_is_kept() {
        let mut p = Parser::default();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(p.finish(), vec!["[DONE]"]);
    }
}
