//! `dlock doctor` on a server's connection limit and on its first run (issue 41): it reads
//! the limit where the server tells it and says how many waiters can hold their connections
//! at once; and a marker it has only just written is "written now", never "present".

use super::doctor::{json_doctor, line};
use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::postgres::PgServer;
use crate::common::redis::RedisServer;
use crate::common::zk::ZkServer;
use crate::common::*;

/// Run doctor twice on a fresh store: the first run wrote the marker, the second finds it.
/// Returns the first run's text report.
fn first_then_second(url: &str) -> String {
    let env = Env::with_stores(vec![url.to_string()]);
    let first = env.run(&["doctor"]);
    let out = stdout(&first);
    assert!(
        line(&out, "marker").contains("written now"),
        "first run: {out}{}",
        stderr(&first)
    );
    let again = stdout(&env.run(&["doctor"]));
    assert!(line(&again, "marker").contains("present"), "{again}");
    out
}

#[test]
fn postgres_max_connections_less_the_reserved_and_the_first_marker() {
    let pg = PgServer::start_with(&["max_connections=30"]);
    let out = first_then_second(&pg.url());
    let conns = line(&out, "connections");
    assert!(
        conns.contains("max_connections 30, 3 of them reserved for superusers"),
        "{out}"
    );
    assert!(conns.contains("27 can wait at once"), "{out}");
    let (_, v) = json_doctor(vec![pg.url()]);
    let c = &v["stores"][0]["connections"];
    assert_eq!(c["setting"], "max_connections", "{v}");
    assert_eq!(c["limit"], 27, "{v}");
    assert_eq!(c["per_waiter"], 1, "{v}");
    assert_eq!(c["waiters"], 27, "{v}");
    assert_eq!(v["stores"][0]["memory"]["marker"], true, "{v}");
}

#[test]
fn mariadb_max_connections_and_the_first_marker() {
    let db = MariaDb::start_with(&["--max-connections=20"]);
    let out = first_then_second(&db.url());
    // A waiter holds two: its connection and its bell's.
    let conns = line(&out, "connections");
    assert!(conns.contains("max_connections 20"), "{out}");
    assert!(
        conns.contains("holds 2 connections, so 10 can wait"),
        "{out}"
    );
}

#[test]
fn zookeeper_max_client_cnxns_and_the_first_marker() {
    let zk = ZkServer::start_with(&["maxClientCnxns=20"]);
    let out = first_then_second(&zk.url());
    let conns = line(&out, "connections");
    assert!(conns.contains("maxClientCnxns 20 from this host"), "{out}");
    assert!(conns.contains("20 can wait at once"), "{out}");
}

#[test]
fn etcd_first_marker_is_written_now() {
    let etcd = EtcdServer::start();
    first_then_second(&etcd.url());
}

#[test]
fn redis_maxclients() {
    let redis = RedisServer::start_with(&["--maxclients", "20"]);
    let (code, v) = json_doctor(vec![redis.url()]);
    assert_eq!(code, 0, "{v}");
    let c = &v["stores"][0]["connections"];
    assert_eq!(c["setting"], "maxclients", "{v}");
    assert_eq!(c["limit"], 20, "{v}");
    assert_eq!(c["per_waiter"], 2, "{v}");
    assert_eq!(c["waiters"], 10, "{v}");
}
