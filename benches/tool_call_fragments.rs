//! Tool-call assembly in time linear in the number of fragments: 100,000
//! fragments streamed through each adapter's parser, in the worst shape for
//! a parser that rescans its partial calls (every fragment opens or extends
//! a different call, so a rescan walks all of them).
//!
//! `cargo bench --bench tool_call_fragments`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::llm::LlmChunk;
use aegis_runtime::__internal::{AnthropicStreamParser, OpenAiStreamParser, StreamParser};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

const FRAGMENTS: usize = 100_000;
/// Network-sized reads.
const READ: usize = 16 * 1024;

/// OpenAI: each call's name arrives in one fragment and its arguments in a
/// second, interleaved so the second fragment of call `i` arrives after
/// every call has opened: `FRAGMENTS` fragments over `FRAGMENTS / 2` calls.
fn openai_body() -> Vec<u8> {
    let calls = FRAGMENTS / 2;
    let mut body = String::new();
    for i in 0..calls {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"c{i}\",\"function\":{{\"name\":\"f\",\"arguments\":\"{{\\\"a\\\":\"}}}}]}}}}]}}\n\n"
        ));
    }
    for i in 0..calls {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"function\":{{\"arguments\":\"{i}}}\"}}}}]}}}}]}}\n\n"
        ));
    }
    body.push_str(
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    );
    body.into_bytes()
}

/// Anthropic: every tool block opens, then each receives its
/// `input_json_delta` fragment, then they stop in order: `FRAGMENTS` deltas
/// over as many open blocks.
fn anthropic_body() -> Vec<u8> {
    let mut body = String::new();
    for i in 0..FRAGMENTS {
        body.push_str(&format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{i},\"content_block\":{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"f\",\"input\":{{}}}}}}\n\n"
        ));
    }
    for i in 0..FRAGMENTS {
        body.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{i},\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"a\\\":{i}}}\"}}}}\n\n"
        ));
    }
    for i in 0..FRAGMENTS {
        body.push_str(&format!(
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{i}}}\n\n"
        ));
    }
    body.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    body.into_bytes()
}

fn parse(mut parser: impl StreamParser, body: &[u8]) -> Vec<LlmChunk> {
    let mut out = Vec::new();
    for piece in body.chunks(READ) {
        parser.push(piece, &mut out).unwrap();
    }
    parser.finish(&mut out).unwrap();
    out
}

fn bench(c: &mut Criterion) {
    let openai = openai_body();
    let anthropic = anthropic_body();
    // The shapes really assemble every call.
    let calls: usize = parse(OpenAiStreamParser::new("o"), &openai)
        .iter()
        .map(|c| c.tool_calls.len())
        .sum();
    assert_eq!(calls, FRAGMENTS / 2);
    let calls: usize = parse(AnthropicStreamParser::new("a"), &anthropic)
        .iter()
        .map(|c| c.tool_calls.len())
        .sum();
    assert_eq!(calls, FRAGMENTS);

    let mut g = c.benchmark_group("tool_call_fragments");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FRAGMENTS as u64));
    g.bench_function("openai_100k", |b| {
        b.iter_batched(
            || OpenAiStreamParser::new("o"),
            |p| black_box(parse(p, &openai)),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("anthropic_100k", |b| {
        b.iter_batched(
            || AnthropicStreamParser::new("a"),
            |p| black_box(parse(p, &anthropic)),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
