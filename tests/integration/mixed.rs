//! `multilock` with read and write locks together (`--shared NAME`), through the command line
//! on each store: the opposite-pairs scenario of Cages' ZkMultiLock finishes, readers of one
//! name share it while its writer waits, and a holder killed mid-acquire never leaves its
//! names partly held. The grant rule itself is in the conformance suite
//! (`mixed_modes_in_one_grant`).

use std::process::Child;
use std::time::Duration;

use crate::common::dynamodb::DynamoServer;
use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::nats::NatsServer;
use crate::common::postgres::PgServer;
use crate::common::redis::RedisServer;
use crate::common::zk::ZkServer;
use crate::common::*;

/// How a multi-name grant is written: in one atomic operation (DynamoDB's TransactWriteItems,
/// NATS's atomic batch), or in parts (a quorum asks its stores one after the other).
#[derive(Clone, Copy, PartialEq)]
enum Grant {
    Atomic,
    InParts,
}

/// Everything here, on one store.
fn mixed_multilock(env: &Env) {
    mixed_multilock_granted(env, Grant::Atomic)
}

fn mixed_multilock_granted(env: &Env, grant: Grant) {
    opposite_pairs_finish(env);
    readers_share_while_the_writer_waits(env);
    never_partly_held_after_a_kill(env, grant);
    the_child_learns_each_fence(env);
}

/// Two loops of 100 rounds, one taking R(p1)+W(p2) and the other R(p2)+W(p1): each conflicts
/// with the other on both names, so they must neither deadlock nor overlap.
fn opposite_pairs_finish(env: &Env) {
    let log = env.path("pairs.log");
    let section = critical_section(&log, 0);
    let looping = |write: &str, read: &str| -> Child {
        let dlock = env!("CARGO_BIN_EXE_dlock");
        let script = format!(
            "i=0; while [ $i -lt 100 ]; do \"{dlock}\" $STORES multilock {write} --shared {read} \
             -w 60s -- sh -c \"$SECTION\" || exit 1; i=$((i+1)); done"
        );
        env.shell(&script).env("SECTION", &section).spawn().unwrap()
    };
    let mut a = looping("p2", "p1");
    let mut b = looping("p1", "p2");
    let sa = wait_child(&mut a, Duration::from_secs(180)).expect("R(p1)+W(p2) deadlocked");
    let sb = wait_child(&mut b, Duration::from_secs(180)).expect("R(p2)+W(p1) deadlocked");
    assert!(sa.success() && sb.success(), "{sa:?} {sb:?}");
    // Every section alone: the two pairs exclude each other on both names. The fences are
    // those of two names, so only the order of entries and exits is checked here.
    let log = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 400, "{log}");
    for pair in lines.chunks(2) {
        assert!(
            pair[0].starts_with("enter") && pair[1].starts_with("exit"),
            "two holders at once:\n{log}"
        );
    }
    for n in ["p1", "p2"] {
        assert_eq!(env.inspect(n)["held"], false, "{n} left held");
    }
}

/// Two readers of `r1` hold it at once (each with a lock of its own beside it) while a writer
/// of `r1` waits; the writer enters when both are gone.
fn readers_share_while_the_writer_waits(env: &Env) {
    let dir = env.path("readers");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let reader = |own: &str| {
        env.spawn(&[
            "multilock",
            own,
            "--shared",
            "r1",
            "--",
            "sh",
            "-c",
            &format!("touch {d}/{own}; while [ ! -e {d}/go ]; do sleep 0.02; done"),
        ])
    };
    let (r1, r2) = (reader("own-a"), reader("own-b"));
    let both_in = wait_for(Duration::from_secs(30), || {
        dir.join("own-a").exists() && dir.join("own-b").exists()
    });
    assert!(both_in, "the two readers of r1 did not hold it at once");
    let st = env.inspect("r1");
    let holders = st["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{st}");
    assert!(holders.iter().all(|h| h["mode"] == "shared"), "{st}");
    let writer = env.spawn(&[
        "multilock",
        "r1",
        "-w",
        "60s",
        "--",
        "sh",
        "-c",
        &format!("touch {d}/writer"),
    ]);
    // The writer queues (the one waiter): the store answered it busy rather than let it in.
    let id = writer.id();
    assert!(
        wait_for(Duration::from_secs(30), || env.waiters("r1") == 1
            || dir.join("writer").exists()
            || !running(id)),
        "the writer never queued"
    );
    assert!(
        !dir.join("writer").exists(),
        "the writer entered past two readers"
    );
    assert!(running(id), "the writer gave up");
    std::fs::write(dir.join("go"), "").unwrap();
    for c in [r1, r2, writer] {
        assert_code(&finish(c, Duration::from_secs(60)), 0);
    }
    assert!(dir.join("writer").exists(), "the writer never entered");
}

