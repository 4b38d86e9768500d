//! The openai SSE stream parser on arbitrary bytes, split into pieces at
//! arbitrary points: chunks or a typed error, never a panic.
//! Twin: `tests/llm_props.rs` (`openai_parser_never_panics`).
#![no_main]

use aegis_runtime::__internal::{OpenAiStreamParser, StreamParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let piece = usize::from(split).max(1);
    let mut parser = OpenAiStreamParser::new("fuzz");
    let mut out = Vec::new();
    for chunk in bytes.chunks(piece) {
        if parser.push(chunk, &mut out).is_err() {
            return;
        }
    }
    let _ = parser.finish(&mut out);
});
