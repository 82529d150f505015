//! A fake run in-process, stopped as a process is by `SIGSTOP`: while frozen it answers
//! nothing and its own timers do not run; on thaw everything that waited goes on, at the
//! time it goes on.
//!
//! A fake embedded in the scenario runner cannot be sent `SIGSTOP` without stopping the
//! runner, so it is frozen at its edges instead: every request is held before its
//! handler runs ([`hold_requests`]; the connection is accepted, as the kernel's backlog
//! would), and every background loop waits at the top of each round
//! ([`Freeze::thawed`]). The control API (`/_mock/...`) is not held: it stands for the
//! debugger that stopped the process, and is how a frozen fake is thawed. Work already
//! inside a handler when the freeze comes runs to its end (a real stop would cut it
//! anywhere); state read directly through the fake's handle is its frozen state.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tokio::sync::watch;

/// The freeze switch of one fake; clones share it.
#[derive(Clone, Debug)]
pub struct Freeze {
    frozen: Arc<watch::Sender<bool>>,
}

impl Default for Freeze {
    fn default() -> Self {
        Freeze {
            frozen: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Freeze {
    /// A switch, not frozen.
    pub fn new() -> Freeze {
        Freeze::default()
    }

    /// Freeze (`true`) or thaw (`false`).
    pub fn set(&self, frozen: bool) {
        self.frozen
            .send_if_modified(|f| std::mem::replace(f, frozen) != frozen);
    }

    /// Whether it is frozen now.
    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// Resolves at once when not frozen, else once thawed.
    pub async fn thawed(&self) {
        let mut rx = self.frozen.subscribe();
        // The sender lives as long as `self`: the wait only ends by a thaw.
        let _ = rx.wait_for(|frozen| !frozen).await;
    }
}

/// `router` with every request but the control API's held while `freeze` is frozen.
pub fn hold_requests<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    freeze: &Freeze,
) -> Router<S> {
    router.layer(axum::middleware::from_fn_with_state(freeze.clone(), hold))
}

async fn hold(State(freeze): State<Freeze>, request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/_mock/") {
        freeze.thawed().await;
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use std::time::Duration;
    use tower::ServiceExt;

    fn router(freeze: &Freeze) -> Router {
        let r = Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/_mock/state", get(|| async { "state" }));
        hold_requests(r, freeze)
    }

    async fn get_status(r: Router, path: &str) -> u16 {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        r.oneshot(req).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn a_frozen_fake_holds_requests_until_thawed_but_not_its_control_api() {
        let freeze = Freeze::new();
        let r = router(&freeze);
        assert_eq!(get_status(r.clone(), "/health").await, 200);
        freeze.set(true);
        assert!(freeze.is_frozen());
        let held = tokio::spawn(get_status(r.clone(), "/health"));
        assert_eq!(get_status(r.clone(), "/_mock/state").await, 200);
        // Still held after the control call came back (a bounded wait, not a timing).
        let still = tokio::time::timeout(Duration::from_millis(50), async {
            while !held.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(still.is_err(), "answered while frozen");
        freeze.set(false);
        let status = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("released on thaw")
            .unwrap();
        assert_eq!(status, 200);
        freeze.thawed().await;
    }
}
