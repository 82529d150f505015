//! Auth management as etcd 3.4 applies it: users, roles, permissions, enable and
//! disable, each with etcd's preconditions, and who may call them.
//!
//! Why a module of its own: the rules on the accounts ([`Accounts`]'s mutations, in
//! etcd's order of checks) and the call around them ([`EtcdCore::auth_manage`]: the
//! token, then the admin check, then the change) are one concept; the accounts' data
//! and the key-permission rule are [`crate::accounts`], the tokens [`crate::tokens`].
//!
//! Who may call (etcd 3.4.23, observed): while auth is enabled every call needs a root
//! user ("user name is empty" without a token, "permission denied" for another
//! user), except that a user may get itself and a role it holds. None of them changes
//! the KV revision. Deleting a user or changing its password ends its tokens;
//! disabling auth ends every token.

use std::time::Duration;

use crate::accounts::{Accounts, Permission, User, ROOT};
use crate::auth_messages::*;
use crate::core::EtcdCore;
use crate::error::EtcdError;

impl Accounts {
    pub fn user_add(&mut self, name: &str, password: &str, no_pw: bool) -> Result<(), EtcdError> {
        if name.is_empty() {
            return Err(EtcdError::user_empty());
        }
        if self.user(name).is_some() {
            return Err(EtcdError::user_exists());
        }
        let user = User {
            password: password.to_string(),
            no_password: no_pw,
            roles: Default::default(),
        };
        self.users_mut().insert(name.to_string(), user);
        Ok(())
    }

    pub fn user_delete(&mut self, name: &str) -> Result<(), EtcdError> {
        if self.enabled() && name == ROOT {
            return Err(EtcdError::invalid_auth_mgmt());
        }
        match self.users_mut().remove(name) {
            Some(_) => Ok(()),
            None => Err(EtcdError::user_not_found()),
        }
    }

    pub fn user_change_password(&mut self, name: &str, password: &str) -> Result<(), EtcdError> {
        let user = self
            .users_mut()
            .get_mut(name)
            .ok_or_else(EtcdError::user_not_found)?;
        user.password = password.to_string();
        Ok(())
    }

    /// Granting the `root` role needs no role of that name; granting a held role is a
    /// no-op.
    pub fn user_grant(&mut self, name: &str, role: &str) -> Result<(), EtcdError> {
        if self.user(name).is_none() {
            return Err(EtcdError::user_not_found());
        }
        if role != ROOT && self.role(role).is_none() {
            return Err(EtcdError::role_not_found());
        }
        if let Some(u) = self.users_mut().get_mut(name) {
            u.roles.insert(role.to_string());
        }
        Ok(())
    }

    pub fn user_revoke(&mut self, name: &str, role: &str) -> Result<(), EtcdError> {
        if self.enabled() && name == ROOT && role == ROOT {
            return Err(EtcdError::invalid_auth_mgmt());
        }
        let user = self
            .users_mut()
            .get_mut(name)
            .ok_or_else(EtcdError::user_not_found)?;
        if !user.roles.remove(role) {
            return Err(EtcdError::role_not_granted());
        }
        Ok(())
    }

    pub fn role_add(&mut self, name: &str) -> Result<(), EtcdError> {
        if name.is_empty() {
            return Err(EtcdError::role_empty());
        }
        if self.role(name).is_some() {
            return Err(EtcdError::role_exists());
        }
        self.roles_mut().insert(name.to_string(), Vec::new());
        Ok(())
    }

    /// The role goes from every user that held it.
    pub fn role_delete(&mut self, name: &str) -> Result<(), EtcdError> {
        if self.enabled() && name == ROOT {
            return Err(EtcdError::invalid_auth_mgmt());
        }
        if self.roles_mut().remove(name).is_none() {
            return Err(EtcdError::role_not_found());
        }
        for u in self.users_mut().values_mut() {
            u.roles.remove(name);
        }
        Ok(())
    }

    /// Same key and range end: the type is replaced; else the permission is added,
    /// permissions sorted by key.
    pub fn role_grant(&mut self, name: &str, perm: Permission) -> Result<(), EtcdError> {
        let perms = self
            .roles_mut()
            .get_mut(name)
            .ok_or_else(EtcdError::role_not_found)?;
        let idx = perms.partition_point(|p| p.key < perm.key);
        match perms.get_mut(idx) {
            Some(p) if p.key == perm.key && p.range_end == perm.range_end => {
                p.perm_type = perm.perm_type;
            }
            _ => {
                let at = perms.partition_point(|p| p.key <= perm.key);
                perms.insert(at, perm);
            }
        }
        Ok(())
    }

