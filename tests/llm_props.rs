//! Property tests: `map_http_status` redaction and bounding, and both SSE
//! parsers on arbitrary input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aegis::{
    error::{KnownSecrets, LlmError},
    llm::LlmChunk,
};
use aegis_runtime::__internal::{
    AnthropicStreamParser, EXCERPT_LIMIT, OpenAiStreamParser, StreamParser, map_http_status,
};
use proptest::prelude::*;

/// The text an error carries, whichever variant the status mapped to.
fn carried_text(e: &LlmError) -> Option<&str> {
    match e {
        LlmError::ProviderError { message, .. } | LlmError::AuthenticationError(message) => {
            Some(message)
        }
        LlmError::RateLimited { .. } => None,
        other => panic!("unexpected variant {other:?}"),
    }
}

/// A credential in one of the shapes providers echo back, around `token`.
fn planted(shape: usize, token: &str) -> String {
    match shape % 7 {
        0 => format!("sk-{token}"),
        1 => format!("sk-proj-{token}"),
        2 => format!("Authorization: Bearer {token}"),
        3 => format!("\"x-api-key\": \"{token}\""),
        4 => format!("x-api-key: {token}"),
        5 => format!("?api_key={token}&"),
        _ => format!("Bearer {token}"),
    }
}

fn assert_no_fragment(text: &str, token: &str) -> Result<(), TestCaseError> {
    let chars: Vec<char> = token.chars().collect();
    for w in chars.windows(6) {
        let f: String = w.iter().collect();
        prop_assert!(!text.contains(&f), "fragment {f} survived in {text}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn map_http_status_never_panics_and_bounds(status in any::<u16>(), body in any::<String>()) {
        let e = map_http_status("p", status, &body, &[("retry-after", body.as_str())]);
        if let Some(text) = carried_text(&e) {
            prop_assert!(text.chars().count() <= EXCERPT_LIMIT);
        }
        let _ = e.transience();
    }

    #[test]
    fn no_planted_secret_fragment_survives(
        status in prop::sample::select(vec![400u16, 401, 403, 404, 500, 502, 503, 529]),
        before in "[ -~\u{e9}\u{2713}]{0,700}",
        after in "[ -~]{0,300}",
        token in "[A-Za-z0-9_-]{16,700}",
        shape in 0usize..7,
    ) {
        // A separator before the credential, as in any real body; the
        // prefix text is otherwise arbitrary and may push the secret across
        // the excerpt boundary.
        let body = format!("{before} {}\n{after}", planted(shape, &token));
        let e = map_http_status("p", status, &body, &[]);
        let text = carried_text(&e).unwrap();
        prop_assert!(text.chars().count() <= EXCERPT_LIMIT);
        assert_no_fragment(text, &token)?;
        assert_no_fragment(&format!("{e:?}"), &token)?;
    }

    #[test]
    fn a_known_secret_of_any_shape_never_survives_by_value(
        status in prop::sample::select(vec![200u16, 400, 401, 403, 404, 429, 500, 529]),
        before in "[ -~\u{e9}\u{2713}]{0,700}",
        after in "[ -~]{0,300}",
        secret in "[A-Za-z0-9]{12,64}",
        quoted in "[A-Za-z0-9\"\\\\]{12,40}",
        form in 0usize..3,
    ) {
        let secrets = KnownSecrets::new().with(&secret).with(&quoted);
        // Bare, as a JSON string value, or as Rust's Debug quotes it.
        let planted = match form {
            0 => format!("{secret} {quoted}"),
            1 => serde_json::json!({"k": secret, "q": quoted}).to_string(),
            _ => format!("{secret:?} {quoted:?}"),
        };
        let body = format!("{before}{planted}{after}");
        let e = secrets.map_http_status("p", status, &body, &[]);
        for text in [e.to_string(), format!("{e:?}")] {
            assert_no_fragment(&text, &secret)?;
            let json = serde_json::to_string(&quoted).unwrap();
            let debug = format!("{quoted:?}");
            for form in [quoted.as_str(), &json[1..json.len() - 1], &debug[1..debug.len() - 1]] {
                prop_assert!(!text.contains(form), "{form} survived in {text}");
            }
        }
    }

    #[test]
    fn openai_parser_never_panics(pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8)) {
        run_parser(OpenAiStreamParser::new("openai"), &pieces);
    }

    #[test]
    fn anthropic_parser_never_panics(pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8)) {
        run_parser(AnthropicStreamParser::new("anthropic"), &pieces);
    }

    #[test]
    fn openai_parser_survives_sse_shaped_noise(events in prop::collection::vec(sse_event(), 0..12)) {
        let stream: String = events.concat();
        run_parser(OpenAiStreamParser::new("openai"), &[stream.into_bytes()]);
    }

    #[test]
    fn anthropic_parser_survives_sse_shaped_noise(events in prop::collection::vec(sse_event(), 0..12)) {
        let stream: String = events.concat();
        run_parser(AnthropicStreamParser::new("anthropic"), &[stream.into_bytes()]);
    }

    #[test]
    fn the_split_of_a_valid_stream_does_not_change_its_chunks(cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10)) {
        for (recorded, make) in [
            (OPENAI_RECORDED, (|| Box::new(OpenAiStreamParser::new("o")) as Box<dyn StreamParser>) as fn() -> Box<dyn StreamParser>),
            (ANTHROPIC_RECORDED, || Box::new(AnthropicStreamParser::new("a")) as Box<dyn StreamParser>),
        ] {
            let bytes = recorded.as_bytes();
            let whole = parse_all(make(), &[bytes.to_vec()]).unwrap();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len())).collect();
            points.sort_unstable();
            let mut pieces = Vec::new();
            let mut last = 0;
            for p in points {
                pieces.push(bytes[last..p].to_vec());
                last = p;
            }
            pieces.push(bytes[last..].to_vec());
            prop_assert_eq!(parse_all(make(), &pieces).unwrap(), whole);
        }
    }
}

