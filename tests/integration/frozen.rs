//! An operator's commands during an outage: with one Redis of three frozen (SIGSTOP: it
//! accepts connections and never answers), every command ends within its store timeout, and
//! `inspect` shows the frozen store as unreachable next to what the others say.

use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// Far above what a bounded command takes (each of its calls is cut at 1 s), far below
/// "forever": a command still running by then is hanging.
const HANG: Duration = Duration::from_secs(30);

fn run(env: &Env, args: &[&str]) -> std::process::Output {
    let mut c = env.cmd();
    c.args(["--store-timeout", "1s"]).args(args);
    output_within(c, HANG)
}

#[test]
fn every_command_ends_with_one_store_of_three_frozen() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let env = Env::with_stores(servers.iter().map(|s| s.url()).collect());
    let o = run(&env, &["lock", "held", "--ttl", "5m"]);
    assert_code(&o, 0);
    let token = stdout(&o);
    let o = run(&env, &["lock", "broken", "--ttl", "5m"]);
    assert_code(&o, 0);
    servers[1].pause();

    let o = run(&env, &["--json", "inspect", "held"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["quorum"]["unreachable"], 1, "{v}");
    assert_eq!(v["quorum"]["held"], 2, "{v}");
    assert_eq!(v["stores"][1]["state"], "unreachable", "{v}");
    assert_eq!(v["stores"][0]["state"], "held", "{v}");
    let o = run(&env, &["inspect", "held"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("unreachable"), "{}", stdout(&o));

    let o = run(&env, &["list"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("held"), "{}", stdout(&o));

    // doctor names the frozen store and says it is unreachable (exit 69), but ends.
    let o = run(&env, &["doctor"]);
    assert_code(&o, 69);

    assert_code(&run(&env, &["extend", "held", "--token", &token]), 0);
    assert_code(&run(&env, &["unlock", "held", "--token", &token]), 0);
    assert_code(&run(&env, &["unlock", "broken", "--force"]), 0);
    servers[1].resume();
    // Released on the stores that answered: a majority, so both are free to take again.
    assert_code(&run(&env, &["lock", "held", "-n"]), 0);
    assert_code(&run(&env, &["lock", "broken", "-n"]), 0);
}
