//! What `dlock doctor` asks an etcd cluster: the version and raft state of the member that
//! answers (`Status`). etcd does not tell its wall-clock time, and it needs none: its leases
//! are timed by the leader's monotonic clock, and every write is in the raft log on disk
//! before it is acknowledged, so persistence needs no setting.

use super::EtcdStore;
use super::conn::Resend;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult};

impl EtcdStore {
    pub(super) async fn doctor(&self, _q: HealthQuery) -> StoreResult<Health> {
        let mut h = Health::default();
        let status = self
            .inner
            .conn
            .call(Resend::Yes, |client| async move {
                client.maintenance_client().status().await
            })
            .await?;
        h.version = Some(format!("etcd {}", status.version()));
        let leader = status.leader();
        h.findings.push(if leader == 0 {
            Finding::new(
                "raft",
                Severity::Warn,
                "the member that answered knows no leader: grants wait until one is elected",
            )
        } else {
            Finding::new(
                "raft",
                Severity::Ok,
                format!("a leader is elected (raft term {})", status.raft_term()),
            )
        });
        h.findings.push(Finding::new(
            "clock",
            Severity::Note,
            "etcd does not tell its time (leases run on the leader's own clock)",
        ));
        h.findings.push(Finding::new(
            "persistence",
            Severity::Ok,
            "every write is in etcd's raft log before it is acknowledged",
        ));
        Ok(h)
    }
}
