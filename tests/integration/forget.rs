//! Stores that forget: Redis servers restarted without their data, alone and in a quorum of
//! three; in quorums of three, NATS servers restarted empty and S3 buckets and DynamoDB tables
//! deleted and made again. Fences never go back, and members that forgot never give a second holder a majority
//! while the first one's section runs (`engine::amnesia`).

use std::sync::Arc;
use std::time::Duration;

use crate::common::dynamodb::DynamoServer;
use crate::common::nats::NatsServer;
use crate::common::redis::RedisServer;
use crate::common::s3::S3Server;
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A quorum of three members of one kind of store, and how to make member `i` forget
/// everything it holds (a server restarted empty, a bucket or table deleted and created
/// again); whatever runs the members lives in `forget` and stops when it is dropped.
struct Members {
    urls: Vec<String>,
    forget: Box<dyn FnMut(usize)>,
}

fn redis(restart: fn(&mut RedisServer), start: fn() -> RedisServer) -> Members {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| start()).collect();
    Members {
        urls: servers.iter().map(|s| s.url()).collect(),
        forget: Box::new(move |i| restart(&mut servers[i])),
    }
}

/// A's section: it writes its pid and fence, then sleeps 8 s as the process dlock watches.
const A_SECTION: &str = "echo $DLOCK_FENCE > a.fence; echo $$ > a.pid; exec sleep 8";

/// B's section: says "overlap" if A's section is still running (alive and not a zombie),
/// then its fence and how it was told the lease before ended.
const B_SECTION: &str = "p=$(cat a.pid); s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); \
    if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo overlap; fi; \
    echo $DLOCK_FENCE $DLOCK_PREVIOUS";

/// How long a member may take to answer: the rule needs the member that remembers to have
/// its marker (written after it granted A) and to answer B's attempt. One that is silent for
/// longer than `--store-timeout` cannot be heard, and two members that forgot then look like a
/// first use (the limit RELIABILITY.md states). The default for a 5 s ttl is 500 ms, which a
/// DynamoDB Local on a machine under `stress-ng` has exceeded.
const PATIENCE: &str = "3s";

/// A holds (ttl 5 s, an 8 s section) on the members; two of them forget in turn, `spacing`
/// apart; then B runs with `-w 10s` and must not enter while A's section runs. Returns A
/// (still running or done), B's fence and how B was told the lease before ended.
fn forget_two_under_a_holder(
    members: &mut Members,
    spacing: Duration,
) -> (Env, std::process::Child, u64, String) {
    let env = Env::with_stores(members.urls.clone());
    let dir = env.path("").display().to_string();
    let a_section = format!("cd {dir}; {A_SECTION}");
    let mut a = env.spawn_run(
        &["job", "--ttl", "5s", "--store-timeout", PATIENCE],
        &a_section,
    );
    let ended = |a: &mut std::process::Child| a.try_wait().unwrap().is_some();
    wait_for(LIMIT, || env.path("a.pid").exists() || ended(&mut a));
    if !env.path("a.pid").exists() {
        let o = finish(a, LIMIT);
        panic!("A never entered: {:?} {}", o.status, stderr(&o));
    }
    (members.forget)(0);
    std::thread::sleep(spacing);
    (members.forget)(1);
    let b_section = format!("cd {dir}; {B_SECTION}");
    let b = env.run(&[
        "run",
        "job",
        "--ttl",
        "5s",
        "--store-timeout",
        PATIENCE,
        "-w",
        "10s",
        "--",
        "sh",
        "-c",
        &b_section,
    ]);
    assert_code(&b, 0);
    let said = stdout(&b);
    assert!(
        !said.contains("overlap"),
        "B entered while A's section ran: {said}"
    );
    let (b_fence, previous) = said.trim().split_once(' ').expect("fence and previous");
    let b_fence = b_fence.parse().unwrap();
    let previous = previous.to_string();
    (env, a, b_fence, previous)
}

