//! A deterministic stand-in tokenizer, so prompt accounting is reproducible without a
//! model: every whitespace-separated word costs `ceil(chars / 4)` tokens (about what a
//! BPE tokenizer charges for English), and an empty prompt still costs one token (BOS).
//! Chat messages add 4 tokens each for the template plus 2 for the assistant header.
//!
//! Generated text is built from words of at most 4 characters, one word per token, so
//! re-tokenizing an answer gives back its `completion_tokens`.

/// Tokens of a piece of text under the 4-characters-per-token rule.
pub fn count_tokens(text: &str) -> u32 {
    let mut n: u64 = 0;
    for word in text.split_whitespace() {
        let chars = word.chars().count() as u64;
        n += chars.div_ceil(4);
    }
    n.clamp(1, u32::MAX as u64) as u32
}

/// Template overhead per chat message.
pub const CHAT_TOKENS_PER_MESSAGE: u32 = 4;
/// The assistant header the template appends.
pub const CHAT_TOKENS_REPLY_PRIMER: u32 = 2;

const WORDS: [&str; 16] = [
    "the", "mock", "vllm", "says", "hi", "to", "you", "and", "all", "its", "load", "is", "fake",
    "but", "time", "real",
];

/// The text of output token `i` of a request whose words start at `offset`.
pub fn token_text(offset: u64, i: u32) -> &'static str {
    WORDS[((offset + i as u64) % WORDS.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_chars_per_token() {
        assert_eq!(count_tokens(""), 1);
        assert_eq!(count_tokens("hi"), 1);
        assert_eq!(count_tokens("abcd efghi"), 3);
        assert_eq!(count_tokens("  a  b  c "), 3);
    }

    #[test]
    fn generated_text_round_trips() {
        let text: Vec<&str> = (0..50).map(|i| token_text(7, i)).collect();
        assert_eq!(count_tokens(&text.join(" ")), 50);
    }
}
