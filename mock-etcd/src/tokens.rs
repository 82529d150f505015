//! Simple tokens as etcd 3.4 issues them, with a sliding idle TTL.
//!
//! Why a module of its own: this is the rule, given the time as an argument and free of
//! HTTP (`auth` is the HTTP side; users and roles are `accounts`). A token is
//! `<16 letters>.<index>`; it expires after the TTL of *idle* time, each use extending
//! it; while authentication is not enabled any token is invalid. Times are durations
//! since an arbitrary start and the token letters come from a generator seeded by the
//! caller, so a run is replayable.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::accounts::Accounts;
use crate::error::EtcdError;

pub struct Auth {
    accounts: Accounts,
    /// Token -> (user, last use).
    tokens: BTreeMap<String, (String, Duration)>,
    ttl: Duration,
    index: u64,
    rng: StdRng,
}

impl Auth {
    /// `seed`: the token letters' generator (same seed, same tokens).
    pub fn new(users: &[(String, String)], ttl: Duration, seed: u64) -> Self {
        Auth {
            accounts: Accounts::configured(users),
            tokens: BTreeMap::new(),
            ttl,
            index: 20,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    pub fn enabled(&self) -> bool {
        self.accounts.enabled()
    }

    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    pub fn accounts_mut(&mut self) -> &mut Accounts {
        &mut self.accounts
    }

    /// A deleted user's tokens, or those of a user whose password changed, are invalid.
    pub fn end_tokens_of(&mut self, user: &str) {
        self.tokens.retain(|_, (u, _)| u != user);
    }

    /// Back to the configured users (auth on iff there are any), no roles, no tokens:
    /// the auth store of an etcd that lost its data dir and was set up again.
    pub fn reset_accounts(&mut self, users: &[(String, String)]) {
        self.accounts = Accounts::configured(users);
        self.tokens.clear();
    }

    /// Auth disabled: every token is invalid from now on.
    pub fn disable(&mut self) {
        self.accounts.set_enabled(false);
        self.tokens.clear();
    }

    pub fn tokens(&self) -> usize {
        self.tokens.len()
    }

    pub fn authenticate(
        &mut self,
        name: &str,
        password: &str,
        now: Duration,
    ) -> Result<String, EtcdError> {
        if !self.enabled() {
            return Err(EtcdError::auth_not_enabled());
        }
        match self.accounts.user(name) {
            Some(u) if u.no_password => return Err(EtcdError::no_password_user()),
            Some(u) if u.password == password && !name.is_empty() => {}
            _ => return Err(EtcdError::auth_failed()),
        }
        self.index += 1;
        let rng = &mut self.rng;
        let letters: String = (0..16)
            .map(|_| {
                let c = rng.gen_range(0..52u8);
                if c < 26 {
                    (b'a' + c) as char
                } else {
                    (b'A' + c - 26) as char
                }
            })
            .collect();
        let token = format!("{letters}.{}", self.index);
        self.tokens
            .retain(|_, (_, last)| now.saturating_sub(*last) <= self.ttl);
        self.tokens.insert(token.clone(), (name.to_string(), now));
        Ok(token)
    }

    /// The user a token names (refreshing it); None when no token was sent.
    pub fn check(
        &mut self,
        token: Option<&str>,
        now: Duration,
    ) -> Result<Option<String>, EtcdError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let ttl = self.ttl;
        match self.tokens.get_mut(token) {
            Some((user, last)) if now.saturating_sub(*last) <= ttl => {
                *last = now;
                Ok(Some(user.clone()))
            }
            Some(_) => {
                self.tokens.remove(token);
                Err(EtcdError::invalid_token())
            }
            None => Err(EtcdError::invalid_token()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_after_idle_ttl_and_uses_extend_them() {
        let mut a = Auth::new(&[("u".into(), "p".into())], Duration::from_secs(2), 7);
        let t0 = Duration::from_secs(100);
        assert_eq!(
            a.authenticate("u", "x", t0).unwrap_err(),
            EtcdError::auth_failed()
        );
        let tok = a.authenticate("u", "p", t0).unwrap();
        let (letters, idx) = tok.split_once('.').unwrap();
        assert_eq!(letters.len(), 16);
        assert!(idx.parse::<u64>().is_ok());
        assert_eq!(
            a.check(Some(&tok), t0 + Duration::from_secs(1)).unwrap(),
            Some("u".into())
        );
        assert!(a.check(Some(&tok), t0 + Duration::from_secs(3)).is_ok());
        assert_eq!(
            a.check(Some(&tok), t0 + Duration::from_secs(6))
                .unwrap_err(),
            EtcdError::invalid_token()
        );
        assert_eq!(a.check(None, t0).unwrap(), None);
    }

    #[test]
    fn disabled_auth_rejects_any_token() {
        let mut a = Auth::new(&[], Duration::from_secs(2), 7);
        assert_eq!(
            a.authenticate("u", "p", Duration::ZERO).unwrap_err(),
            EtcdError::auth_not_enabled()
        );
        assert_eq!(
            a.check(Some("x"), Duration::ZERO).unwrap_err(),
            EtcdError::invalid_token()
        );
    }
}
