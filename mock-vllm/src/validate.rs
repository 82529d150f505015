//! vLLM's request rules for completions and chat: from the body bytes to a validated
//! `Req`, or the error vLLM gives for the first mistake (pydantic's messages,
//! `SamplingParams`' range checks, the context window), in vLLM's order. Pure: a body
//! and the configuration in, a value out.

use axum::http::StatusCode;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::Config;
use crate::error::ApiError;
use crate::request::{self, BodyError, Fields, Messages, Prompt};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
}

/// A validated request: what the load model needs of it (a simulator may build one
/// directly, or get it from a body with [`parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    pub prompt_tokens: u32,
    pub prompt_hash: u64,
    pub max_tokens_param: Option<u32>,
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// A chat request (rendered through the chat template).
    pub chat: bool,
}

fn bad(cfg: &Config, msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, msg, cfg.dialect.nested_errors())
}

/// pydantic's message for a field of the wrong type, as vLLM relays it (`got` quoted).
fn type_error(cfg: &Config, field: &str, expected: &str, got: &str) -> ApiError {
    bad(
        cfg,
        format!("[{{'type': '{expected}_type', 'loc': ('body', '{field}'), 'msg': 'Input should be a valid {expected}', 'input': {got}}}]"),
    )
}

fn missing(cfg: &Config, field: &str) -> ApiError {
    bad(
        cfg,
        format!("[{{'type': 'missing', 'loc': ('body', '{field}'), 'msg': 'Field required'}}]"),
    )
}

/// A scalar field's value (`None` for JSON null); a list or an object is a type error
/// and is never decoded.
fn scalar(
    cfg: &Config,
    raw: &RawValue,
    field: &str,
    expected: &str,
) -> Result<Option<Value>, ApiError> {
    let wrong = || type_error(cfg, field, expected, &request::quote(raw));
    if request::is_container(raw) {
        return Err(wrong());
    }
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::Null) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(_) => Err(wrong()),
    }
}

/// An optional integer field. pydantic takes any integer; vLLM checks the range later
/// (in `SamplingParams`), so the value is kept as sent (beyond i64: saturated).
fn opt_int(cfg: &Config, raw: Option<&RawValue>, field: &str) -> Result<Option<i64>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    match scalar(cfg, raw, field, "integer")? {
        None => Ok(None),
        Some(x) => match (x.as_i64(), x.as_u64()) {
            (Some(n), _) => Ok(Some(n)),
            (None, Some(_)) => Ok(Some(i64::MAX)),
            (None, None) => Err(type_error(cfg, field, "integer", &x.to_string())),
        },
    }
}

fn opt_bool(cfg: &Config, raw: Option<&RawValue>, field: &str) -> Result<bool, ApiError> {
    let Some(raw) = raw else { return Ok(false) };
    match scalar(cfg, raw, field, "boolean")? {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(x) => Err(type_error(cfg, field, "boolean", &x.to_string())),
    }
}

/// Prompt tokens and a hash (for the prefix cache) of a completions `prompt`.
fn prompt_of(cfg: &Config, f: &Fields) -> Result<(u32, u64), ApiError> {
    let raw = f.prompt.ok_or_else(|| missing(cfg, "prompt"))?;
    match request::prompt(raw) {
        Prompt::One { tokens, hash } => Ok((tokens, hash)),
        Prompt::Empty => Err(bad(cfg, "Prompt cannot be empty.")),
        Prompt::Several => Err(bad(
            cfg,
            "mock-vllm serves one prompt per request: prompt must be a string, a list of token ids, or a one-element list of either",
        )),
        Prompt::WrongType(got) => Err(type_error(cfg, "prompt", "string", &got)),
    }
}

/// Prompt tokens of chat `messages` under the mock chat template.
fn messages_of(cfg: &Config, f: &Fields) -> Result<(u32, u64), ApiError> {
    let raw = f.messages.ok_or_else(|| missing(cfg, "messages"))?;
    match request::messages(raw) {
        Messages::Ok { tokens, hash } => Ok((tokens, hash)),
        Messages::NotAList => Err(type_error(cfg, "messages", "list", &request::quote(raw))),
        Messages::Empty => Err(bad(cfg, "messages must contain at least one message")),
        Messages::MissingRole(i) => Err(bad(
            cfg,
            format!("[{{'type': 'missing', 'loc': ('body', 'messages', {i}, 'role'), 'msg': 'Field required'}}]"),
        )),
        Messages::NonTextPart(i) => Err(bad(
            cfg,
            format!("messages[{i}]: only text content parts are supported"),
        )),
        Messages::ContentType(got) => Err(type_error(cfg, "content", "string", &got)),
    }
}

/// `model`: absent, null, empty or the served name; another name is 404.
fn check_model(cfg: &Config, raw: Option<&RawValue>) -> Result<(), ApiError> {
    let Some(raw) = raw else { return Ok(()) };
    match scalar(cfg, raw, "model", "string")? {
        None => Ok(()),
        // vLLM serves an empty name as its own model (`_is_model_supported`).
        Some(Value::String(m)) if m.is_empty() || m == cfg.model => Ok(()),
        Some(Value::String(m)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The model `{m}` does not exist."),
            cfg.dialect.nested_errors(),
        )),
        Some(other) => Err(type_error(cfg, "model", "string", &other.to_string())),
    }
}

