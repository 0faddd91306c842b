//! A store's own life, through the real binary against real servers restarted on the same port
//! and data: PostgreSQL and MariaDB down for seconds, an etcd member and a ZooKeeper server
//! restarted, leaders killed under looping clients, and a killed etcd waiter leaving the queue.
//! What a user notices: waiters with a budget are served after the store came back, holders
//! whose store kept their lease keep it, and no run exits 69 while it still had budget.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::postgres::PgServer;
use crate::common::zk::ZkServer;
use crate::common::*;

/// A holder (ttl 30s, 12 s of work) and three waiters queued with `-w 60s`; the store goes
/// down for 7 s (`down`, then `up`). The holder keeps its lease (its renewal after the restart
/// finds it on a new connection), every waiter is served after the restart, and no two
/// sections overlap.
fn waiters_ride_out_seven_seconds_down(env: &Env, down: impl FnOnce(), up: impl FnOnce()) {
    let log = env.path("job.log");
    let holder = env.spawn_run(&["job", "--ttl", "30s"], &critical_section(&log, 12_000));
    assert!(wait_for(Duration::from_secs(20), || env.held("job")));
    let queued: Vec<Child> = (0..3)
        .map(|_| {
            env.spawn_run(
                &["job", "--ttl", "30s", "-w", "60s"],
                &critical_section(&log, 100),
            )
        })
        .collect();
    assert!(wait_for(Duration::from_secs(20), || env.waiters("job") == 3));
    down();
    std::thread::sleep(Duration::from_secs(7));
    up();
    let o = finish(holder, Duration::from_secs(60));
    assert_code(&o, 0);
    for w in queued {
        let o = finish(w, Duration::from_secs(70));
        assert_code(&o, 0);
    }
    assert_sections(&std::fs::read_to_string(&log).unwrap(), 4);
}

/// A holder with a long ttl through fast restarts of its store, one after the other: no one
/// else gets in meanwhile, the holder ends normally, and the lease was still on the store to
/// release (the next holder is told `released`).
fn a_holder_keeps_its_lease_through_restarts(env: &Env, restarts: Vec<Box<dyn FnOnce() + '_>>) {
    let holder = env.spawn_run(&["keep", "--ttl", "30s"], "sleep 6; echo finished");
    assert!(wait_for(Duration::from_secs(20), || env.held("keep")));
    for restart in restarts {
        restart();
        let o = env.run(&["run", "keep", "-n", "--", "true"]);
        assert_ne!(code(&o), 0, "a second holder got in after a restart");
    }
    let o = finish(holder, Duration::from_secs(40));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "finished");
    assert_eq!(next_holder(env, "keep").previous, "released");
}

#[test]
fn postgres_down_seven_seconds_serves_every_waiter() {
    let pg = PgServer::start();
    let env = Env::with_stores(vec![pg.url()]);
    waiters_ride_out_seven_seconds_down(&env, || pg.shutdown("fast"), || pg.boot());
}

#[test]
fn mariadb_down_seven_seconds_serves_every_waiter() {
    let db = std::cell::RefCell::new(MariaDb::start());
    let env = Env::with_stores(vec![db.borrow().url()]);
    waiters_ride_out_seven_seconds_down(
        &env,
        || db.borrow_mut().shutdown(),
        || db.borrow_mut().boot(),
    );
}

#[test]
fn postgres_fast_and_immediate_restarts_keep_the_lease() {
    let pg = PgServer::start();
    let env = Env::with_stores(vec![pg.url()]);
    a_holder_keeps_its_lease_through_restarts(
        &env,
        vec![
            Box::new(|| {
                pg.shutdown("fast");
                pg.boot();
            }),
            Box::new(|| {
                pg.shutdown("immediate");
                pg.boot();
            }),
        ],
    );
}

#[test]
fn mariadb_restarts_keep_the_lease() {
    let db = std::cell::RefCell::new(MariaDb::start());
    let env = Env::with_stores(vec![db.borrow().url()]);
    a_holder_keeps_its_lease_through_restarts(
        &env,
        vec![
            Box::new(|| {
                db.borrow_mut().shutdown();
                db.borrow_mut().boot();
            }),
            Box::new(|| db.borrow_mut().restart()),
        ],
    );
}

