//! The core's [`Answer`] for each peer call's result: one mapping for the production
//! driver and for a simulator. The results come from the same pure functions on both
//! sides: etcd's from its call plan ([`crate::peers::etcd::plan`]), vLLM's and the
//! master's from their exchange's outcome ([`crate::peers::vllm::classify_health`],
//! [`crate::peers::vllm::classify_scrape`], [`crate::peers::master::classify_heartbeat`]).

use crate::core::Answer;
use crate::peers::etcd::EtcdError;
use crate::peers::vllm::{MetricsPage, ScrapeError};

/// A `/health` probe's result.
pub fn health(result: Result<(), String>) -> Answer {
    match result {
        Ok(()) => Answer::HealthOk,
        Err(e) => Answer::HealthFailed(e),
    }
}

/// A `/metrics` scrape's result: the page, or the error's counter label and message.
pub fn scrape(result: Result<MetricsPage, ScrapeError>) -> Answer {
    match result {
        Ok(page) => Answer::ScrapePage {
            text: page.text,
            openmetrics: page.openmetrics,
        },
        Err(e) => Answer::ScrapeFailed {
            reason: e.reason().to_string(),
            detail: e.to_string(),
        },
    }
}

/// A heartbeat's result: the master's status is the core's to read.
pub fn heartbeat(result: Result<u16, String>) -> Answer {
    match result {
        Ok(status) => Answer::HeartbeatStatus(status),
        Err(e) => Answer::HeartbeatFailed(e),
    }
}

/// A lease grant's result (`ttl`: the TTL asked for, which the core reasons with).
pub fn grant(result: Result<i64, EtcdError>, ttl: i64) -> Answer {
    match result {
        Ok(lease) => Answer::LeaseGranted { lease, ttl },
        Err(e) => Answer::GrantFailed(e.to_string()),
    }
}

/// A keepalive's result: only etcd's own word makes a lease gone.
pub fn keepalive(result: Result<i64, EtcdError>) -> Answer {
    match result {
        Ok(ttl) => Answer::KeepaliveTtl(ttl),
        Err(EtcdError::LeaseNotFound) => Answer::LeaseNotFound,
        Err(e) => Answer::KeepaliveFailed(e.to_string()),
    }
}

/// A read of the MASTER key: its value, no key, or why it could not be read.
pub fn master_key(result: Result<Option<String>, EtcdError>) -> Answer {
    match result {
        Ok(value) => Answer::MasterValue(value),
        Err(e) => Answer::MasterReadFailed(e.to_string()),
    }
}

pub fn put(result: Result<(), EtcdError>) -> Answer {
    match result {
        Ok(()) => Answer::PutDone,
        Err(e) => Answer::PutFailed(e.to_string()),
    }
}

pub fn revoke(result: Result<(), EtcdError>) -> Answer {
    match result {
        Ok(()) => Answer::RevokeDone,
        Err(e) => Answer::RevokeFailed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_and_master_results_become_the_cores_answers() {
        assert_eq!(health(Ok(())), Answer::HealthOk);
        assert_eq!(health(Err("x".into())), Answer::HealthFailed("x".into()));
        let page = MetricsPage {
            text: "a 1\n".into(),
            openmetrics: true,
            bytes: 4,
        };
        assert_eq!(
            scrape(Ok(page)),
            Answer::ScrapePage {
                text: "a 1\n".into(),
                openmetrics: true
            }
        );
        assert_eq!(
            scrape(Err(ScrapeError::TooLarge(8))),
            Answer::ScrapeFailed {
                reason: "too_large".into(),
                detail: "/metrics is larger than 8 bytes".into()
            }
        );
        assert_eq!(heartbeat(Ok(409)), Answer::HeartbeatStatus(409));
        assert_eq!(
            heartbeat(Err("y".into())),
            Answer::HeartbeatFailed("y".into())
        );
    }
}