/// `stream_options.include_usage`; the options need `stream`.
fn include_usage(cfg: &Config, raw: Option<&RawValue>, stream: bool) -> Result<bool, ApiError> {
    let Some(raw) = raw else { return Ok(false) };
    if raw.get() == "null" {
        return Ok(false);
    }
    if !raw.get().starts_with('{') {
        return Err(type_error(
            cfg,
            "stream_options",
            "dictionary",
            &request::quote(raw),
        ));
    }
    if !stream {
        return Err(bad(
            cfg,
            "Stream options can only be defined when `stream=True`.",
        ));
    }
    Ok(request::member(raw, "include_usage")
        .and_then(|u| serde_json::from_str::<bool>(u.get()).ok())
        .unwrap_or(false))
}

/// `SamplingParams._verify_args` for the fields the fake reads, in vLLM's order and
/// words (the value as received), then the fake's own limit of one choice per request.
/// Answers the output cap, now known to be at least 1.
fn sampling_checks(
    cfg: &Config,
    n: i64,
    max_tokens: i64,
    min_tokens: i64,
) -> Result<u32, ApiError> {
    if n < 1 {
        return Err(bad(cfg, format!("n must be at least 1, got {n}.")));
    }
    if max_tokens < 1 {
        return Err(bad(
            cfg,
            format!("max_tokens must be at least 1, got {max_tokens}."),
        ));
    }
    if min_tokens < 0 {
        return Err(bad(
            cfg,
            format!("min_tokens must be greater than or equal to 0, got {min_tokens}."),
        ));
    }
    if min_tokens > max_tokens {
        return Err(bad(
            cfg,
            format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."),
        ));
    }
    if n != 1 {
        return Err(bad(cfg, format!("mock-vllm supports n=1 only, got n={n}.")));
    }
    Ok(u32::try_from(max_tokens).unwrap_or(u32::MAX))
}

/// From body bytes to a validated request, or vLLM's error for the first mistake.
pub fn parse(cfg: &Config, api: Api, bytes: &[u8]) -> Result<Req, ApiError> {
    let f = request::fields(bytes).map_err(|e| match e {
        BodyError::Json(e) => bad(cfg, format!("[{{'type': 'json_invalid', 'loc': ('body', {}), 'msg': 'JSON decode error', 'ctx': {{'error': '{e}'}}}}]", e.column())),
        BodyError::NotObject => bad(cfg, "[{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from'}]"),
    })?;
    check_model(cfg, f.model)?;
    let (prompt_tokens, prompt_hash) = match api {
        Api::Completions => prompt_of(cfg, &f)?,
        Api::Chat => messages_of(cfg, &f)?,
    };
    let mut max_tokens_param = opt_int(cfg, f.max_tokens, "max_tokens")?;
    if api == Api::Chat {
        if let Some(m) = opt_int(cfg, f.max_completion_tokens, "max_completion_tokens")? {
            max_tokens_param = Some(m);
        }
    }
    let n = opt_int(cfg, f.n, "n")?.unwrap_or(1);
    let min_tokens = opt_int(cfg, f.min_tokens, "min_tokens")?.unwrap_or(0);
    let stream = opt_bool(cfg, f.stream, "stream")?;
    let include_usage = include_usage(cfg, f.stream_options, stream)?;
    let max_len = cfg.max_model_len;
    if prompt_tokens >= max_len && max_tokens_param.is_none() || prompt_tokens > max_len {
        return Err(bad(
            cfg,
            format!("This model's maximum context length is {max_len} tokens. However, your request has {prompt_tokens} input tokens. Please reduce the length of the input messages."),
        ));
    }
    let max_tokens = match (max_tokens_param, api) {
        (Some(m), _) => m,
        (None, Api::Completions) => 16,
        (None, Api::Chat) => (max_len - prompt_tokens) as i64,
    };
    let requested = (prompt_tokens as i64).saturating_add(max_tokens);
    if requested > max_len as i64 {
        return Err(bad(
            cfg,
            format!("This model's maximum context length is {max_len} tokens. However, you requested {requested} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion."),
        ));
    }
    let max_tokens = sampling_checks(cfg, n, max_tokens, min_tokens)?;
    let max_tokens_param = max_tokens_param.map(|_| max_tokens);
    let min_tokens = min_tokens.clamp(0, max_tokens as i64) as u32;
    let ignore_eos = opt_bool(cfg, f.ignore_eos, "ignore_eos")?;
    Ok(Req {
        prompt_tokens,
        prompt_hash,
        max_tokens_param,
        max_tokens,
        min_tokens,
        ignore_eos,
        stream,
        include_usage,
        chat: api == Api::Chat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_without_a_server() {
        let cfg = Config::default();
        let req = parse(
            &cfg,
            Api::Completions,
            br#"{"prompt": "abcd efghi", "max_tokens": 5, "junk": [{}]}"#,
        )
        .unwrap();
        assert_eq!(
            (req.prompt_tokens, req.max_tokens, req.stream),
            (3, 5, false)
        );
        let err = parse(
            &cfg,
            Api::Completions,
            br#"{"prompt": "a", "max_tokens": -1}"#,
        )
        .unwrap_err();
        assert_eq!(err.message, "max_tokens must be at least 1, got -1.");
        let err = parse(&cfg, Api::Chat, br#"{"model": "other", "messages": []}"#).unwrap_err();
        assert_eq!(err.status, StatusCode::NOT_FOUND);
        // Chat without a cap may use the rest of the window.
        let req = parse(
            &cfg,
            Api::Chat,
            br#"{"messages": [{"role": "user", "content": "hi"}]}"#,
        )
        .unwrap();
        assert_eq!(req.max_tokens, 8192 - (2 + 4 + 1));
    }
}
