//! Server-sent events framing, shared by the streaming adapters.
//!
//! Bytes arrive in arbitrary network-sized pieces: a line, a UTF-8 sequence
//! or a `\r\n` pair may be split across two of them, so the decoder buffers
//! the current line as bytes and only decodes complete lines.

use crate::error::LlmError;
use crate::llm::LlmChunk;

/// The default bound on one event: all its `data:` lines together (and so
/// any one line). A provider's event is a JSON delta of a few kilobytes; a
/// peer that sends more without a blank line is hostile or broken.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[doc(hidden)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental SSE decoder (the WHATWG event-stream rules: `\n`, `\r\n` or
/// `\r` line ends, `:` comments, a blank line dispatches, `id`/`retry`
/// ignored), bounded: a line or an event's data over
/// [`SseDecoder::with_max_event_bytes`] is a [`LlmError::ParseError`].
#[derive(Debug)]
#[doc(hidden)]
pub struct SseDecoder {
    line: Vec<u8>,
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    max_event: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder {
            line: Vec::new(),
            skip_lf: false,
            event: None,
            data: String::new(),
            has_data: false,
            max_event: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl SseDecoder {
    /// A decoder at the start of a stream, bounded by
    /// [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Bounds one event (its `data:` lines together, and any single line)
    /// to `bytes`.
    pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event = bytes;
        self
    }

    /// Feeds bytes; complete events are appended to `out`. Invalid UTF-8, a
    /// line or an event over the bound is a [`LlmError::ParseError`].
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
        if self.line.len().saturating_add(bytes.len()) > self.max_event {
            return Err(LlmError::ParseError(format!(
                "event-stream line longer than {} bytes",
                self.max_event
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
                // The '\n' joining lines counts, as it is part of the event.
                if self.data.len().saturating_add(value.len()) > self.max_event {
                    return Err(LlmError::ParseError(format!(
                        "event-stream event longer than {} bytes",
                        self.max_event
                    )));
                }
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
/// Implemented by [`SseStreamParser`], of which
/// [`OpenAiStreamParser`] and
/// [`AnthropicStreamParser`] are the two
/// dialects. A parser that returned an error is done: feed it nothing more.
#[doc(hidden)]
pub trait StreamParser: Send + 'static {
    /// Feeds body bytes; chunks completed by them are appended to `out`,
    /// even when a later event in the same bytes is an error.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;

    /// The body ended. A stream cut before its provider's terminator is a
    /// [`LlmError::ParseError`].
    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;
}

/// What a provider's events mean: the half of a stream parser that differs
/// between providers. The SSE framing is [`SseStreamParser`]'s, shared.
#[doc(hidden)]
pub trait SseDialect: Send + 'static {
    /// One dispatched event; chunks it completes go to `out`.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;

    /// The body ended (with no event left undispatched or not: see
    /// [`StreamParser::finish`]).
    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;
}

/// An SSE body parsed into chunks: the shared, bounded [`SseDecoder`]
/// feeding one provider's [`SseDialect`].
#[derive(Debug)]
#[doc(hidden)]
pub struct SseStreamParser<D> {
    sse: SseDecoder,
    /// Reused across pushes, so a push allocates no event list of its own.
    events: Vec<SseEvent>,
    pub(crate) dialect: D,
}

impl<D: SseDialect> SseStreamParser<D> {
    /// A parser speaking `dialect`, events bounded by
    /// [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn from_dialect(dialect: D) -> Self {
        SseStreamParser {
            sse: SseDecoder::new(),
            events: Vec::new(),
            dialect,
        }
    }

    /// Bounds one event (all its `data:` lines together) to `bytes`; a
    /// larger one is a [`LlmError::ParseError`].
    pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.sse = std::mem::take(&mut self.sse).with_max_event_bytes(bytes);
        self
    }
}

impl<D: SseDialect> StreamParser for SseStreamParser<D> {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        let decoded = self.sse.push(bytes, &mut self.events);
        let mut result = Ok(());
        // Events decoded before a framing error still count, in order; the
        // first error (a dialect's, then the framing's) ends the stream.
        for e in self.events.drain(..) {
            result = self.dialect.event(&e, out);
            if result.is_err() {
                break;
            }
        }
        self.events.clear();
        result.and(decoded)
    }

    fn finish(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        self.dialect.finish(out)
    }
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
    fn an_event_or_a_line_over_the_bound_is_a_parse_error() {
        let mut out = Vec::new();
        // Many short lines, one event: the data together crosses the bound.
        let mut d = SseDecoder::new().with_max_event_bytes(64);
        let err = d.push(&b"data: 0123456789\n".repeat(8), &mut out);
        assert!(
            matches!(&err, Err(LlmError::ParseError(m)) if m.contains("event longer than 64")),
            "{err:?}"
        );
        // Exactly at the bound it passes, and a dispatched event resets it.
        let mut d = SseDecoder::new().with_max_event_bytes(16);
        d.push(b"data: 0123456\ndata: 01234567\n\n", &mut out)
            .unwrap();
        d.push(b"data: 0123456\ndata: 01234567\n\n", &mut out)
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].data.len(), 16);
        // One line alone, split across pushes.
        let mut d = SseDecoder::new().with_max_event_bytes(64);
        d.push(&[b'x'; 40], &mut out).unwrap();
        let err = d.push(&[b'x'; 40], &mut out);
        assert!(matches!(err, Err(LlmError::ParseError(m)) if m.contains("line longer than 64")));
        assert_eq!(SseDecoder::new().max_event, DEFAULT_MAX_EVENT_BYTES);
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
