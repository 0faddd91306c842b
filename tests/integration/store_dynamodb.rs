//! The DynamoDB store on a real DynamoDB Local: a fast client clock, a restart mid-wait, a
//! deleted item, a missing table or one with the wrong key, secrets in messages, doctor.

use std::sync::OnceLock;
use std::time::Duration;

use crate::common::dynamodb::{DynamoServer, TABLE};
use crate::common::{
    Env, assert_code, finish, libfaketime, output_within, read, shared, stderr, stdout, wait_for,
};

fn server() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    shared(&SERVER, DynamoServer::start, DynamoServer::url)
}

fn env() -> Env {
    Env::with_stores(vec![server().to_string()])
}

fn fence_of(o: &std::process::Output) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&stdout(o)).unwrap();
    v["fence"].as_u64().unwrap()
}

/// A waiter whose wall clock runs an hour fast never takes a live lock: DynamoDB's conditions
/// have no server clock, so expiry is judged by the server's `Date`, never by this host's.
/// (DynamoDB Local checks no signature, so the hour is not refused as AWS would refuse it.)
#[test]
fn a_waiter_with_a_fast_clock_never_takes_a_live_lock() {
    let env = env();
    let o = env.run(&["--json", "lock", "fast", "--ttl", "30s"]);
    assert_code(&o, 0);
    let fence = fence_of(&o);
    let mut c = env.cmd();
    c.args(["lock", "fast", "-w", "3s"])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", "+1h")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let o = output_within(c, Duration::from_secs(60));
    assert_code(&o, 75);
    let v = env.inspect("fast");
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["holders"][0]["fence"], fence);
}

/// The server restarted (with its data) while a waiter waits: the waiter rides it out and is
/// served once the holder's lease runs out.
#[test]
fn a_waiter_is_served_across_a_restart() {
    let mut ddb = DynamoServer::start();
    let env = Env::with_stores(vec![ddb.url()]);
    assert_code(&env.run(&["lock", "restart", "--ttl", "8s"]), 0);
    let events = env.path("events");
    let waiter = env.spawn(&[
        "run",
        "restart",
        "-w",
        "90s",
        "--events",
        events.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(wait_for(Duration::from_secs(30), || read(&events)
        .contains("\"waiting\"")));
    ddb.restart();
    let o = finish(waiter, Duration::from_secs(90));
    assert_code(&o, 0);
    assert!(read(&events).contains("\"acquired\""), "{}", read(&events));
}

/// An item deleted behind dlock's back: the next fence is still above every earlier one.
#[test]
fn a_deleted_item_still_gives_a_higher_fence() {
    let ddb = DynamoServer::start();
    let env = Env::with_stores(vec![ddb.url()]);
    let mut top = 0;
    for _ in 0..3 {
        let o = env.run(&["--json", "lock", "del"]);
        assert_code(&o, 0);
        top = top.max(fence_of(&o));
        let token = serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string();
        assert_code(&env.run(&["unlock", "del", "--token", &token]), 0);
    }
    ddb.delete_item(TABLE, "default/lock/del");
    assert_eq!(env.inspect("del")["fence"], 0, "the item was not deleted");
    let o = env.run(&["--json", "lock", "del"]);
    assert_code(&o, 0);
    assert!(
        fence_of(&o) > top,
        "fence {} after the delete, {top} before",
        fence_of(&o)
    );
}

/// A release keeps the item (its fence counter and how the lease ended); the next grant's
/// fence is higher.
#[test]
fn a_release_keeps_the_item_and_its_counter() {
    let env = env();
    let o = env.run(&["--json", "lock", "kept"]);
    assert_code(&o, 0);
    let first = fence_of(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let token = v["token"].as_str().unwrap();
    assert_code(&env.run(&["unlock", "kept", "--token", token]), 0);
    let v = env.inspect("kept");
    let kept = v["fence"].as_u64().unwrap_or(0);
    assert!(kept >= first, "the release lost the counter: {v}");
    assert_eq!(v["previous"], "released", "{v}");
    let o = env.run(&["--json", "lock", "kept"]);
    assert!(fence_of(&o) > kept);
}

/// A missing table is 78 naming `?create=1`; with it, the table is made and used. A table
/// with another key is 78 too, naming the key dlock needs.
#[test]
fn a_missing_table_is_78_and_create_makes_it() {
    let base = server().replace(&format!("dynamodb://{TABLE}?"), "dynamodb://Fresh_Table?");
    let env = Env::with_stores(vec![base.clone()]);
    let o = env.run(&["lock", "b", "-n"]);
    assert_code(&o, 78);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("?create=1") && err.contains("Fresh_Table"),
        "{err}"
    );
    let created = Env::with_stores(vec![format!("{base}&create=1")]);
    assert_code(&created.run(&["lock", "b", "-n"]), 0);
    assert_eq!(env.inspect("b")["held"], true);
}

/// No secret reaches a message: not one in the URL (refused, never echoed), not the secret
/// key of the environment when the endpoint is unreachable; `doctor` never prints it either.
#[test]
fn secrets_never_appear_in_messages() {
    let file = Env::file();
    for (url, code) in [
        ("dynamodb://u:hunter2@locks?region=r", 64),
        (
            "dynamodb://locks?region=r&endpoint=http://u:hunter2@127.0.0.1:1",
            64,
        ),
        ("dynamodb://locks?region=r&endpoint=http://127.0.0.1:1", 69),
    ] {
        let mut c = file.cmd();
        c.args(["--store", url, "lock", "x", "-n"])
            .env("AWS_SECRET_ACCESS_KEY", "hunter2");
        let o = output_within(c, Duration::from_secs(30));
        assert_code(&o, code);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
    let mut c = env().cmd();
    c.arg("doctor").env("AWS_SECRET_ACCESS_KEY", "hunter2");
    let o = output_within(c, Duration::from_secs(30));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        !out.contains("hunter2") && !err.contains("hunter2"),
        "{out}{err}"
    );
    assert!(out.contains("pk") && out.contains("signature"), "{out}");
}

/// A quorum mixing the two polled stores with Redis (DynamoDB, S3, Redis: a majority of two):
/// a grant, a busy second attempt, a release, and a higher fence after it; with one member
/// (Redis) stopped, the other two still decide.
#[test]
fn a_quorum_of_dynamodb_s3_and_redis() {
    let s3 = crate::common::s3::S3Server::start();
    let redis = crate::common::redis::RedisServer::start();
    let env = Env::with_stores(vec![server().to_string(), s3.url(), redis.url()]);
    let o = env.run(&["--json", "lock", "mixed", "--ttl", "30s"]);
    assert_code(&o, 0);
    let first = fence_of(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    assert_code(&env.run(&["lock", "mixed", "-n"]), 75);
    let v = env.inspect("mixed");
    assert_eq!(v["held"], true, "{v}");
    assert_code(&env.run(&["unlock", "mixed", "--token", &token]), 0);
    drop(redis);
    let o = env.run(&["--json", "lock", "mixed", "--ttl", "30s"]);
    assert_code(&o, 0);
    assert!(fence_of(&o) > first, "{} after {first}", fence_of(&o));
    assert_code(&env.run(&["lock", "mixed", "-n"]), 75);
}
