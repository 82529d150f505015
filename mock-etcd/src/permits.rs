//! Which key permissions each KV request needs, in etcd 3.4's order of checks.
//!
//! Why a module of its own: the rule of coverage is [`Accounts::permit`]; what a
//! request touches is a property of the request, the same for every caller. As etcd
//! 3.4.23 applies them (observed): range reads its range; put writes its key (and
//! reads it with `prev_kv`), and must be allowed to write every key already on the
//! lease it names; delete writes its range (and reads it with `prev_kv`); txn reads
//! every compared range and checks its top-level ops as above. Ops of a txn nested in
//! a txn are not checked, as in etcd 3.4.23.

use crate::accounts::{Access, Accounts};
use crate::error::EtcdError;
use crate::requests::{DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};

/// A user's requests checked against the accounts.
pub struct Permits<'a> {
    pub accounts: &'a Accounts,
    pub user: Option<&'a str>,
}

impl Permits<'_> {
    fn check(&self, access: Access, key: &[u8], end: &[u8]) -> Result<(), EtcdError> {
        self.accounts.permit(self.user, access, key, end)
    }

    pub fn range(&self, r: &RangeRequest) -> Result<(), EtcdError> {
        self.check(Access::Read, &r.key, &r.range_end)
    }

    /// `lease_keys`: the keys already attached to the put's lease.
    pub fn put<'k>(
        &self,
        r: &PutRequest,
        lease_keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), EtcdError> {
        self.check(Access::Write, &r.key, b"")?;
        self.lease_keys(lease_keys)?;
        if r.prev_kv {
            self.check(Access::Read, &r.key, b"")?;
        }
        Ok(())
    }

    /// Revoking a lease (or putting on it) needs write access to each of its keys.
    pub fn lease_keys<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), EtcdError> {
        for k in keys {
            self.check(Access::Write, k, b"")?;
        }
        Ok(())
    }

    pub fn delete(&self, r: &DeleteRangeRequest) -> Result<(), EtcdError> {
        self.check(Access::Write, &r.key, &r.range_end)?;
        if r.prev_kv {
            self.check(Access::Read, &r.key, &r.range_end)?;
        }
        Ok(())
    }

    pub fn txn(&self, r: &TxnRequest) -> Result<(), EtcdError> {
        for c in r.compare.iter() {
            self.check(Access::Read, &c.key, &c.range_end)?;
        }
        for op in r.success.iter().chain(r.failure.iter()) {
            self.op(op)?;
        }
        Ok(())
    }

    fn op(&self, op: &RequestOp) -> Result<(), EtcdError> {
        if let Some(r) = &op.request_range {
            self.range(r)?;
        } else if let Some(r) = &op.request_put {
            self.check(Access::Write, &r.key, b"")?;
        } else if let Some(r) = &op.request_delete_range {
            if r.prev_kv {
                self.check(Access::Read, &r.key, &r.range_end)?;
            }
            self.check(Access::Write, &r.key, &r.range_end)?;
        }
        Ok(())
    }
}
