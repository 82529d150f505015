//! The `mock-vllm` binary as a child process: started with some flags, its address read
//! from its first line, killed however the test ends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `mock-vllm`; killed and reaped on drop.
pub struct Running {
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the binary with `args` (a `--listen` among them) and read its address.
pub fn start(args: &[&str]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-vllm"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .map(str::to_string);
    let running = Running {
        child,
        addr: addr.clone().unwrap_or_default(),
    };
    assert!(addr.is_some(), "first line: {line:?}");
    running
}
