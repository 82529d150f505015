//! Armed faults: what a fake should do wrong, for how many requests, until when.
//!
//! Each fake defines its own fault type `F` (a serde enum); the registry gives every
//! fake the same bookkeeping and the same control routes:
//! `GET /_mock/faults`, `POST /_mock/faults` (answers `{"id":N}`),
//! `DELETE /_mock/faults/{id}`, `DELETE /_mock/faults`.
//!
//! A fault request is a few hundred bytes, but decoding `F` (an internally tagged serde
//! enum, flattened into [`FaultRequest`]) buffers every field into a tree first, at about
//! 28 bytes of memory per byte of tiny JSON objects. So the routes take at most
//! [`MAX_FAULT_BODY`] bytes: a hostile body costs a couple of MiB, not hundreds.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The largest `POST /_mock/faults` body accepted (413 past it).
pub const MAX_FAULT_BODY: usize = 64 * 1024;

/// A fault as posted to the control API: the fault itself plus optional limits.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultRequest<F> {
    #[serde(flatten)]
    pub fault: F,
    /// Fire at most this many times, then disarm.
    #[serde(default)]
    pub count: Option<u64>,
    /// Disarm after this many milliseconds.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// One armed fault as listed by `GET /_mock/faults`.
#[derive(Clone, Debug, Serialize)]
pub struct ArmedFault<F> {
    pub id: u64,
    #[serde(flatten)]
    pub fault: F,
    pub remaining: Option<u64>,
    pub fired: u64,
    #[serde(skip)]
    until: Option<Instant>,
}

#[derive(Debug)]
struct Inner<F> {
    next_id: u64,
    armed: Vec<ArmedFault<F>>,
}

/// Thread-safe list of armed faults.
#[derive(Debug)]
pub struct FaultRegistry<F> {
    inner: Arc<Mutex<Inner<F>>>,
}

impl<F> Clone for FaultRegistry<F> {
    fn clone(&self) -> Self {
        FaultRegistry {
            inner: self.inner.clone(),
        }
    }
}

impl<F> Default for FaultRegistry<F> {
    fn default() -> Self {
        FaultRegistry {
            inner: Arc::new(Mutex::new(Inner {
                next_id: 1,
                armed: Vec::new(),
            })),
        }
    }
}

impl<F: Clone> FaultRegistry<F> {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner<F>> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Arm a fault; answers its id.
    pub fn add(&self, fault: F, count: Option<u64>, duration: Option<Duration>) -> u64 {
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.armed.push(ArmedFault {
            id,
            fault,
            remaining: count,
            fired: 0,
            until: duration.map(|d| Instant::now() + d),
        });
        id
    }

    /// Disarm one fault; false if there was none with that id.
    pub fn remove(&self, id: u64) -> bool {
        let mut g = self.lock();
        let before = g.armed.len();
        g.armed.retain(|f| f.id != id);
        g.armed.len() != before
    }

    pub fn clear(&self) {
        self.lock().armed.clear();
    }

    /// Armed faults that have not run out.
    pub fn list(&self) -> Vec<ArmedFault<F>> {
        let mut g = self.lock();
        prune(&mut g.armed);
        g.armed.clone()
    }

    /// The first armed fault for which `matches` answers `Some(r)`: counts one use of it
    /// and answers `r`. Faults whose count or time ran out are dropped first.
    pub fn fire<R>(&self, mut matches: impl FnMut(&F) -> Option<R>) -> Option<R> {
        let mut g = self.lock();
        prune(&mut g.armed);
        let mut hit = None;
        for (i, armed) in g.armed.iter_mut().enumerate() {
            if let Some(r) = matches(&armed.fault) {
                armed.fired += 1;
                if let Some(n) = armed.remaining.as_mut() {
                    *n = n.saturating_sub(1);
                }
                hit = Some((i, r));
                break;
            }
        }
        let (i, r) = hit?;
        if g.armed.get(i).is_some_and(|a| a.remaining == Some(0)) {
            g.armed.remove(i);
        }
        Some(r)
    }

    /// Whether any armed fault matches, without using it up (state-like faults such as
    /// "health down").
    pub fn any(&self, mut matches: impl FnMut(&F) -> bool) -> bool {
        let mut g = self.lock();
        prune(&mut g.armed);
        g.armed.iter().any(|a| matches(&a.fault))
    }
}

fn prune<F>(armed: &mut Vec<ArmedFault<F>>) {
    let now = Instant::now();
    armed.retain(|a| a.remaining != Some(0) && a.until.is_none_or(|u| u > now));
}

impl<F> FaultRegistry<F>
where
    F: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// The generic `/_mock/faults` routes, to merge into a fake's control router.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route(
                "/_mock/faults",
                get(list_faults::<F>)
                    .post(add_fault::<F>)
                    .delete(clear_faults::<F>),
            )
            .route("/_mock/faults/{id}", delete(remove_fault::<F>))
            .layer(DefaultBodyLimit::max(MAX_FAULT_BODY))
            .with_state(self.clone())
    }
}

async fn list_faults<F: Clone + Serialize>(
    State(reg): State<FaultRegistry<F>>,
) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "faults": reg.list() }))
}

async fn add_fault<F: Clone>(
    State(reg): State<FaultRegistry<F>>,
    Json(req): Json<FaultRequest<F>>,
) -> Json<serde_json::Value> {
    let id = reg.add(
        req.fault,
        req.count,
        req.duration_ms.map(Duration::from_millis),
    );
    Json(serde_json::json!({ "id": id }))
}

async fn remove_fault<F: Clone>(
    State(reg): State<FaultRegistry<F>>,
    Path(id): Path<u64>,
) -> StatusCode {
    if reg.remove(id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn clear_faults<F: Clone>(State(reg): State<FaultRegistry<F>>) -> StatusCode {
    reg.clear();
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    enum F {
        Fail(u16),
        Slow,
    }

    #[test]
    fn count_limited_fault_disarms() {
        let reg = FaultRegistry::new();
        reg.add(F::Fail(503), Some(2), None);
        let pick = |f: &F| match f {
            F::Fail(s) => Some(*s),
            F::Slow => None,
        };
        assert_eq!(reg.fire(pick), Some(503));
        assert_eq!(reg.fire(pick), Some(503));
        assert_eq!(reg.fire(pick), None);
        assert!(reg.list().is_empty());
    }

    #[test]
    fn remove_and_any() {
        let reg = FaultRegistry::new();
        let id = reg.add(F::Slow, None, None);
        assert!(reg.any(|f| *f == F::Slow));
        assert!(reg.remove(id));
        assert!(!reg.remove(id));
        assert!(!reg.any(|f| *f == F::Slow));
    }

    #[test]
    fn expired_fault_is_gone() {
        let reg = FaultRegistry::new();
        reg.add(F::Slow, None, Some(Duration::ZERO));
        assert!(!reg.any(|f| *f == F::Slow));
    }
}