/// Two of three members forget in turn, back to back and 2.5 s apart, under A: B's fence is
/// above A's, and it is told `expired`.
fn members_that_forgot_never_admit_a_second_holder(mut start: impl FnMut() -> Members) {
    for spacing in [Duration::ZERO, Duration::from_millis(2500)] {
        let mut members = start();
        let (env, mut a, b_fence, previous) = forget_two_under_a_holder(&mut members, spacing);
        let a_fence: u64 = std::fs::read_to_string(env.path("a.fence"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            b_fence > a_fence,
            "B's fence {b_fence} is not above A's {a_fence}"
        );
        assert_eq!(previous, "expired", "spacing {spacing:?}");
        let _ = wait_child(&mut a, LIMIT);
    }
}

/// Servers without persistence restarted empty.
#[test]
fn members_restarted_empty_never_admit_a_second_holder() {
    members_that_forgot_never_admit_a_second_holder(|| {
        redis(RedisServer::start_again_empty, RedisServer::start)
    });
}

/// NATS servers restarted with an empty store dir (the bucket made again, `?create=1`).
#[test]
fn nats_members_restarted_empty_never_admit_a_second_holder() {
    members_that_forgot_never_admit_a_second_holder(|| {
        let mut servers: Vec<NatsServer> = (0..3).map(|_| NatsServer::start()).collect();
        Members {
            urls: servers.iter().map(|s| s.url()).collect(),
            forget: Box::new(move |i| servers[i].start_again_empty()),
        }
    });
}

/// Three buckets of one S3 gateway, each deleted with its records behind dlock's back and
/// made again by the next client (`?create=1`).
#[test]
fn s3_members_deleted_never_admit_a_second_holder() {
    let server = Arc::new(S3Server::start());
    let mut round = 0;
    members_that_forgot_never_admit_a_second_holder(|| {
        round += 1;
        let bucket = move |i: usize| format!("forgets-{round}-{i}");
        let server = server.clone();
        Members {
            urls: (0..3)
                .map(|i| server.url_in(&bucket(i), "&create=1"))
                .collect(),
            forget: Box::new(move |i| server.delete(&format!("/buckets/{}", bucket(i)))),
        }
    });
}

/// Three tables of one DynamoDB Local, each deleted with its items behind dlock's back and
/// created again empty. (Made here, not by `?create=1`: a loaded DynamoDB Local may take
/// longer to create a table than a 5 s ttl leaves a store to answer.)
#[test]
fn dynamodb_members_deleted_never_admit_a_second_holder() {
    let server = Arc::new(DynamoServer::start());
    let mut round = 0;
    members_that_forgot_never_admit_a_second_holder(|| {
        round += 1;
        let table = move |i: usize| format!("forgets_{round}_{i}");
        let server = server.clone();
        (0..3).for_each(|i| server.create_table(&table(i)));
        Members {
            urls: (0..3).map(|i| server.url_in(&table(i), "")).collect(),
            forget: Box::new(move |i| {
                server.delete_table(&table(i));
                server.create_table(&table(i));
            }),
        }
    });
}

/// The same with members that keep their data (`appendonly yes`, `appendfsync always`),
/// restarted in turn: A keeps its lock to the end of its section (exit 0), and B enters only
/// after it, with a higher fence.
#[test]
fn members_restarted_with_their_data_keep_the_holder() {
    for spacing in [Duration::ZERO, Duration::from_millis(2500)] {
        let mut members = redis(RedisServer::restart, || {
            RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
        });
        let (_env, mut a, _, _) = forget_two_under_a_holder(&mut members, spacing);
        let a = finish_child(&mut a);
        assert_eq!(a, Some(0), "A lost its lock (spacing {spacing:?})");
    }
}

fn finish_child(c: &mut std::process::Child) -> Option<i32> {
    wait_child(c, LIMIT).and_then(|s| s.code())
}

/// A single server restarted empty: the next fence is above every fence handed out before.
#[test]
fn a_single_server_restarted_empty_hands_out_higher_fences() {
    let mut server = RedisServer::start();
    let env = Env::with_stores(vec![server.url()]);
    let fence = |env: &Env| -> u64 {
        let o = env.run(&["run", "job", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
        assert_code(&o, 0);
        stdout(&o).trim().parse().unwrap()
    };
    let before: Vec<u64> = (0..5).map(|_| fence(&env)).collect();
    server.start_again_empty();
    let after = fence(&env);
    let top = before.iter().max().unwrap();
    assert!(
        after > *top,
        "fence {after} after the restart, {before:?} before"
    );
}