/// A mixed multilock SIGKILLed at some moment of its acquire (while it connects, sends its
/// grant, or waits queued behind a writer) holds either all of its names or none, as
/// `inspect` shows each name; and once its lease has run out, both are free. A grant written
/// in parts (a quorum's stores one after the other) may leave one part held by a kill between
/// two writes: by nobody alive, and only until the lease's ttl (checked below as on every
/// store). NATS writes a grant's records as one atomic batch: store_nats_batch kills it
/// between two of them.
fn never_partly_held_after_a_kill(env: &Env, grant: Grant) {
    let blocker = stdout(&env.run(&["lock", "k-w-blocked", "--ttl", "60s"]));
    for round in 0..16u64 {
        let (w, r) = match round % 2 {
            0 => (format!("k-w-{round}"), format!("k-r-{round}")),
            // Queued behind the blocker's write lock on the shared name.
            _ => (format!("k-w-{round}"), "k-w-blocked".to_string()),
        };
        let mut c = env.spawn(&[
            "multilock",
            &w,
            "--shared",
            &r,
            "--ttl",
            "10s",
            "-w",
            "60s",
            "--",
            "sleep",
            "30",
        ]);
        std::thread::sleep(Duration::from_millis(3 * round));
        let watchdog = children_of(c.id());
        signal(c.id(), libc::SIGKILL);
        let _ = c.wait();
        // A watchdog that had started the command releases the lease once its tree is gone:
        // look only once it is done (its two names are released together, but read here
        // one after the other).
        assert!(
            wait_for(Duration::from_secs(10), || watchdog
                .iter()
                .all(|&p| !running(p))),
            "round {round}: the watchdog did not finish"
        );
        let owners = |name: &str| -> Vec<String> {
            let st = env.inspect(name);
            let mut o: Vec<String> = st["holders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["owner"].as_str().unwrap().to_string())
                .collect();
            o.sort();
            o
        };
        // The two names are read one after the other. What the killed process had already
        // sent may land between the reads (a busy server writes a batch tens of ms after it
        // came), and so may the release of a watchdog forked after `children_of` looked:
        // each changes both names at once, so a pair that differs is read again. A grant
        // left in part would stay so for the lease's 10 s.
        let read = || (owners(&w), owners(&r));
        let (mut ow, mut or) = read();
        if round % 2 == 1 {
            // It never got past the blocker, so it holds nothing, not even the free name.
            assert!(ow.is_empty(), "round {round}: {w} held without {r}: {ow:?}");
            assert_eq!(or, [dlock::names::owner_id(&blocker)], "round {round}: {r}");
        } else if grant == Grant::Atomic {
            for _ in 0..5 {
                if ow == or {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                (ow, or) = read();
            }
            assert_eq!(ow, or, "round {round}: {w} and {r} partly held");
        }
    }
    assert_code(&env.run(&["unlock", "k-w-blocked", "--token", &blocker]), 0);
    // Whatever the kills left, it runs out with its ttl: a writer of every name gets in.
    for round in 0..16u64 {
        let o = env.run(&[
            "multilock",
            &format!("k-w-{round}"),
            "-w",
            "20s",
            "--",
            "true",
        ]);
        assert_code(&o, 0);
    }
    let o = env.run(&["multilock", "k-w-blocked", "-w", "20s", "--", "true"]);
    assert_code(&o, 0);
}

/// The child gets `DLOCK_FENCES` (name=fence for every name, canonical order), and the
/// fences are those `inspect` reports for each name in its own mode.
fn the_child_learns_each_fence(env: &Env) {
    let o = env.run(&[
        "multilock",
        "f-b",
        "--shared",
        "f-a",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_FENCES; echo $DLOCK_NAME",
    ]);
    assert_code(&o, 0);
    let out = stdout(&o);
    let mut lines = out.lines();
    let fences = lines.next().unwrap();
    assert_eq!(lines.next(), Some("f-a f-b"));
    let pairs: Vec<(&str, u64)> = fences
        .split(',')
        .map(|p| {
            let (n, f) = p.rsplit_once('=').expect("name=fence");
            (n, f.parse().expect("a number"))
        })
        .collect();
    assert_eq!(
        pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        ["f-a", "f-b"]
    );
    for (name, fence) in pairs {
        assert_eq!(env.inspect(name)["fence"], fence, "{name}");
    }
}

#[test]
fn mixed_multilock_on_the_file_store() {
    mixed_multilock(&Env::file());
}

#[test]
fn mixed_multilock_on_redis() {
    let server = RedisServer::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

#[test]
fn mixed_multilock_on_etcd() {
    let server = EtcdServer::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

#[test]
fn mixed_multilock_on_zookeeper() {
    let server = ZkServer::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

#[test]
fn mixed_multilock_on_postgres() {
    let server = PgServer::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

#[test]
fn mixed_multilock_on_mariadb() {
    let server = MariaDb::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

#[test]
fn mixed_multilock_on_nats() {
    let server = NatsServer::start();
    mixed_multilock(&Env::with_stores(vec![server.url()]));
}

/// DynamoDB writes a multi-name grant as one TransactWriteItems: all or none, even killed.
/// (Its waiters poll and keep no row, so the readers' test, which watches the writer queue,
/// does not apply.)
#[test]
fn mixed_multilock_on_dynamodb() {
    let server = DynamoServer::start();
    let env = Env::with_stores(vec![server.url()]);
    opposite_pairs_finish(&env);
    never_partly_held_after_a_kill(&env, Grant::Atomic);
    the_child_learns_each_fence(&env);
}

/// A quorum mixing NATS with Redis: each grant is a majority of two kinds of store.
#[test]
fn mixed_multilock_on_a_quorum_of_nats_and_redis() {
    let (a, b, redis) = (
        NatsServer::start(),
        NatsServer::start(),
        RedisServer::start(),
    );
    let env = Env::with_stores(vec![a.url(), redis.url(), b.url()]);
    mixed_multilock_granted(&env, Grant::InParts);
}

/// Across Redis Cluster slots and over a quorum the grant is not one operation: canonical
/// order and all or none with back-off keep the opposite pairs from deadlocking there too.
#[test]
fn opposite_pairs_finish_on_a_cluster_and_a_quorum() {
    let cluster = crate::common::redis::RedisCluster::start(3, 0);
    opposite_pairs_finish(&Env::with_stores(vec![cluster.url()]));
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    opposite_pairs_finish(&Env::with_stores(servers.iter().map(|s| s.url()).collect()));
}

/// A name given both ways is a usage error, and taking nothing.
#[test]
fn a_name_both_exclusive_and_shared_is_refused() {
    let env = Env::file();
    let o = env.run(&["multilock", "a", "b", "--shared", "a", "--", "true"]);
    assert_code(&o, 64);
    assert!(
        stderr(&o).contains("both exclusive and --shared"),
        "{}",
        stderr(&o)
    );
    assert_eq!(env.inspect("b")["held"], false);
    // Only shared names is a whole request.
    assert_code(&env.run(&["multilock", "--shared", "a", "--", "true"]), 0);
}
