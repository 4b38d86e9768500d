//! LLM-side benchmarks: the fallback chain's overhead over a direct call,
//! and SSE parsing throughput of each adapter on a recorded stream.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aegis::{
    async_trait,
    error::LlmError,
    llm::{FallbackLlmAdapter, LlmChunk, LlmMessage, LlmPort, LlmRequest, LlmResponse},
};
use aegis_runtime::__internal::{AnthropicStreamParser, OpenAiStreamParser, StreamParser};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use std::hint::black_box;
use std::sync::Arc;

/// A provider answering at once (no delay, no bookkeeping), so the
/// measurement is the chain's own cost.
struct Answer(&'static str);

#[async_trait]
impl LlmPort for Answer {
    async fn generate(&self, _: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Ok(LlmResponse::text("ok"))
    }
    fn get_provider_name(&self) -> &str {
        self.0
    }
}

/// A provider failing at once with a 503.
struct Overloaded(&'static str);

#[async_trait]
impl LlmPort for Overloaded {
    async fn generate(&self, _: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Err(LlmError::ProviderError {
            provider: self.0.to_string(),
            status: 503,
            message: "overloaded".to_string(),
            retry_after: None,
        })
    }
    fn get_provider_name(&self) -> &str {
        self.0
    }
}

fn hop_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let request = LlmRequest::new("m", vec![LlmMessage::user("hi")]);
    let direct: Arc<dyn LlmPort> = Arc::new(Answer("direct"));
    let no_hop =
        FallbackLlmAdapter::new(vec![Arc::new(Answer("a")), Arc::new(Answer("b"))]).unwrap();
    let one_hop =
        FallbackLlmAdapter::new(vec![Arc::new(Overloaded("a")), Arc::new(Answer("b"))]).unwrap();
    let two_hops = FallbackLlmAdapter::new(vec![
        Arc::new(Overloaded("a")),
        Arc::new(Overloaded("b")),
        Arc::new(Answer("c")),
    ])
    .unwrap();

    let mut g = c.benchmark_group("fallback/generate");
    g.bench_function("direct", |b| {
        b.iter(|| rt.block_on(direct.generate(black_box(&request))).unwrap())
    });
    g.bench_function("chain_served_by_first", |b| {
        b.iter(|| rt.block_on(no_hop.generate(black_box(&request))).unwrap())
    });
    g.bench_function("chain_one_hop", |b| {
        b.iter(|| rt.block_on(one_hop.generate(black_box(&request))).unwrap())
    });
    g.bench_function("chain_two_hops", |b| {
        b.iter(|| rt.block_on(two_hops.generate(black_box(&request))).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("fallback/stream");
    let drain = |port: &dyn LlmPort| {
        rt.block_on(async {
            let mut s = port.generate_stream(&request).await.unwrap();
            let mut n = 0;
            while let Some(c) = s.next().await {
                n += c.unwrap().content.len();
            }
            n
        })
    };
    g.bench_function("direct", |b| b.iter(|| drain(direct.as_ref())));
    g.bench_function("chain_served_by_first", |b| b.iter(|| drain(&no_hop)));
    g.bench_function("chain_one_hop", |b| b.iter(|| drain(&one_hop)));
    g.finish();
}

/// A recorded-shape OpenAI stream: a role chunk, `n` word deltas, a finish
/// and `[DONE]`.
fn openai_recording(n: usize) -> Vec<u8> {
    let mut s = String::from(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
    );
    for i in 0..n {
        s.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" word{i}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    s.push_str("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    s.into_bytes()
}

/// A recorded-shape Anthropic stream: start events, `n` text deltas, the
/// stop events.
fn anthropic_recording(n: usize) -> Vec<u8> {
    let mut s = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    for i in 0..n {
        if i % 100 == 0 {
            s.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
        }
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\" word{i}\"}}}}\n\n"
        ));
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

/// Feeds `bytes` in TCP-segment-sized pieces, as the adapters receive them.
fn parse(mut parser: impl StreamParser, bytes: &[u8]) -> usize {
    let mut out: Vec<LlmChunk> = Vec::new();
    for piece in bytes.chunks(1460) {
        parser.push(piece, &mut out).unwrap();
    }
    parser.finish(&mut out).unwrap();
    out.len()
}

fn sse_throughput(c: &mut Criterion) {
    let openai = openai_recording(2000);
    let anthropic = anthropic_recording(2000);
    let mut g = c.benchmark_group("sse_parse");
    g.throughput(Throughput::Bytes(openai.len() as u64));
    g.bench_function("openai", |b| {
        b.iter(|| parse(OpenAiStreamParser::new("openai"), black_box(&openai)))
    });
    g.throughput(Throughput::Bytes(anthropic.len() as u64));
    g.bench_function("anthropic", |b| {
        b.iter(|| {
            parse(
                AnthropicStreamParser::new("anthropic"),
                black_box(&anthropic),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, hop_overhead, sse_throughput);
criterion_main!(benches);
