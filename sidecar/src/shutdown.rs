//! Shutdown as a value: every loop holds a [`Shutdown`] and selects on it, and the signal
//! handler is the only place that triggers it.

use tokio::sync::watch;

/// Listens for the shutdown signal. Clone one per task.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// Fires the shutdown signal (dropping it fires it too).
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// A connected trigger and listener.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    pub fn fire(&self) {
        self.tx.send_replace(true);
    }
}

impl Shutdown {
    /// Resolves once shutdown is fired (or the trigger is gone).
    pub async fn wait(&mut self) {
        let _ = self.rx.wait_for(|fired| *fired).await;
    }
}

/// Fire `trigger` on the first SIGTERM or SIGINT; exit the process at once on a second.
pub async fn on_signals(trigger: Trigger) {
    let first = wait_for_signal().await;
    tracing::info!(
        signal = first,
        "shutting down: revoking the lease (a second signal exits at once)"
    );
    trigger.fire();
    let second = wait_for_signal().await;
    tracing::warn!(signal = second, "second signal: exiting without waiting");
    std::process::exit(1);
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "ctrl-c"
}
