//! Token estimates, for what a provider has not counted: a request's
//! prompt before it is sent (context windows, expected spend), and the text
//! of a stream cut before the provider reported its usage.
//!
//! About four characters a token, rounded up: the usual rule of thumb for
//! English under BPE tokenizers. Anything counted this way is marked as an
//! estimate where it is recorded.

use super::LlmRequest;

/// Characters per token of the estimate.
const CHARS_PER_TOKEN: u64 = 4;

/// Per-message framing tokens (role, separators) of chat formats.
const MESSAGE_OVERHEAD: u64 = 4;

/// The estimated tokens of `text`.
pub(crate) fn text_tokens(text: &str) -> u64 {
    let chars = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// The estimated prompt tokens of `request`: its messages (text, tool calls
/// and their framing) and its tool definitions.
pub(crate) fn prompt_tokens(request: &LlmRequest) -> u64 {
    let messages = request.messages.iter().fold(0u64, |n, m| {
        let calls = m.tool_calls.iter().fold(0u64, |n, c| {
            n.saturating_add(text_tokens(&c.name))
                .saturating_add(text_tokens(&c.arguments.to_string()))
        });
        n.saturating_add(MESSAGE_OVERHEAD)
            .saturating_add(text_tokens(&m.content))
            .saturating_add(calls)
    });
    request.tools.iter().fold(messages, |n, t| {
        n.saturating_add(text_tokens(&t.name))
            .saturating_add(text_tokens(&t.description))
            .saturating_add(text_tokens(&t.parameters.to_string()))
    })
}

/// The tokens `request` may take of a context window: its estimated prompt
/// plus the `max_tokens` it may generate.
pub(crate) fn window_tokens(request: &LlmRequest) -> u64 {
    prompt_tokens(request).saturating_add(u64::from(request.max_tokens.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::LlmMessage;

    #[test]
    fn four_characters_a_token_rounded_up() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("abcd"), 1);
        assert_eq!(text_tokens("abcde"), 2);
        // Characters, not bytes.
        assert_eq!(text_tokens("éééé"), 1);
    }

    #[test]
    fn a_request_counts_its_messages_framing_and_max_tokens() {
        let r = LlmRequest::new("m", vec![LlmMessage::user("a".repeat(400))]).with_max_tokens(50);
        assert_eq!(prompt_tokens(&r), 104);
        assert_eq!(window_tokens(&r), 154);
    }
}
