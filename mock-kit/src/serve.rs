//! Serving a router on a listener the caller bound, with graceful shutdown.
//!
//! The caller binds (port 0 allowed) so the address is known before anything runs and
//! tests never race for ports.

use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::Shutdown;

/// A running server: where it listens and how to stop it.
#[derive(Debug)]
pub struct ServerHandle {
    pub addr: SocketAddr,
    pub shutdown: Shutdown,
    join: JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// Stop accepting, let open requests finish, and wait for the server task.
    pub async fn stop(self) -> std::io::Result<()> {
        self.shutdown.trigger();
        match self.join.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }

    /// Stop at once: abort the task and every connection it serves (a crash, as seen by
    /// clients: open connections are reset, not drained).
    pub fn abort(self) {
        self.shutdown.trigger();
        self.join.abort();
    }
}

/// Serve `router` on `listener` until `shutdown` fires.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    shutdown: Shutdown,
) -> std::io::Result<ServerHandle> {
    let addr = listener.local_addr()?;
    let stop = shutdown.clone();
    let join = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { stop.wait().await })
        .await
    });
    Ok(ServerHandle {
        addr,
        shutdown,
        join,
    })
}

/// Bind `addr` (e.g. `127.0.0.1:0`) and serve `router` on it.
pub async fn bind_and_spawn(
    addr: SocketAddr,
    router: Router,
    shutdown: Shutdown,
) -> std::io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr).await?;
    spawn(listener, router, shutdown)
}
