//! Stores that forget: Redis servers restarted without their data, alone and in a quorum of
//! three. Fences never go back, and members that forgot never give a second holder a majority
//! while the first one's section runs (`engine::amnesia`).

use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(30);

fn urls(s: &[RedisServer]) -> Vec<String> {
    s.iter().map(|s| s.url()).collect()
}

/// A's section: it writes its pid and fence, then sleeps 8 s as the process dlock watches.
const A_SECTION: &str = "echo $DLOCK_FENCE > a.fence; echo $$ > a.pid; exec sleep 8";

/// B's section: says "overlap" if A's section is still running (alive and not a zombie),
/// then its fence and how it was told the lease before ended.
const B_SECTION: &str = "p=$(cat a.pid); s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); \
    if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo overlap; fi; \
    echo $DLOCK_FENCE $DLOCK_PREVIOUS";

/// A holds (ttl 5 s, an 8 s section) on `servers`; `restart` is applied to two of them in
/// turn, `spacing` apart; then B runs with `-w 10s` and must not enter while A's section runs.
/// Returns A (still running or done), B's fence and how B was told the lease before ended.
fn restart_two_under_a_holder(
    servers: &mut [RedisServer],
    spacing: Duration,
    restart: fn(&mut RedisServer),
) -> (Env, std::process::Child, u64, String) {
    let env = Env::with_stores(urls(servers));
    let dir = env.path("").display().to_string();
    let a_section = format!("cd {dir}; {A_SECTION}");
    let a = env.spawn_run(&["job", "--ttl", "5s"], &a_section);
    assert!(
        wait_for(LIMIT, || env.path("a.pid").exists()),
        "A never entered"
    );
    restart(&mut servers[0]);
    std::thread::sleep(spacing);
    restart(&mut servers[1]);
    let b_section = format!("cd {dir}; {B_SECTION}");
    let b = env.run(&[
        "run", "job", "--ttl", "5s", "-w", "10s", "--", "sh", "-c", &b_section,
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

/// Two of three servers without persistence are restarted empty in turn, back to back and
/// 2.5 s apart, under A: B's fence is above A's, and it is told `expired`.
#[test]
fn members_restarted_empty_never_admit_a_second_holder() {
    for spacing in [Duration::ZERO, Duration::from_millis(2500)] {
        let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let (env, mut a, b_fence, previous) =
            restart_two_under_a_holder(&mut servers, spacing, RedisServer::start_again_empty);
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

/// The same with members that keep their data (`appendonly yes`, `appendfsync always`),
/// restarted in turn: A keeps its lock to the end of its section (exit 0), and B enters only
/// after it, with a higher fence.
#[test]
fn members_restarted_with_their_data_keep_the_holder() {
    for spacing in [Duration::ZERO, Duration::from_millis(2500)] {
        let mut servers: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]))
            .collect();
        let (_env, mut a, _, _) =
            restart_two_under_a_holder(&mut servers, spacing, RedisServer::restart);
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
