//! Locking that survives a panicked holder.
//!
//! Why a module of its own: every part of the fake locks its state the same way, and
//! a handler that panicked must not wedge the whole fake.

use std::sync::{Mutex, MutexGuard};

/// Lock, ignoring poisoning.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
