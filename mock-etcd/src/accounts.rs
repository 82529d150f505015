//! Users, roles and key permissions as etcd 3.4's auth store keeps them, and the rules
//! that read them: who may touch which keys, who may manage auth.
//!
//! Why a module of its own: these are rules on data, free of tokens (`tokens`), of
//! wire shapes (`auth_messages`) and of the order of checks a call makes (`core`,
//! `auth_admin`). What holds, as observed on etcd 3.4.23:
//!
//! - the role `root` need not exist: a user granted it may do everything, and auth can
//!   be enabled once a user `root` holds it (`root user does not exist` / `root user
//!   does not have root role` otherwise); a role named `root` may also be added, and
//!   is then listed like any other;
//! - a role's permissions are kept sorted by key; granting the same key and range end
//!   again replaces the permission type;
//! - a range is permitted when the union of the user's intervals of that type covers
//!   it (`range_end` `"\0"` is +infinity; an empty end is the one key);
//! - while auth is enabled, the user `root`, its `root` role and the role `root`
//!   cannot be removed (`invalid auth management`).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::EtcdError;

/// The role that may do everything, and the user auth enable needs.
pub const ROOT: &str = "root";

/// `authpb.Permission_Type`.
pub const READ: i32 = 0;
pub const WRITE: i32 = 1;
pub const READWRITE: i32 = 2;

/// One key permission of a role (`authpb.Permission`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permission {
    pub perm_type: i32,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

/// A user: its password (kept as given: the fake stores no hash), whether it may
/// authenticate with one at all, and its roles (sorted, as etcd keeps them).
#[derive(Clone, Debug, Default)]
pub struct User {
    pub password: String,
    pub no_password: bool,
    pub roles: BTreeSet<String>,
}

/// What a request does to a key range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Every user and role, and whether auth is enabled.
#[derive(Clone, Debug, Default)]
pub struct Accounts {
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Vec<Permission>>,
    enabled: bool,
}

impl Accounts {
    /// Configured users: each holds the `root` role, and auth is enabled iff there
    /// is at least one (the fake's start-up shortcut for `etcdctl auth enable`).
    pub fn configured(users: &[(String, String)]) -> Self {
        let mut a = Accounts::default();
        for (name, password) in users {
            let user = User {
                password: password.clone(),
                no_password: false,
                roles: BTreeSet::from([ROOT.to_string()]),
            };
            a.users.insert(name.clone(), user);
        }
        a.enabled = !a.users.is_empty();
        a
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    pub fn users_mut(&mut self) -> &mut BTreeMap<String, User> {
        &mut self.users
    }

    pub fn roles_mut(&mut self) -> &mut BTreeMap<String, Vec<Permission>> {
        &mut self.roles
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    pub fn user_names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    pub fn role_names(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    pub fn role(&self, name: &str) -> Option<&[Permission]> {
        self.roles.get(name).map(Vec::as_slice)
    }

    fn is_root(&self, user: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.roles.contains(ROOT))
    }

    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.roles.contains(role))
    }

    /// etcd's `IsAdminPermitted`: anyone while auth is off; else a known user with
    /// the `root` role.
    pub fn admin(&self, user: Option<&str>) -> Result<(), EtcdError> {
        if !self.enabled {
            return Ok(());
        }
        let Some(user) = user else {
            return Err(EtcdError::user_empty());
        };
        if !self.users.contains_key(user) {
            return Err(EtcdError::user_not_found());
        }
        if !self.is_root(user) {
            return Err(EtcdError::permission_denied());
        }
        Ok(())
    }

    /// etcd's `isOpPermitted`: anyone while auth is off; else no user is "user name is
    /// empty", and a user must be root or hold permissions covering `[key, end)`.
    pub fn permit(
        &self,
        user: Option<&str>,
        access: Access,
        key: &[u8],
        end: &[u8],
    ) -> Result<(), EtcdError> {
        if !self.enabled {
            return Ok(());
        }
        let Some(name) = user else {
            return Err(EtcdError::user_empty());
        };
        let Some(u) = self.users.get(name) else {
            return Err(EtcdError::permission_denied());
        };
        if u.roles.contains(ROOT) {
            return Ok(());
        }
        let wanted = |p: &&Permission| match access {
            Access::Read => p.perm_type != WRITE,
            Access::Write => p.perm_type != READ,
        };
        let intervals: Vec<Interval> = u
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flatten()
            .filter(wanted)
            .map(|p| Interval::of_perm(&p.key, &p.range_end))
            .collect();
        let ok = if end.is_empty() {
            intervals.iter().any(|i| i.holds(key))
        } else {
            covers(intervals, Interval::of_range(key, end))
        };
        if ok {
            Ok(())
        } else {
            Err(EtcdError::permission_denied())
        }
    }
}

