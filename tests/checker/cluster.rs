//! Faults on the Redis Cluster master that owns the checked name: killed, or paused past the
//! node timeout. Either way its replica takes over, and the old master comes back as a replica
//! of the new one and syncs before the next fault (with `wait_replicas=1` nothing is granted
//! on the name's slot until then).

use std::time::{Duration, Instant};

use crate::common::redis::RedisCluster;
use crate::common::wait_for;
use crate::{Fault, NAME};

/// The Redis Cluster key whose slot holds the checked name.
pub(crate) fn cluster_key() -> String {
    format!("dlock:{{default:{NAME}}}:f")
}

/// Kill (MasterKill) or SIGSTOP (MasterPause) the master of the name's slot until its replica
/// has taken over, then bring it back. A paused master wakes up still believing it is master
/// for a moment: a grant it accepts then cannot reach a replica, so `wait_replicas=1` refuses it.
pub(crate) fn master_fault(c: &mut RedisCluster, fault: Fault) -> String {
    let key = cluster_key();
    let old = c.master_of(&key);
    match fault {
        Fault::MasterKill => c.nodes[old].kill(),
        Fault::MasterPause => c.nodes[old].pause(),
        _ => unreachable!(),
    }
    let start = Instant::now();
    let took_over = wait_for(Duration::from_secs(30), || {
        c.try_master_of_without(&key, old).is_some_and(|m| m != old)
            && (fault == Fault::MasterPause || c.healthy())
    });
    let failover = start.elapsed();
    match fault {
        Fault::MasterKill => c.nodes[old].restart(),
        _ => c.nodes[old].resume(),
    }
    let synced = wait_for(Duration::from_secs(30), || {
        c.replica_synced(old) && c.healthy()
    });
    let what = if fault == Fault::MasterKill {
        "killed"
    } else {
        "paused"
    };
    format!(
        "master {old} {what}, replica took over {took_over} after {} ms, old master back as \
         a synced replica {synced} after {} ms",
        failover.as_millis(),
        start.elapsed().as_millis()
    )
}

/// SIGSTOP a node that is in every client's seed list and masters other slots than the
/// checked name's (the first such in the list), for less than the node timeout: the cluster
/// stays up and serves the name, so a process started meanwhile must ask the other seeds and
/// go on (a run that exits 69 then counts in early-69).
pub(crate) fn seed_freeze(c: &mut RedisCluster) -> String {
    let owner = c.master_of(&cluster_key());
    let Some(seed) = (0..c.nodes.len()).find(|&i| i != owner && c.is_master(i)) else {
        return "no other master to freeze".to_string();
    };
    c.nodes[seed].pause();
    std::thread::sleep(SEED_FROZEN);
    c.nodes[seed].resume();
    format!(
        "seed {seed} (a master of other slots) frozen for {} ms",
        SEED_FROZEN.as_millis()
    )
}

/// Below the fixture's 1 s cluster node timeout, so that no failover starts.
const SEED_FROZEN: Duration = Duration::from_millis(700);
