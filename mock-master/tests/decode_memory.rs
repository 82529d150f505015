//! Decoding a body under the cap costs memory for its known fields only: unknown fields
//! are skipped unread, never built into a tree. Measured with a counting allocator
//! (this test binary's own), per thread, so other tests do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|l| {
            let now = l.get() + layout.size();
            l.set(now);
            let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        });
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(layout.size())));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes allocated at the peak of `f`, above what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(Cell::get) - base)
}

/// A body of about `size` bytes: `known` fields plus an unknown field holding many
/// tiny objects (the shape that makes a tree cost ~10x the body).
fn hostile(known: &str, size: usize) -> Vec<u8> {
    let n = size / 3;
    let mut s = String::with_capacity(size + known.len() + 16);
    s.push('{');
    s.push_str(known);
    s.push_str(r#","junk":["#);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str("{}");
    }
    s.push_str("]}");
    s.into_bytes()
}

const SIZE: usize = 4 * 1024 * 1024;
const BOUND: usize = 64 * 1024;

#[test]
fn a_fault_body_of_tiny_objects_costs_no_tree() {
    let body = hostile(r#""kind":"latency","ms":5"#, SIZE);
    let (decoded, peak) =
        peak_of(|| serde_json::from_slice::<mock_master::fault::FaultPost>(&body));
    let post = decoded.unwrap();
    assert_eq!(post.fault, mock_master::Fault::Latency { ms: 5 });
    assert!(peak < BOUND, "decoding took {peak} bytes at its peak");
    // The same body as a tree, for scale: what a tree-building decoder would cost.
    let (tree, tree_peak) = peak_of(|| serde_json::from_slice::<serde_json::Value>(&body));
    assert!(tree.is_ok());
    assert!(
        tree_peak > 100 * BOUND,
        "a tree took only {tree_peak} bytes"
    );
}

#[test]
fn a_heartbeat_body_of_tiny_objects_costs_no_tree() {
    let body = hostile(r#""name":"a:1","incarnation_id":"i""#, SIZE);
    let (decoded, peak) = peak_of(|| mock_master::HeartbeatRequest::from_json(&body));
    assert_eq!(decoded.unwrap().name, "a:1");
    assert!(peak < BOUND, "decoding took {peak} bytes at its peak");
}
