//! Redis Cluster (`redis+cluster://`) and `?wait_replicas`: a master killed mid-run never lets
//! two holders in, replicas confirm grants, and a cluster joins a quorum. The store contract
//! across masters is in conformance.rs.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::*;

/// A run holds a lock on a master that is killed; its replica takes over. Contenders keep
/// trying meanwhile. The run either keeps its lease (exit 0) or is stopped (exit 70), and the
/// critical-section log shows no two holders at once.
#[test]
fn killing_a_master_mid_run_never_lets_two_holders_in() {
    let mut cluster = RedisCluster::start(3, 1);
    // No ?wait_replicas here: the promoted replica has no replica of its own left, so with it
    // nobody could take the lock after the failover (by design).
    let env = Env::with_stores(vec![cluster.url()]);
    let log = env.path("sections.log");
    let spawn = |hold_ms: u64, wait: &str| -> Child {
        let mut c = env.cmd();
        let errors = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env.path("err.log"))
            .unwrap();
        c.args([
            "-v",
            "run",
            "deploy",
            "--ttl",
            "3s",
            "-w",
            wait,
            "--",
            "sh",
            "-c",
            &critical_section(&log, hold_ms),
        ])
        .stdout(Stdio::null())
        .stderr(errors);
        c.spawn().unwrap()
    };
    let mut holder = spawn(4000, "10s");
    assert!(wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("enter"))
    }));
    let contenders: Vec<Child> = (0..3).map(|_| spawn(100, "30s")).collect();
    assert!(
        wait_for(Duration::from_secs(10), || env.waiters("deploy") == 3),
        "the contenders never queued"
    );
    let master = cluster.master_of("dlock:{default:deploy}:h");
    cluster.nodes[master].kill();
    let status = wait_child(&mut holder, Duration::from_secs(30)).expect("holder exits");
    assert!(
        matches!(status.code(), Some(0) | Some(70)),
        "holder exited {status:?}"
    );
    let mut finished = 0;
    for mut c in contenders {
        if let Some(s) = wait_child(&mut c, Duration::from_secs(60)) {
            finished += s.success() as usize;
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let sections = text.lines().filter(|l| l.starts_with("enter")).count();
    assert_sections(&text, sections);
    assert!(
        finished >= 1,
        "no contender got the lock after the failover:\n{text}\n{}",
        std::fs::read_to_string(env.path("err.log")).unwrap()
    );
}

#[test]
fn wait_replicas_withdraws_a_grant_no_replica_confirmed() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![format!("{}?wait_replicas=1", redis.url())]);
    // The server answered at connect: the wait rides the failures out, then says why.
    let o = env.run(&["lock", "x", "--ttl", "2s", "-w", "1s"]);
    assert_code(&o, 69);
    assert!(stderr(&o).contains("replica"), "{}", stderr(&o));
    // Nothing was left granted.
    let plain = Env::with_stores(vec![redis.url()]);
    assert_code(&plain.run(&["lock", "x", "-n"]), 0);
    // A bad value is a usage error.
    let bad = Env::with_stores(vec![format!("{}?wait_replicas=lots", redis.url())]);
    assert_code(&bad.run(&["lock", "x"]), 64);
}

#[test]
fn a_mixed_quorum_of_servers_and_a_cluster_grants() {
    let cluster = RedisCluster::start(3, 0);
    let a = RedisServer::start();
    let b = RedisServer::start();
    let env = Env::with_stores(vec![a.url(), b.url(), cluster.url()]);
    check_exclusion(&env, "mixed", 6, &[]);
}

/// `?nat_map`: a client told to reach every node at another address (here a fault proxy per
/// node) goes there for every node the cluster announces, not only for its seed. Once its
/// proxies stop forwarding, it cannot renew: its child is stopped (exit 70) within the ttl,
/// while a client with the plain URL takes the lock.
#[test]
fn nat_map_reaches_every_announced_node_at_its_mapped_address() {
    use crate::common::proxy::{Mode, Proxy};
    let cluster = RedisCluster::start(3, 0);
    let proxies: Vec<Proxy> = cluster
        .nodes
        .iter()
        .map(|n| Proxy::to_port(n.port))
        .collect();
    let map: Vec<String> = cluster
        .nodes
        .iter()
        .zip(&proxies)
        .map(|(n, p)| format!("127.0.0.1:{}={}", n.port, p.addr()))
        .collect();
    // One proxy as the seed: every other node is known only from what the cluster announces.
    let mapped = Env::with_stores(vec![format!(
        "redis+cluster://{}?nat_map={}",
        proxies[0].addr(),
        map.join(",")
    )]);
    let plain = Env::with_stores(vec![cluster.url()]);
    let log = mapped.path("sections.log");
    let mut holder = mapped.cmd();
    holder
        .args(["run", "deploy", "--ttl", "2s", "--", "sh", "-c"])
        .arg(critical_section(&log, 8000))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut holder = holder.spawn().unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("enter"))
    }));
    proxies.iter().for_each(|p| p.set(Mode::Blackhole));
    let status = wait_child(&mut holder, Duration::from_secs(6)).expect("the holder stops");
    assert_eq!(status.code(), Some(70), "the cut-off holder ran on");
    let o = plain.run(&["lock", "deploy", "-w", "5s", "--ttl", "2s"]);
    assert_code(&o, 0);
}