/// A server killed and started again on its data after 7 s, longer than a store timeout and
/// than any fixed grace: the holder (ttl 20 s) keeps its lease, which the server kept, and
/// the waiter (`-w 40s`) is served after the restart.
fn a_server_restarted_after_seven_seconds(env: &Env, kill: impl FnOnce(), restart: impl FnOnce()) {
    let holder = env.spawn_run(&["m", "--ttl", "20s"], "sleep 12; echo finished");
    assert!(wait_for(Duration::from_secs(20), || env.held("m")));
    let waiter = env.spawn_run(&["m", "--ttl", "20s", "-w", "40s"], "echo served");
    assert!(wait_for(Duration::from_secs(20), || env.waiters("m") == 1));
    kill();
    std::thread::sleep(Duration::from_secs(7));
    restart();
    let o = finish(holder, Duration::from_secs(40));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "finished");
    let o = finish(waiter, Duration::from_secs(60));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "served");
}

#[test]
fn a_restarted_etcd_server_keeps_the_lease_and_serves_the_waiter() {
    let etcd = std::cell::RefCell::new(EtcdServer::start());
    let env = Env::with_stores(vec![etcd.borrow().url()]);
    a_server_restarted_after_seven_seconds(
        &env,
        || etcd.borrow_mut().kill(0),
        || {
            etcd.borrow_mut().restart(0);
            etcd.borrow().wait_healthy();
        },
    );
}

#[test]
fn a_restarted_zookeeper_server_keeps_the_lease_and_serves_the_waiter() {
    let zk = std::cell::RefCell::new(ZkServer::start());
    let env = Env::with_stores(vec![zk.borrow().url()]);
    a_server_restarted_after_seven_seconds(
        &env,
        || zk.borrow_mut().kill(0),
        || zk.borrow_mut().restart(0),
    );
}

/// A waiter killed while queued on etcd leaves `inspect` within its ttl and a second (the
/// entries' lease is the run's ttl, not a fixed 5 s). Measured from the kill, so the bound
/// is the ttl plus etcd's expiry check plus one `inspect`.
#[test]
fn a_killed_etcd_waiter_is_gone_within_its_ttl() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let ttl = Duration::from_secs(3);
    let mut holder = env.spawn_run(&["q", "--ttl", "3s"], "sleep 30");
    assert!(wait_for(Duration::from_secs(10), || env.held("q")));
    let dead = env.spawn_run(&["q", "--ttl", "3s"], "true");
    assert!(wait_for(Duration::from_secs(10), || env.waiters("q") == 1));
    signal(dead.id(), libc::SIGKILL);
    let t0 = Instant::now();
    let gone = wait_for(ttl + Duration::from_secs(1), || env.waiters("q") == 0);
    let took = t0.elapsed();
    signal(holder.id(), libc::SIGTERM);
    let _ = wait_child(&mut holder, Duration::from_secs(10));
    finish(dead, Duration::from_secs(1));
    assert!(
        gone,
        "the killed waiter was still listed {took:?} after its kill"
    );
}

