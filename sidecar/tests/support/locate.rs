//! Finding the test fixtures, given relative to the crate's directory.

use std::path::{Path, PathBuf};

pub fn locate(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
