//! Bounded capture of a stream: the first and last bytes are kept, the middle is counted
//! and dropped, so memory stays flat however much a command prints.

use std::collections::VecDeque;

pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

/// What was kept of a stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// Head and tail, with a marker between them when bytes were cut.
    pub bytes: Vec<u8>,
    /// How many bytes were cut from the middle.
    pub truncated_bytes: u64,
}

impl HeadTail {
    /// Keeps at most `max` bytes: half from the start, half from the end.
    pub fn new(max: usize) -> HeadTail {
        let head_cap = max / 2;
        let tail_cap = max - head_cap;
        HeadTail {
            head: Vec::with_capacity(head_cap.min(64 * 1024)),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(data);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn finish(self) -> Captured {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let truncated_bytes = self.total - kept;
        let mut bytes = self.head;
        if truncated_bytes > 0 {
            bytes.extend_from_slice(
                format!("\n[... chitti: {truncated_bytes} bytes cut here ...]\n").as_bytes(),
            );
        }
        bytes.extend(self.tail);
        Captured {
            bytes,
            truncated_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = HeadTail::new(10);
        c.push(b"hello");
        let out = c.finish();
        assert_eq!(out.bytes, b"hello");
        assert_eq!(out.truncated_bytes, 0);
    }

    #[test]
    fn exactly_the_cap_is_kept_whole() {
        let mut c = HeadTail::new(10);
        c.push(b"0123456789");
        assert_eq!(c.finish().bytes, b"0123456789");
    }

    #[test]
    fn large_output_keeps_head_and_tail() {
        let mut c = HeadTail::new(8);
        for chunk in [&b"abcdef"[..], b"ghij", b"klmnop"] {
            c.push(chunk);
        }
        let out = c.finish();
        assert_eq!(out.truncated_bytes, 16 - 8);
        let text = String::from_utf8(out.bytes).unwrap();
        assert!(
            text.starts_with("abcd\n[... chitti: 8 bytes cut here ...]\n"),
            "{text}"
        );
        assert!(text.ends_with("mnop"), "{text}");
    }

    #[test]
    fn byte_at_a_time_matches_bulk() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut a = HeadTail::new(100);
        a.push(&data);
        let mut b = HeadTail::new(100);
        for byte in &data {
            b.push(std::slice::from_ref(byte));
        }
        assert_eq!(a.finish(), b.finish());
    }
}
