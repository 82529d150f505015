//! The `parse` and `preview` subcommands. (Interface stub: the parser issue fills it.)

#[derive(Debug, clap::Args)]
pub struct ParseArgs {}

#[derive(Debug, clap::Args)]
pub struct PreviewArgs {}

/// Runs `vllm-sidecar parse`; answers the process exit code.
pub fn run_parse(_args: ParseArgs) -> i32 {
    2
}

/// Runs `vllm-sidecar preview`; answers the process exit code.
pub async fn run_preview(_args: PreviewArgs) -> i32 {
    2
}
