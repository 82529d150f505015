//! `POST /_mock/faults` with hostile bodies: a body past the cap is refused unread, and
//! one just under it costs little memory however it is shaped.
//!
//! The peak is read from a counting global allocator, so this file holds one test: a
//! second test running beside it would count into the same peak.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use mock_kit::{FaultRegistry, MAX_FAULT_BODY};
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Shaped like the fakes' own fault types: internally tagged.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Fault {
    Fail { path: String },
}

/// `{"kind":"fail","path":"/x","junk":[{},{},...]}`, `len` bytes long.
fn tiny_objects(len: usize) -> Vec<u8> {
    let head = br#"{"kind":"fail","path":"/x","junk":["#;
    let mut body = head.to_vec();
    while body.len() + 5 < len {
        body.extend_from_slice(b"{},");
    }
    body.extend_from_slice(b"{}]}");
    body
}

async fn post(reg: &FaultRegistry<Fault>, body: Vec<u8>) -> StatusCode {
    let request = Request::post("/_mock/faults")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let router: axum::Router = reg.routes();
    router.oneshot(request).await.expect("infallible").status()
}

#[tokio::test(flavor = "current_thread")]
async fn hostile_fault_bodies_are_capped_and_cheap() {
    let reg = FaultRegistry::<Fault>::new();

    // Past the cap: refused, nothing armed.
    assert_eq!(
        post(&reg, tiny_objects(4 << 20)).await,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert!(reg.list().is_empty());

    // Just under the cap: armed, and the peak while decoding stays small.
    let body = tiny_objects(MAX_FAULT_BODY - 16);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    assert_eq!(post(&reg, body).await, StatusCode::OK);
    let growth = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(reg.list().len(), 1);
    assert!(
        growth < 8 << 20,
        "decoding a {MAX_FAULT_BODY}-byte fault body peaked at {growth} bytes"
    );
}