    pub fn role_revoke(&mut self, name: &str, key: &[u8], end: &[u8]) -> Result<(), EtcdError> {
        let perms = self
            .roles_mut()
            .get_mut(name)
            .ok_or_else(EtcdError::role_not_found)?;
        let before = perms.len();
        perms.retain(|p| !(p.key == key && p.range_end == end));
        if perms.len() == before {
            return Err(EtcdError::permission_not_granted());
        }
        Ok(())
    }

    /// etcd's preconditions: a user `root` holding the role `root`. Enabling twice is
    /// a no-op.
    pub fn enable(&mut self) -> Result<(), EtcdError> {
        if self.enabled() {
            return Ok(());
        }
        let root = self.user(ROOT).ok_or_else(EtcdError::root_user_missing)?;
        if !root.roles.contains(ROOT) {
            return Err(EtcdError::root_role_missing());
        }
        self.set_enabled(true);
        Ok(())
    }
}

impl EtcdCore {
    /// One auth management call: the token (401 if invalid), who may call, then the
    /// change or the answer.
    pub fn auth_manage(
        &mut self,
        token: Option<&str>,
        req: &AuthRequest,
        now: Duration,
    ) -> Result<AuthAnswer, EtcdError> {
        let caller = self.check_token(token, now)?;
        let caller = caller.as_deref();
        let accounts = self.auth().accounts();
        let admin = accounts.admin(caller);
        match req {
            // etcd compares the name with the caller's, "" without a token.
            AuthRequest::UserGet(r) if caller.unwrap_or("") == r.name => {}
            AuthRequest::RoleGet(r) if accounts.has_role(caller.unwrap_or(""), &r.name) => {}
            _ => admin?,
        }
        let mut answer = AuthAnswer::header(self.header());
        let auth = self.auth_mut();
        match req {
            AuthRequest::UserGet(r) => {
                let user = auth.accounts().user(&r.name);
                answer.roles = user
                    .ok_or_else(EtcdError::user_not_found)?
                    .roles
                    .iter()
                    .cloned()
                    .collect();
            }
            AuthRequest::UserList => answer.users = auth.accounts().user_names(),
            AuthRequest::RoleList => answer.roles = auth.accounts().role_names(),
            AuthRequest::RoleGet(r) => {
                let perms = auth.accounts().role(&r.name);
                let perms = perms.ok_or_else(EtcdError::role_not_found)?;
                answer.perm = perms.iter().map(PermissionOut::of).collect();
            }
            AuthRequest::Disable => auth.disable(),
            change => change_accounts(auth, change)?,
        }
        Ok(answer)
    }
}

/// The calls that change the accounts (and end the tokens they make stale).
fn change_accounts(auth: &mut crate::tokens::Auth, req: &AuthRequest) -> Result<(), EtcdError> {
    let a = auth.accounts_mut();
    match req {
        AuthRequest::UserAdd(r) => {
            let no_pw = r.options.as_ref().is_some_and(|o| o.no_password);
            a.user_add(&r.name, &r.password, no_pw)
        }
        AuthRequest::UserDelete(r) => {
            a.user_delete(&r.name)?;
            auth.end_tokens_of(&r.name);
            Ok(())
        }
        AuthRequest::UserChangePassword(r) => {
            a.user_change_password(&r.name, &r.password)?;
            auth.end_tokens_of(&r.name);
            Ok(())
        }
        AuthRequest::UserGrant(r) => a.user_grant(&r.user, &r.role),
        AuthRequest::UserRevoke(r) => a.user_revoke(&r.user, &r.role),
        AuthRequest::RoleAdd(r) => a.role_add(&r.name),
        AuthRequest::RoleDelete(r) => a.role_delete(&r.name),
        AuthRequest::RoleGrant(r) => {
            if a.role(&r.name).is_none() {
                return Err(EtcdError::role_not_found());
            }
            // etcd 3.4.23 crashes on a grant without `perm`; 3.5 answers this.
            let p = r
                .perm
                .as_ref()
                .ok_or_else(EtcdError::permission_not_given)?;
            let perm = Permission {
                perm_type: p.perm_type,
                key: p.key.clone(),
                range_end: p.range_end.clone(),
            };
            a.role_grant(&r.name, perm)
        }
        AuthRequest::RoleRevoke(r) => a.role_revoke(&r.role, &r.key, &r.range_end),
        AuthRequest::Enable => a.enable(),
        AuthRequest::UserGet(_)
        | AuthRequest::UserList
        | AuthRequest::RoleGet(_)
        | AuthRequest::RoleList
        | AuthRequest::Disable => Ok(()),
    }
}