/// Events whose data is JSON-ish noise: valid and invalid JSON, the
/// providers' event types with wrong fields, terminators.
fn sse_event() -> impl Strategy<Value = String> {
    let data = prop_oneof![
        Just("[DONE]".to_string()),
        Just(r#"{"choices":[{"delta":{"content":"x"}}]}"#.to_string()),
        Just(r#"{"choices":[{"delta":{"tool_calls":[{"index":18446744073709551615,"function":{"arguments":"{"}}]},"finish_reason":"tool_calls"}]}"#.to_string()),
        Just(r#"{"type":"message_stop"}"#.to_string()),
        Just(r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":null}}"#.to_string()),
        Just(r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#.to_string()),
        Just(r#"{"type":"content_block_stop","index":0}"#.to_string()),
        Just(r#"{"type":"error","error":{"type":"overloaded_error"}}"#.to_string()),
        Just(r#"{"error":{"code":"sk-abcdefghijklmnop"}}"#.to_string()),
        "[ -~]{0,40}",
    ];
    (
        prop_oneof![Just(""), Just("event: x\n"), Just(": c\n")],
        data,
    )
        .prop_map(|(head, d)| format!("{head}data: {d}\n\n"))
}

fn parse_all(
    mut parser: Box<dyn StreamParser>,
    pieces: &[Vec<u8>],
) -> Result<Vec<LlmChunk>, LlmError> {
    let mut out = Vec::new();
    for p in pieces {
        parser.push(p, &mut out)?;
    }
    parser.finish(&mut out)?;
    Ok(out)
}

/// Feeds pieces until the first error; every outcome must be chunks or a
/// typed error, and any error must be one a stream can produce.
fn run_parser(mut parser: impl StreamParser, pieces: &[Vec<u8>]) {
    let mut out = Vec::new();
    let mut result = Ok(());
    for p in pieces {
        result = parser.push(p, &mut out);
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = parser.finish(&mut out);
    }
    if let Err(e) = result {
        assert!(
            matches!(
                e,
                LlmError::ParseError(_)
                    | LlmError::ProviderError { .. }
                    | LlmError::AuthenticationError(_)
                    | LlmError::RateLimited { .. }
                    | LlmError::ContextLengthExceeded(_)
                    | LlmError::ContentFiltered(_)
            ),
            "{e:?}"
        );
        assert!(!e.to_string().contains("abcdefghijklmnop"), "{e}");
    }
}

const OPENAI_RECORDED: &str = concat!(
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hé\"}}]}\r\n\r\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"llo ✓\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC_RECORDED: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hé ✓\"}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);
