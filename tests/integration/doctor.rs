//! `dlock doctor` against real stores: what it finds, its summary and its exit codes
//! (0 healthy, 1 a guarantee void, 69 unreachable, 77 refused), as text and as JSON.

use crate::common::etcd::EtcdServer;
use crate::common::redis::RedisServer;
use crate::common::zk::ZkServer;
use crate::common::*;

fn doctor(stores: Vec<String>, extra: &[&str]) -> std::process::Output {
    let env = Env::with_stores(stores);
    let mut args = vec!["doctor"];
    args.extend_from_slice(extra);
    env.run(&args)
}

pub(crate) fn json_doctor(stores: Vec<String>) -> (i32, serde_json::Value) {
    let o = Env::with_stores(stores).run(&["--json", "doctor"]);
    let v = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    (code(&o), v)
}

/// The one finding of a kind under the store's entry, as the text report prints it.
pub(crate) fn line<'a>(out: &'a str, check: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no {check} line in:\n{out}"))
}

#[test]
fn a_persistent_single_redis_is_healthy() {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let o = doctor(vec![redis.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with(&redis.url()), "{out}");
    assert!(
        line(&out, "reachable").contains("answered a read in"),
        "{out}"
    );
    assert!(line(&out, "version").contains("Redis 7"), "{out}");
    assert!(line(&out, "clock").contains("this host's"), "{out}");
    assert!(
        line(&out, "persistence").contains("appendfsync always"),
        "{out}"
    );
    assert!(out.contains("took and released a `run` lease"), "{out}");
    assert!(out.contains("took and released a `lock` lease"), "{out}");
    assert!(
        out.contains("quorum: 1 of 1 store(s) usable, 1 needed"),
        "{out}"
    );
    assert!(out.ends_with("verdict: healthy"), "{out}");
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // The scratch lease was released: nothing is left held.
    assert!(listed(&Env::with_stores(vec![redis.url()]), "").is_empty());
}

#[test]
fn a_single_redis_without_persistence_is_a_warning_not_a_void() {
    let redis = RedisServer::start();
    let o = doctor(vec![redis.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(line(&out, "persistence").starts_with("  warn"), "{out}");
}

#[test]
fn a_quorum_member_without_persistence_is_kept_out_by_the_engine() {
    let a = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let b = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let c = RedisServer::start();
    let env = Env::with_stores(vec![a.url(), b.url(), c.url()]);
    assert_code(&env.run(&["lock", "held", "--ttl", "60s"]), 0);
    let o = env.run(&["doctor"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(!out.contains("VOID"), "{out}");
    assert!(!out.contains("amnesia"), "one member of three: {out}");
    // The member without persistence would abstain for the lease the others hold.
    let restart: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("restart"))
        .collect();
    assert_eq!(restart.len(), 3, "{out}");
    assert!(restart[2].contains("abstain for up to"), "{out}");
    assert!(restart[0].contains("keeps its data"), "{out}");
    assert!(line(&out, "horizon").contains("run on for up to"), "{out}");
    assert!(
        out.contains("quorum: 3 of 3 store(s) usable, 2 needed"),
        "{out}"
    );
    // The marker doctor left is there on its next run.
    let again = stdout(&env.run(&["doctor"]));
    assert!(line(&again, "marker").contains("present"), "{again}");
}

#[test]
fn a_majority_that_can_forget_is_warned_about() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let c = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let o = doctor(vec![a.url(), b.url(), c.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("2 of 3 stores can lose their data on a restart"),
        "{out}"
    );
    assert!(line(&out, "uptime").contains("run_id"), "{out}");
}

#[test]
fn an_unreachable_store_gives_69() {
    let port = free_port();
    let o = doctor(vec![format!("redis://127.0.0.1:{port}")], &[]);
    assert_code(&o, 69);
    assert!(
        stdout(&o).contains("no lock can be taken"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("unreachable"), "{}", stderr(&o));
}

#[test]
fn one_store_down_of_three_is_69_but_the_majority_can_lock() {
    let a = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let b = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let down = format!("redis://127.0.0.1:{}", free_port());
    let o = doctor(vec![a.url(), b.url(), down], &[]);
    assert_code(&o, 69);
    assert!(
        stdout(&o).contains("2 of 3 store(s) usable, 2 needed: locks can be taken"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_wrong_password_gives_77() {
    let redis = RedisServer::start_with(&["--requirepass", "right"]);
    let o = doctor(
        vec![format!("redis://:wrong@127.0.0.1:{}", redis.port)],
        &[],
    );
    assert_code(&o, 77);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(line(&out, "refused").contains("VOID"), "{out}");
    assert!(
        !out.contains("wrong") && !err.contains("wrong"),
        "{out}{err}"
    );
}

#[test]
fn etcd_reports_its_version_and_leader() {
    let etcd = EtcdServer::start();
    let o = doctor(vec![etcd.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(line(&out, "version").contains("etcd 3."), "{out}");
    assert!(line(&out, "raft").contains("leader"), "{out}");
    assert!(out.contains("took and released a `lock` lease"), "{out}");
}

#[test]
fn zookeeper_reports_version_clock_and_session_bounds() {
    let zk = ZkServer::start();
    let o = doctor(vec![zk.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(line(&out, "version").contains("ZooKeeper 3."), "{out}");
    assert!(line(&out, "clock").contains("this host's"), "{out}");
    assert!(
        line(&out, "sessions").contains("admit the ttl 30s"),
        "{out}"
    );
    // The fixture caps sessions at 60 s: a 2 minute ttl cannot be a `run` lease.
    let o = doctor(vec![zk.url()], &["--ttl", "2m"]);
    assert!(
        line(&stdout(&o), "sessions").contains("at most 1m"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn zookeeper_without_extended_types_is_told_about_lock_leases() {
    let zk = ZkServer::start_with(&["extendedTypesEnabled=false"]);
    let o = doctor(vec![zk.url()], &[]);
    let out = stdout(&o);
    // `lock` can never work there: not healthy, and the same code `lock` itself ends with.
    assert_code(&o, 78);
    let verdict = out
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or("");
    assert!(verdict.contains("never work"), "{out}");
    assert!(out.contains("took and released a `run` lease"), "{out}");
    let lock = out
        .lines()
        .find(|l| l.contains("a `lock` lease:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(lock.contains("extendedTypesEnabled"), "{lock}");
}

#[test]
fn json_has_one_entry_per_store_with_its_findings() {
    let redis = RedisServer::start();
    let down = format!("redis://127.0.0.1:{}", free_port());
    let (code, v) = json_doctor(vec![redis.url(), down.clone()]);
    assert_eq!(code, 69, "{v}");
    assert_eq!(v["healthy"], false);
    assert_eq!(v["quorum"]["stores"], 2);
    assert_eq!(v["quorum"]["need"], 2);
    assert_eq!(v["quorum"]["usable"], 1);
    let stores = v["stores"].as_array().unwrap();
    assert_eq!(stores.len(), 2);
    let up = &stores[0];
    assert_eq!(up["store"], redis.url());
    assert_eq!(up["reachable"], true);
    assert!(up["rtt_ms"].as_f64().unwrap() >= 0.0);
    assert!(up["version"].as_str().unwrap().starts_with("Redis "));
    assert!(up["clock_offset_ms"].is_i64());
    for f in up["findings"].as_array().unwrap() {
        assert!(f["check"].is_string() && f["text"].is_string(), "{f}");
        assert!(
            ["ok", "note", "warn", "void"].contains(&f["severity"].as_str().unwrap()),
            "{f}"
        );
    }
    assert_eq!(stores[1]["store"], down);
    assert_eq!(stores[1]["reachable"], false);
    assert!(stores[1]["rtt_ms"].is_null());
    assert_eq!(stores[1]["findings"][0]["severity"], "void");
    let (code, v) = json_doctor(vec![redis.url()]);
    assert_eq!((code, &v["healthy"]), (0, &serde_json::json!(true)), "{v}");
}

#[test]
fn the_file_store_says_what_it_covers_and_leaves_one_record_per_host() {
    let env = Env::file();
    let o = env.run(&["doctor"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(line(&out, "scope").contains("this host only"), "{out}");
    assert!(line(&out, "persistence").contains("file system"), "{out}");
    assert!(line(&out, "host").contains("bound to this host"), "{out}");
    assert!(line(&out, "files").contains("file(s) in"), "{out}");
    assert!(line(&out, "space").starts_with("  ok"), "{out}");
    assert!(line(&out, "space").contains("KiB free of"), "{out}");
    assert_code(&env.run(&["doctor"]), 0);
    let dir = env.dir.path().join("runtime/dlock/default");
    let records = std::fs::read_dir(&dir).map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().contains("doctor"))
        })
        .count()
    });
    assert!(records <= 1, "{records} records in {}", dir.display());
}

#[test]
fn a_redis_cluster_reports_its_version_and_every_masters_persistence() {
    let cluster = crate::common::redis::RedisCluster::start(3, 0);
    let o = doctor(vec![cluster.url()], &[]);
    let out = stdout(&o);
    assert_code(&o, 0);
    assert!(line(&out, "version").contains("Redis 7"), "{out}");
    assert!(line(&out, "clock").contains("this host's"), "{out}");
    // The fixture's nodes run without appendonly: a warning for a lone store.
    assert!(line(&out, "persistence").contains("appendonly no"), "{out}");
    assert!(out.contains("took and released a `run` lease"), "{out}");
}

#[test]
fn sql_stores_report_version_clock_and_durability() {
    let pg = crate::common::postgres::PgServer::start_with(&["fsync=on"]);
    let my = crate::common::mysql::MariaDb::start_with(&["--innodb-flush-log-at-trx-commit=1"]);
    let o = doctor(vec![pg.url(), my.url()], &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("PostgreSQL 15"), "{out}");
    assert!(out.contains("MariaDB"), "{out}");
    assert_eq!(out.matches("every commit is flushed").count(), 2, "{out}");
    // The test fixture's own server runs with fsync off: in a quorum that voids the fences.
    let lossy = crate::common::postgres::PgServer::start();
    let o = doctor(vec![lossy.url(), my.url(), pg.url()], &[]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("VOID  persistence  fsync is off"), "{out}");
}
