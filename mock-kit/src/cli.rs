//! What the fakes' binaries share around their own code: reading the command line and
//! waiting for the signal to stop.
//!
//! - [`parse_or_exit`]: the arguments parsed with clap; a usage error is one line on
//!   stderr (`NAME: error: …`) and exit code 2, so a harness reading the output sees one
//!   cause, not clap's usage block; `--help` and `--version` print as clap writes them,
//!   on stdout, and exit 0.
//! - [`stop_signal`]: resolves on SIGTERM or SIGINT, so a process supervisor's stop and a
//!   Ctrl-C both end a fake gracefully (its server drains and it exits 0); its handlers
//!   are in place from the call on.

use std::ffi::OsString;

use clap::Parser;

/// Why a command line gives no arguments to run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `--help` or `--version`: this text goes to stdout, and the process exits 0.
    Print(String),
    /// A usage error: this one line goes to stderr, and the process exits 2.
    Usage(String),
}

impl Stop {
    /// The exit code the process ends with.
    pub fn code(&self) -> i32 {
        match self {
            Stop::Print(_) => 0,
            Stop::Usage(_) => 2,
        }
    }

    /// Print the text where it belongs and end the process.
    pub fn exit(self) -> ! {
        let code = self.code();
        match self {
            Stop::Print(text) => print!("{text}"),
            Stop::Usage(line) => eprintln!("{line}"),
        }
        std::process::exit(code)
    }
}

/// `args` (the program name first) parsed as `A`; `name` prefixes a usage error's line.
pub fn parse<A, I, T>(name: &str, args: I) -> Result<A, Stop>
where
    A: Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    A::try_parse_from(args).map_err(|e| {
        if e.use_stderr() {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            Stop::Usage(format!("{name}: {first}"))
        } else {
            Stop::Print(e.to_string())
        }
    })
}

/// This process's command line parsed as `A`, or the process ends as [`Stop::exit`]
/// says.
pub fn parse_or_exit<A: Parser>(name: &str) -> A {
    parse(name, std::env::args_os()).unwrap_or_else(|stop| stop.exit())
}

/// A future that resolves once the process is sent SIGTERM or SIGINT. The handlers are
/// installed when this is called, not when the future is first polled: call it before
/// announcing readiness, so a signal sent right after the announcement is caught (with
/// no handler, SIGTERM kills the process). Where unix signals cannot be listened for,
/// it waits for Ctrl-C alone. Call it inside a tokio runtime.
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => None,
        }
    };
    async move {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = signals {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    #[command(name = "fake", version = "1.2.3")]
    struct Args {
        #[arg(long, default_value_t = 1)]
        count: u32,
    }

    fn parsed(args: &[&str]) -> Result<Args, Stop> {
        parse("fake", std::iter::once("fake").chain(args.iter().copied()))
    }

    #[test]
    fn good_flags_parse() {
        assert_eq!(parsed(&["--count", "7"]).map(|a| a.count), Ok(7));
        assert_eq!(parsed(&[]).map(|a| a.count), Ok(1));
    }

    #[test]
    fn a_usage_error_is_one_named_line_and_code_2() {
        for args in [&["--count", "-1"][..], &["--bogus"], &["--count"]] {
            let Err(stop) = parsed(args) else {
                panic!("{args:?} parsed")
            };
            assert_eq!(stop.code(), 2, "{args:?}");
            let Stop::Usage(line) = stop else {
                panic!("{args:?}: {stop:?}")
            };
            assert!(line.starts_with("fake: error: "), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn help_and_version_print_in_full_and_code_0() {
        let Err(Stop::Print(help)) = parsed(&["--help"]) else {
            panic!("--help is not printed")
        };
        assert!(help.contains("--count"), "{help}");
        assert!(help.lines().count() > 1, "{help}");
        let Err(stop) = parsed(&["--version"]) else {
            panic!("--version parsed")
        };
        assert_eq!(stop, Stop::Print("fake 1.2.3\n".into()));
        assert_eq!(stop.code(), 0);
    }
}
