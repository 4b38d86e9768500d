//! Server-sent events framing, shared by the streaming adapters.
//!
//! Bytes arrive in arbitrary network-sized pieces: a line, a UTF-8 sequence
//! or a `\r\n` pair may be split across two of them, so the decoder buffers
//! the current line as bytes and only decodes complete lines.

use crate::error::LlmError;
use crate::llm::LlmChunk;

/// The longest line the decoder buffers before it gives up on the stream.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental SSE decoder (the WHATWG event-stream rules: `\n`, `\r\n` or
/// `\r` line ends, `:` comments, a blank line dispatches, `id`/`retry`
/// ignored).
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; complete events are appended to `out`. Invalid UTF-8 or
    /// an absurdly long line is a [`LlmError::ParseError`].
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(pos) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (head, tail) = bytes.split_at(pos);
            let is_cr = tail.first() == Some(&b'\r');
            bytes = &tail[1..];
            if is_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
            if self.line.is_empty() {
                self.line_done(head, out)?;
            } else {
                self.buffer(head)?;
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, out)?;
            }
        }
        self.buffer(bytes)
    }

    /// Whether bytes or fields of an undispatched event are buffered (the
    /// stream stopped mid-event).
    pub fn has_pending(&self) -> bool {
        !self.line.is_empty() || self.has_data || self.event.is_some()
    }

    fn buffer(&mut self, bytes: &[u8]) -> Result<(), LlmError> {
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(LlmError::ParseError(format!(
                "event-stream line longer than {MAX_LINE} bytes"
            )));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                data.pop(); // the '\n' after the last data line
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                });
                self.has_data = false;
            }
            self.event = None;
            return Ok(());
        }
        let line = std::str::from_utf8(line)
            .map_err(|e| LlmError::ParseError(format!("event stream is not UTF-8: {e}")))?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        Ok(())
    }
}

/// Turns a provider's response body, piece by piece, into [`LlmChunk`]s.
///
/// Implemented by [`OpenAiStreamParser`](crate::OpenAiStreamParser) and
/// [`AnthropicStreamParser`](crate::AnthropicStreamParser). A parser that
/// returned an error is done: feed it nothing more.
pub trait StreamParser: Send + 'static {
    /// Feeds body bytes; chunks completed by them are appended to `out`,
    /// even when a later event in the same bytes is an error.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;

    /// The body ended. A stream cut before its provider's terminator is a
    /// [`LlmError::ParseError`].
    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for p in input.chunks(piece) {
            d.push(p, &mut out).unwrap();
        }
        assert!(!d.has_pending());
        out
    }

    #[test]
    fn decodes_whatever_the_split() {
        let input = "event: a\r\ndata: x\r\ndata:y\r\n\r\n: comment\n\ndata: é✓\r\rid: 3\ndata\n\n";
        let want = vec![
            SseEvent {
                event: Some("a".into()),
                data: "x\ny".into(),
            },
            SseEvent {
                event: None,
                data: "é✓".into(),
            },
            SseEvent {
                event: None,
                data: String::new(),
            },
        ];
        for piece in 1..input.len() {
            assert_eq!(
                decode_in_pieces(input.as_bytes(), piece),
                want,
                "piece {piece}"
            );
        }
    }

    #[test]
    fn reports_a_cut_event_and_bad_utf8() {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        d.push(b"data: partial", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(d.has_pending());

        let mut d = SseDecoder::new();
        let err = d.push(b"data: \xff\xfe\n", &mut out).unwrap_err();
        assert!(matches!(err, LlmError::ParseError(_)));
    }
}
