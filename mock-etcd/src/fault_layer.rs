//! The middleware that applies faults to gateway requests, then logs each request and
//! reports it as an event.
//!
//! Why a module of its own: [`crate::faults`] is the fault vocabulary (what can go
//! wrong, where); this is the HTTP side that makes it happen.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::EtcdError;
use crate::event::EtcdEvent;
use crate::faults::{Fault, FaultDecision};
use crate::journal::RequestLog;
use crate::state::Shared;

/// Applies faults, then logs the request and reports it as an event.
pub(crate) async fn middleware(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let at_ms = mock_kit::events::now_ms();
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let fault = crate::faults::pick(&shared.faults, &path);
    if let Some(f) = &fault {
        shared.events.emit_event(&EtcdEvent::Fault {
            fault: f,
            path: &path,
        });
    }
    let resp = match fault.as_ref().map(Fault::decision) {
        Some(FaultDecision::Fail(e)) => e.into_response(),
        Some(FaultDecision::Delay(d)) => {
            tokio::select! {
                _ = tokio::time::sleep(d) => next.run(req).await,
                _ = shared.shutdown.wait() => EtcdError::grpc(14, "etcdserver: server stopped").into_response(),
            }
        }
        Some(FaultDecision::Hang) => {
            let mut release = shared.release.subscribe();
            tokio::select! {
                _ = release.changed() => next.run(req).await,
                _ = shared.shutdown.wait() => EtcdError::grpc(14, "etcdserver: server stopped").into_response(),
            }
        }
        None => next.run(req).await,
    };
    let status = resp.status().as_u16();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    shared.events.emit_event(&EtcdEvent::Request {
        method: &method,
        path: &path,
        status,
        elapsed_ms,
    });
    shared.journal.push(RequestLog {
        at_ms,
        method,
        path,
        status,
        elapsed_ms,
        fault: fault.map(|f| f.name().to_string()),
    });
    resp
}