/// A key interval `[begin, end)`; `end` None is +infinity.
#[derive(Clone, Debug)]
struct Interval {
    begin: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl Interval {
    /// A permission's interval: one key is `[key, key + "\0")`.
    fn of_perm(key: &[u8], range_end: &[u8]) -> Self {
        if range_end.is_empty() {
            let mut end = key.to_vec();
            end.push(0);
            return Interval {
                begin: key.to_vec(),
                end: Some(end),
            };
        }
        Self::of_range(key, range_end)
    }

    /// A request's range (`range_end` `"\0"`: every key from `key` on).
    fn of_range(key: &[u8], end: &[u8]) -> Self {
        Interval {
            begin: key.to_vec(),
            end: (end != [0]).then(|| end.to_vec()),
        }
    }

    fn holds(&self, k: &[u8]) -> bool {
        k >= self.begin.as_slice() && self.end.as_ref().is_none_or(|e| k < e.as_slice())
    }

    /// Whether this interval ends below `b` (infinity never does).
    fn ends_below(&self, b: &[u8]) -> bool {
        self.end.as_ref().is_some_and(|e| e.as_slice() < b)
    }

    /// Whether this interval reaches at least as far as `other`.
    fn reaches(&self, other: &Interval) -> bool {
        match (&self.end, &other.end) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a >= b,
        }
    }

    fn intersects(&self, q: &Interval) -> bool {
        let before_q_ends = q.end.as_ref().is_none_or(|e| self.begin < *e);
        let after_q_begins = self.end.as_ref().is_none_or(|e| *e > q.begin);
        before_q_ends && after_q_begins
    }
}

/// etcd's `IntervalTree.Contains`: the intervals that meet `q`, in begin order, are
/// contiguous and reach from at or before its begin to at or past its end.
fn covers(mut intervals: Vec<Interval>, q: Interval) -> bool {
    intervals.retain(|i| i.intersects(&q));
    intervals.sort_by(|a, b| a.begin.cmp(&b.begin));
    let Some(first) = intervals.first() else {
        return false;
    };
    let mut reach = first.clone();
    for i in &intervals[1..] {
        if reach.ends_below(&i.begin) {
            return false;
        }
        if !reach.reaches(i) {
            reach.end = i.end.clone();
        }
    }
    first.begin <= q.begin && reach.reaches(&q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_perms(perms: &[(i32, &str, &str)]) -> Accounts {
        let mut a = Accounts::configured(&[("root".into(), "r".into())]);
        a.user_add("u", "u", false).unwrap();
        a.role_add("r").unwrap();
        for (t, k, e) in perms {
            let p = Permission {
                perm_type: *t,
                key: k.as_bytes().to_vec(),
                range_end: e.as_bytes().to_vec(),
            };
            a.role_grant("r", p).unwrap();
        }
        a.user_grant("u", "r").unwrap();
        a
    }

    /// The ranges probed on etcd 3.4.23 with read on `m..\0`, `b..c`, `c..d`, `z`.
    #[test]
    fn coverage_is_etcds() {
        let a = with_perms(&[
            (READ, "m", "\0"),
            (READ, "b", "c"),
            (READ, "c", "d"),
            (READ, "z", ""),
        ]);
        let read = |k: &str, e: &str| {
            a.permit(Some("u"), Access::Read, k.as_bytes(), e.as_bytes())
                .is_ok()
        };
        assert!(read("n", "\0"));
        assert!(read("n", "o"));
        assert!(read("n", ""));
        assert!(read("b", "d"));
        assert!(!read("b", "e"));
        assert!(read("z", ""));
        assert!(read("z", "z\0"));
        assert!(read("z", "{\0"));
        assert!(!read("d", "b"));
        assert!(!read("a", ""));
        let write = a.permit(Some("u"), Access::Write, b"n", b"");
        assert_eq!(write, Err(EtcdError::permission_denied()));
        assert_eq!(
            a.permit(None, Access::Read, b"n", b""),
            Err(EtcdError::user_empty())
        );
        assert!(a.permit(Some("root"), Access::Write, b"", b"\0").is_ok());
    }

    #[test]
    fn a_point_permission_covers_only_its_key() {
        let a = with_perms(&[(READWRITE, "k", "")]);
        let w = |k: &str, e: &str| {
            a.permit(Some("u"), Access::Write, k.as_bytes(), e.as_bytes())
                .is_ok()
        };
        assert!(w("k", ""));
        assert!(w("k", "k\0"));
        assert!(!w("k", "l"));
        assert!(!w("k\0", ""));
    }
}
