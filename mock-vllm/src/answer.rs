//! What a completion answers, given its plan: the JSON body or the SSE chunks, field
//! for field in vLLM's (pydantic) order, and the accounting of a finished request.
//! Pure: times and token counts in, text out.

use std::time::Instant;

use rand::Rng;

use crate::stats::{FinishReason, Finished};
use crate::tokenizer::token_text;
use crate::validate::{Api, Req};

/// How many tokens a request generates and why it stops: a seeded natural length in
/// `natural` (at least `min_tokens`), unless `ignore_eos` or the cap comes first.
pub fn output_length(req: &Req, natural: (u32, u32), rng: &mut impl Rng) -> (u32, FinishReason) {
    let (lo, hi) = natural;
    let natural = rng.gen_range(lo..=hi).max(req.min_tokens);
    if req.ignore_eos || natural >= req.max_tokens {
        (req.max_tokens, FinishReason::Length)
    } else {
        (natural, FinishReason::Stop)
    }
}

/// Per-request identity and plan.
pub(crate) struct Plan {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model_json: String,
    pub prompt_tokens: u32,
    pub out_tokens: u32,
    pub reason: FinishReason,
    pub word_offset: u64,
    pub drop_after: Option<u32>,
    pub arrival: Instant,
    pub scheduled: Instant,
    pub req: Req,
}

impl Plan {
    pub fn usage(&self, completion: u32) -> String {
        format!(
            r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{completion},"prompt_tokens_details":null}}"#,
            self.prompt_tokens,
            self.prompt_tokens + completion
        )
    }

    pub fn finished(&self, first: Instant, end: Instant, generated: u32) -> Finished {
        Finished {
            prompt_tokens: self.prompt_tokens,
            generation_tokens: generated,
            max_tokens_param: self.req.max_tokens_param,
            max_generation_tokens: self.req.max_tokens,
            n: 1,
            queue: self.scheduled.duration_since(self.arrival).as_secs_f64(),
            prefill: first.duration_since(self.scheduled).as_secs_f64(),
            decode: end.duration_since(first).as_secs_f64(),
            e2e: end.duration_since(self.arrival).as_secs_f64(),
        }
    }

    pub fn text(&self, from: u32, to: u32) -> String {
        let mut s = String::new();
        for i in from..to {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(token_text(self.word_offset, i));
        }
        s
    }

    /// One SSE chunk carrying tokens `[from, to)`; `finish` on the last one.
    pub fn chunk(&self, from: u32, to: u32, finish: Option<FinishReason>) -> String {
        let text = self.text(from, to);
        let fin = finish
            .map(|r| format!("\"{}\"", r.as_str()))
            .unwrap_or_else(|| "null".into());
        match self.api {
            Api::Completions => format!(
                "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"text\":\"{}\",\"logprobs\":null,\"finish_reason\":{},\"stop_reason\":null}}]}}\n\n",
                self.id, self.created, self.model_json, text, fin
            ),
            Api::Chat => format!(
                "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"logprobs\":null,\"finish_reason\":{}{}}}]}}\n\n",
                self.id, self.created, self.model_json, text, fin,
                if finish.is_some() { ",\"stop_reason\":null" } else { "" }
            ),
        }
    }

    pub fn role_chunk(&self) -> String {
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
            self.id, self.created, self.model_json
        )
    }

    pub fn usage_chunk(&self, completion: u32) -> String {
        let object = if self.api == Api::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{}}}\n\n",
            self.id,
            self.created,
            self.model_json,
            self.usage(completion)
        )
    }

    /// The non-streaming answer, fields in vLLM's (pydantic) order.
    pub fn full_body(&self) -> String {
        let text = self.text(0, self.out_tokens);
        let reason = self.reason.as_str();
        let usage = self.usage(self.out_tokens);
        match self.api {
            Api::Completions => format!(
                r#"{{"id":"{}","object":"text_completion","created":{},"model":{},"choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":"{reason}","stop_reason":null,"prompt_logprobs":null}}],"usage":{usage},"kv_transfer_params":null}}"#,
                self.id, self.created, self.model_json
            ),
            Api::Chat => format!(
                r#"{{"id":"{}","object":"chat.completion","created":{},"model":{},"choices":[{{"index":0,"message":{{"role":"assistant","reasoning_content":null,"content":"{text}","tool_calls":[]}},"logprobs":null,"finish_reason":"{reason}","stop_reason":null}}],"usage":{usage},"prompt_logprobs":null,"kv_transfer_params":null}}"#,
                self.id, self.created, self.model_json
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn req(max_tokens: u32, min_tokens: u32, ignore_eos: bool) -> Req {
        Req {
            prompt_tokens: 1,
            prompt_hash: 0,
            max_tokens_param: Some(max_tokens),
            max_tokens,
            min_tokens,
            ignore_eos,
            stream: false,
            include_usage: false,
            chat: false,
        }
    }

    #[test]
    fn output_stops_naturally_unless_capped_or_told_not_to() {
        let rng = &mut StdRng::seed_from_u64(1);
        assert_eq!(
            output_length(&req(100, 0, false), (16, 64), rng).1,
            FinishReason::Stop
        );
        assert_eq!(
            output_length(&req(10, 0, false), (16, 64), rng),
            (10, FinishReason::Length)
        );
        assert_eq!(
            output_length(&req(100, 0, true), (16, 64), rng),
            (100, FinishReason::Length)
        );
        assert_eq!(
            output_length(&req(100, 90, false), (16, 64), rng),
            (90, FinishReason::Stop)
        );
        let (n, _) = output_length(&req(1000, 0, false), (16, 64), rng);
        assert!((16..=64).contains(&n));
    }
}
