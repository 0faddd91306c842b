//! Mutual exclusion through the command line, on every kind of store: eight concurrent
//! `dlock run`s never overlap and their fences rise in entry order. One test, run per store
//! URL (the store contract itself is in conformance.rs). And namespaces keep names apart.

use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::pgbouncer::PgBouncer;
use crate::common::postgres::PgServer;
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::zk::ZkServer;
use crate::common::*;

/// Eight `dlock run deploy` on these stores: no overlap, rising fences.
fn eight_runs_never_overlap(stores: Vec<String>) {
    let env = Env::with_stores(stores);
    let fences = check_exclusion(&env, "deploy", 8, &[]);
    assert_eq!(fences.len(), 8);
}

#[test]
fn on_the_file_store() {
    eight_runs_never_overlap(Vec::new());
}

#[test]
fn on_redis() {
    let redis = RedisServer::start();
    eight_runs_never_overlap(vec![redis.url()]);
}

#[test]
fn on_a_quorum_of_three_redis() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    eight_runs_never_overlap(servers.iter().map(|s| s.url()).collect());
}

#[test]
fn on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    eight_runs_never_overlap(vec![cluster.url()]);
}

#[test]
fn on_etcd() {
    let etcd = EtcdServer::start();
    eight_runs_never_overlap(vec![etcd.url()]);
}

#[test]
fn on_a_three_member_etcd_cluster() {
    let etcd = EtcdServer::cluster(3);
    eight_runs_never_overlap(vec![etcd.url()]);
}

#[test]
fn on_zookeeper() {
    let zk = ZkServer::start();
    eight_runs_never_overlap(vec![zk.url()]);
}

#[test]
fn on_a_three_member_zookeeper_ensemble() {
    let zk = ZkServer::ensemble(3);
    eight_runs_never_overlap(vec![zk.url()]);
}

/// On a fresh database: the eight first users also race to create dlock's tables.
#[test]
fn on_postgres() {
    let pg = PgServer::start();
    eight_runs_never_overlap(vec![pg.url()]);
}

/// Through PgBouncer in transaction mode: no session state, and the 8 waiters wake by
/// looking again rather than by NOTIFY.
#[test]
fn on_postgres_behind_pgbouncer() {
    let bouncer = PgBouncer::start();
    eight_runs_never_overlap(vec![bouncer.url()]);
}

#[test]
fn on_mariadb() {
    let db = MariaDb::start();
    eight_runs_never_overlap(vec![db.url()]);
}

#[test]
fn a_namespace_keeps_equal_names_apart() {
    let env = Env::file();
    let a = env.run(&["--namespace", "team-a", "lock", "job"]);
    assert_code(&a, 0);
    assert_code(&env.run(&["--namespace", "team-b", "lock", "job", "-n"]), 0);
    assert_code(
        &env.run(&["--namespace", "team-a", "lock", "job", "-n"]),
        75,
    );
}
