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
//!
//! Time is an argument: `add_at`, `fire_at`, `any_at` and `list_at` take `now`, the
//! time since an origin the caller picks, and a fault armed for a duration runs out at
//! `now + duration` in that same time base. The wall-clock methods (`add`, `fire`, `any`,
//! `list`, and the routes) pass the time since the registry was created. Use one kind or
//! the other on a registry, not both: virtual and wall time do not mix.

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
    /// When it runs out, in the time base of the call that armed it.
    #[serde(skip)]
    until: Option<Duration>,
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
    /// The origin of the wall-clock methods' time.
    origin: Instant,
}

impl<F> Clone for FaultRegistry<F> {
    fn clone(&self) -> Self {
        FaultRegistry {
            inner: self.inner.clone(),
            origin: self.origin,
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
            origin: Instant::now(),
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

    /// An empty registry whose wall-clock methods count time from `origin` (so that
    /// they share a time base with a core the caller drives from the same instant).
    pub fn with_origin(origin: Instant) -> Self {
        FaultRegistry {
            origin,
            ..Self::default()
        }
    }

    /// The wall-clock methods' `now`: time since the registry was created.
    fn wall(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Arm a fault; answers its id.
    pub fn add(&self, fault: F, count: Option<u64>, duration: Option<Duration>) -> u64 {
        self.add_at(self.wall(), fault, count, duration)
    }

    /// Arm a fault at `now`; with a `duration` it runs out at `now + duration`.
    pub fn add_at(
        &self,
        now: Duration,
        fault: F,
        count: Option<u64>,
        duration: Option<Duration>,
    ) -> u64 {
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.armed.push(ArmedFault {
            id,
            fault,
            remaining: count,
            fired: 0,
            until: duration.map(|d| now.saturating_add(d)),
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
        self.list_at(self.wall())
    }

    /// Armed faults that have not run out at `now`.
    pub fn list_at(&self, now: Duration) -> Vec<ArmedFault<F>> {
        let mut g = self.lock();
        prune(&mut g.armed, now);
        g.armed.clone()
    }

    /// The first armed fault for which `matches` answers `Some(r)`: counts one use of it
    /// and answers `r`. Faults whose count or time ran out are dropped first.
    pub fn fire<R>(&self, matches: impl FnMut(&F) -> Option<R>) -> Option<R> {
        if self.is_empty() {
            return None; // nothing to prune or fire: no need to read the clock
        }
        self.fire_at(self.wall(), matches)
    }

    /// [`FaultRegistry::fire`] at `now`.
    pub fn fire_at<R>(&self, now: Duration, mut matches: impl FnMut(&F) -> Option<R>) -> Option<R> {
        let mut g = self.lock();
        prune(&mut g.armed, now);
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
    pub fn any(&self, matches: impl FnMut(&F) -> bool) -> bool {
        if self.is_empty() {
            return false;
        }
        self.any_at(self.wall(), matches)
    }

    /// No fault armed (a simulated server asks on every request: the common case
    /// costs no clock read).
    fn is_empty(&self) -> bool {
        self.lock().armed.is_empty()
    }

    /// [`FaultRegistry::any`] at `now`.
    pub fn any_at(&self, now: Duration, mut matches: impl FnMut(&F) -> bool) -> bool {
        let mut g = self.lock();
        prune(&mut g.armed, now);
        g.armed.iter().any(|a| matches(&a.fault))
    }
}

fn prune<F>(armed: &mut Vec<ArmedFault<F>>, now: Duration) {
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

    /// In virtual time a fault runs out exactly at `now + duration`, whatever the clock.
    #[test]
    fn virtual_time_deadlines() {
        let ms = Duration::from_millis;
        let reg = FaultRegistry::new();
        reg.add_at(ms(1000), F::Slow, None, Some(ms(500)));
        let id = reg.add_at(ms(1000), F::Fail(409), Some(1), Some(ms(100)));
        assert_eq!(reg.list_at(ms(1099)).len(), 2);
        assert!(reg.any_at(ms(1499), |f| *f == F::Slow));
        assert!(!reg.any_at(ms(1500), |f| *f == F::Slow));
        // Pruned at 1500, so the 409 is gone too (its deadline was 1100).
        assert!(reg.list_at(ms(1500)).is_empty());
        assert!(!reg.remove(id));

        let reg = FaultRegistry::new();
        reg.add_at(ms(0), F::Fail(503), Some(2), Some(ms(100)));
        let pick = |f: &F| match f {
            F::Fail(s) => Some(*s),
            F::Slow => None,
        };
        assert_eq!(reg.fire_at(ms(10), pick), Some(503));
        let listed = reg.list_at(ms(10));
        assert_eq!(
            listed.first().map(|a| (a.fired, a.remaining)),
            Some((1, Some(1)))
        );
        assert_eq!(reg.fire_at(ms(100), pick), None);
        assert!(reg.list_at(ms(100)).is_empty());
    }

    /// Virtual time far from the registry's creation is honoured as given: an hour in,
    /// a fault armed for a second lives exactly a second.
    #[test]
    fn virtual_time_is_independent_of_the_wall_clock() {
        let reg = FaultRegistry::new();
        let hour = Duration::from_secs(3600);
        reg.add_at(hour, F::Slow, None, Some(Duration::from_secs(1)));
        assert!(reg.any_at(hour + Duration::from_millis(999), |f| *f == F::Slow));
        assert!(!reg.any_at(hour + Duration::from_secs(1), |f| *f == F::Slow));
    }

    /// With an origin an hour back, a fault armed now for a minute is listed at
    /// virtual time 1 h 59 s and gone at 1 h 1 min.
    #[test]
    fn wall_methods_count_from_the_origin() {
        let hour = Duration::from_secs(3600);
        let Some(origin) = Instant::now().checked_sub(hour) else {
            return; // a machine up for less than an hour: nothing to check
        };
        let reg = FaultRegistry::with_origin(origin);
        reg.add(F::Slow, None, Some(Duration::from_secs(60)));
        assert!(reg.any_at(hour + Duration::from_secs(59), |f| *f == F::Slow));
        assert!(!reg.any_at(hour + Duration::from_secs(61), |f| *f == F::Slow));
    }
}
