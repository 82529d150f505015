//! The stop signal. A value handed to every task, never a global, so an embedded fake
//! can be stopped and started again in one process (scenarios restart mocks in-process).

use tokio_util::sync::CancellationToken;

/// Cloneable stop signal; `trigger` once, every clone sees it.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask every holder to stop.
    pub fn trigger(&self) {
        self.token.cancel();
    }

    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once [`Shutdown::trigger`] has been called on any clone.
    pub async fn wait(&self) {
        self.token.cancelled().await
    }

    /// A signal that also fires when this one does, but can be triggered alone
    /// (one connection or one task of a server).
    pub fn child(&self) -> Shutdown {
        Shutdown {
            token: self.token.child_token(),
        }
    }
}
