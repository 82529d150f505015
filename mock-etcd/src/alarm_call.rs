//! The alarm calls on the core: `/v3/maintenance/alarm` and the quota check every write
//! makes (the alarms and the quota's arithmetic are [`crate::alarm`]'s).

use std::time::Duration;

use crate::alarm::{AlarmRequest, AlarmResponse, NOSPACE};
use crate::core::EtcdCore;
use crate::error::{code, EtcdError};

impl EtcdCore {
    /// `/v3/maintenance/alarm`. A bad token is refused with the auth store's own
    /// error (code 2), as etcd's maintenance server passes it through.
    pub fn alarm(
        &mut self,
        token: Option<&str>,
        req: &AlarmRequest,
        now: Duration,
    ) -> Result<AlarmResponse, EtcdError> {
        if let Err(e) = self.check_token(token, now) {
            let raw = e.message.replacen("etcdserver: ", "auth: ", 1);
            return Err(EtcdError::grpc(code::UNKNOWN, raw));
        }
        Ok(self.alarms_mut().apply(req))
    }

    /// The quota and NOSPACE checks of a write costing `cost` bytes (0: a txn
    /// without puts, which both let through).
    pub fn check_space(&mut self, cost: u64) -> Result<(), EtcdError> {
        if cost == 0 {
            return Ok(());
        }
        if self.alarms().nospace() {
            return Err(EtcdError::no_space());
        }
        if self.db_size() + cost >= self.config().quota_backend_bytes {
            let member = self.config().member_id;
            self.alarms_mut().raise(NOSPACE, member);
            return Err(EtcdError::no_space());
        }
        Ok(())
    }
}