/// Six clients loop on `run -w 30s --ttl 3s` for a while; the leader is killed early on. No
/// run exits 69, no two sections overlap, and the longest stall (from one section's exit to
/// the next one's entry) is printed: it is at most the orphaned grant's ttl plus the
/// election, far under the runs' budget.
fn leader_kill_under_load(env: &Env, kill_leader: impl FnOnce()) -> Duration {
    let dlock = env!("CARGO_BIN_EXE_dlock");
    let log = env.path("lk.log");
    let codes = env.path("codes");
    let section = format!(
        "echo \"enter $DLOCK_FENCE $(date +%s.%N)\" >> {log}; sleep 0.05; \
         echo \"exit $DLOCK_FENCE $(date +%s.%N)\" >> {log}",
        log = log.display()
    );
    let script = format!(
        "end=$(($(date +%s) + 16)); while [ $(date +%s) -lt $end ]; do \
         \"{dlock}\" $STORES run lk -w 30s --ttl 3s -- sh -c \"$SECTION\" 2>>{err}; \
         echo $? >> {codes}; done",
        err = env.path("err").display(),
        codes = codes.display()
    );
    let mut clients: Vec<Child> = (0..6)
        .map(|_| {
            env.shell(&script)
                .env("SECTION", &section)
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Early on, once the clients take turns.
    assert!(
        wait_for(Duration::from_secs(20), || read(&log)
            .lines()
            .filter(|l| l.starts_with("enter"))
            .count()
            >= 6),
        "the clients did not get going"
    );
    kill_leader();
    for c in &mut clients {
        wait_child(c, Duration::from_secs(90)).expect("a looping client hung");
    }
    let codes = std::fs::read_to_string(&codes).unwrap();
    let unavailable = codes.lines().filter(|c| c.trim() == "69").count();
    let errors = std::fs::read_to_string(env.path("err")).unwrap_or_default();
    assert_eq!(
        unavailable,
        0,
        "runs exited 69:\n{errors}\n{log_text}",
        log_text = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    );
    assert!(
        codes.lines().all(|c| c.trim() == "0"),
        "codes: {codes}\n{errors}"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    let mut longest = Duration::ZERO;
    let mut last_exit: Option<f64> = None;
    let lines: Vec<&str> = log.lines().collect();
    for pair in lines.chunks(2) {
        assert!(
            pair.len() == 2 && pair[0].starts_with("enter") && pair[1].starts_with("exit"),
            "two holders at once:\n{log}"
        );
        let at = |l: &str| l.split_whitespace().nth(2).unwrap().parse::<f64>().unwrap();
        if let Some(e) = last_exit {
            longest = longest.max(Duration::from_secs_f64((at(pair[0]) - e).max(0.0)));
        }
        last_exit = Some(at(pair[1]));
    }
    eprintln!(
        "{} runs, 0 exits 69, longest stall {longest:?}",
        lines.len() / 2
    );
    longest
}

#[test]
fn etcd_leader_kill_under_six_looping_clients() {
    let mut etcd = EtcdServer::cluster(3);
    let env = Env::with_stores(vec![etcd.url()]);
    let leader = etcd.leader();
    let stall = leader_kill_under_load(&env, || etcd.kill(leader));
    // The orphaned grant's ttl (3 s) plus an election, with room for a loaded machine.
    assert!(stall < Duration::from_secs(20), "stalled {stall:?}");
}

#[test]
fn zookeeper_leader_kill_under_six_looping_clients() {
    let mut zk = ZkServer::ensemble(3);
    let env = Env::with_stores(vec![zk.url()]);
    let leader = zk.leader().expect("a leader");
    let stall = leader_kill_under_load(&env, || zk.kill(leader));
    assert!(stall < Duration::from_secs(20), "stalled {stall:?}");
}

/// A ZooKeeper waiter frozen (SIGSTOP) past its session timeout: its session expires with its
/// queue entry. Woken again, it makes a new session, queues again at the back, and is served
/// once the holder is done, within its budget.
#[test]
fn a_zookeeper_waiter_whose_session_expired_queues_again() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let holder = env.spawn_run(&["s", "--ttl", "20s"], "sleep 10; echo finished");
    assert!(wait_for(Duration::from_secs(20), || env.held("s")));
    let waiter = env.spawn_run(&["s", "--ttl", "2s", "-w", "60s"], "echo served");
    assert!(wait_for(Duration::from_secs(20), || env.waiters("s") == 1));
    signal(waiter.id(), libc::SIGSTOP);
    // The session (2 s) expires, and with it the queue entry.
    assert!(wait_for(Duration::from_secs(20), || env.waiters("s") == 0));
    signal(waiter.id(), libc::SIGCONT);
    let o = finish(holder, Duration::from_secs(40));
    assert_code(&o, 0);
    let o = finish(waiter, Duration::from_secs(60));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "served");
}

/// An etcd server that comes back without its data has forgotten the holder's lease: the
/// holder learns it at its first renewal after the restart and stops its command (exit 70),
/// before its own deadline would have: its last renewal was at most a renewal period (ttl/3)
/// before the restart, so its deadline less the kill grace (1 s) lies at least 2/3 of the ttl
/// less a second after it, where the next renewal comes about a third of the ttl after it.
#[test]
fn an_etcd_server_back_without_the_lease_stops_the_holder_at_the_next_renewal() {
    let mut etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let ttl = Duration::from_secs(30);
    let holder = env.spawn_run(&["gone", "--ttl", "30s", "--kill-grace", "1s"], "sleep 120");
    assert!(wait_for(Duration::from_secs(20), || env.held("gone")));
    etcd.restart_empty(0);
    etcd.wait_healthy();
    let t0 = Instant::now();
    let o = finish(holder, Duration::from_secs(60));
    assert_code(&o, 70);
    // Stopped by the store's answer (within a renewal period), not by the old deadline.
    assert!(
        t0.elapsed() < ttl * 2 / 3 - Duration::from_secs(1),
        "stopped {:?} after the restart: {}",
        t0.elapsed(),
        stderr(&o)
    );
}
