//! How a recorded reply's `finish_reason` reads: written by the model adapters, shown by the
//! turn, the chat and the Markdown export.

/// What the text output shows after a reply cut by a token limit.
pub const TRUNCATED: &str = "[truncated]";

/// True for a finish reason that means "cut by a token limit" (Ollama and OpenAI say
/// `length`; some servers say `max_tokens`).
pub fn is_truncation(reason: &str) -> bool {
    matches!(reason, "length" | "max_tokens" | "max_output_tokens")
}
