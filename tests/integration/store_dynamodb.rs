//! The DynamoDB store on a real DynamoDB Local: a fast client clock, a restart mid-wait, a
//! deleted item, a multi-name grant killed mid-way, a missing table or one with the wrong key,
//! secrets in messages, doctor.

use std::sync::OnceLock;
use std::time::Duration;

use crate::common::dynamodb::{DynamoServer, TABLE};
use crate::common::proxy::Mode;
use crate::common::{Env, assert_code, output_within, shared, signal, stderr, stdout, wait_for};
use crate::store_s3::{
    fast_waiters_take_nothing, fence_of, fence_rises_past_a_delete, missing_is_78_until_created,
    released_waiters_here_look_at_once, rung_waiter_grants_without_a_read, secrets_never_shown,
    through_proxy, waiter_served_across_restart,
};

fn server() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    shared(&SERVER, DynamoServer::start, DynamoServer::url)
}

fn env() -> Env {
    Env::with_stores(vec![server().to_string()])
}

/// Each request is billed on AWS, and costs a round trip: a run on a name used before reads
/// its item once. It reads the item and the shard list at once, writes the grant, and then
/// writes the release on the version its own grant wrote, without reading the item again.
#[test]
fn a_run_reads_its_item_once() {
    let (proxy, env) = through_proxy(server());
    assert_code(&env.run(&["run", "once", "--", "true"]), 0);
    proxy.record();
    assert_code(&env.run(&["run", "once", "--", "true"]), 0);
    let (reads, writes) = (proxy.sent(".GetItem"), proxy.sent(".PutItem"));
    assert_eq!(
        (reads, writes),
        (2, 2),
        "a run on a name used before: the item and the shard list read, the grant and the \
         release written"
    );
}

/// A waiter whose wall clock runs an hour fast never takes a live lock: DynamoDB's conditions
/// have no server clock, so expiry is judged by the server's `Date`, never by this host's.
/// (DynamoDB Local checks no signature, so the hour is not refused as AWS would refuse it.)
#[test]
fn a_waiter_with_a_fast_clock_never_takes_a_live_lock() {
    fast_waiters_take_nothing(&env(), &[("+1h", &[75])]);
}

#[test]
fn a_release_rings_a_waiter_on_this_host() {
    released_waiters_here_look_at_once(&env());
}

#[test]
fn a_rung_waiter_grants_without_reading_the_item() {
    let (proxy, env) = through_proxy(server());
    rung_waiter_grants_without_a_read(&proxy, &env, ".GetItem", ".PutItem");
}

/// The server restarted (with its data) while a waiter waits: the waiter rides it out and is
/// served once the holder's lease runs out.
#[test]
fn a_waiter_is_served_across_a_restart() {
    let mut ddb = DynamoServer::start();
    let env = Env::with_stores(vec![ddb.url()]);
    waiter_served_across_restart(&env, || ddb.restart());
}

/// An item deleted behind dlock's back: the next fence is still above every earlier one.
#[test]
fn a_deleted_item_still_gives_a_higher_fence() {
    let ddb = DynamoServer::start();
    let env = Env::with_stores(vec![ddb.url()]);
    fence_rises_past_a_delete(&env, || ddb.delete_item(TABLE, "default/lock/del"));
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

/// A multi-name grant is one atomic request (TransactWriteItems): a dlock SIGKILLed while its
/// grant is on the way leaves all of its names held or none, never some. The grant goes
/// through a proxy that delays every chunk by two seconds, and dlock is killed as soon as
/// either name shows held: written name by name, the first name would be committed two delays
/// before the second was even sent, and stay held alone until its ttl.
#[test]
fn a_killed_multi_name_grant_leaves_all_of_its_names_or_none() {
    let direct = env();
    let (proxy, slow) = through_proxy(server());
    proxy.set(Mode::Delay(Duration::from_secs(2)));
    let (a, b) = ("atomic-a", "atomic-b");
    let mut c = slow.spawn(&[
        "--store-timeout",
        "30s",
        "multilock",
        a,
        b,
        "--ttl",
        "2m",
        "--",
        "sleep",
        "120",
    ]);
    let seen = wait_for(Duration::from_secs(60), || direct.held(a) || direct.held(b));
    signal(c.id(), libc::SIGKILL);
    let _ = c.wait();
    assert!(seen, "the grant never reached the table");
    let owners = |name: &str| -> Vec<String> {
        let st = direct.inspect(name);
        let holders = st["holders"].as_array().unwrap();
        holders
            .iter()
            .map(|h| h["owner"].as_str().unwrap().to_string())
            .collect()
    };
    let (oa, ob) = (owners(a), owners(b));
    assert_eq!(oa.len(), 1, "{a}: {oa:?}");
    assert_eq!(oa, ob, "a killed grant left {a} and {b} partly held");
}

/// A missing table is 78 naming `?create=1`; with it, the table is made and used.
#[test]
fn a_missing_table_is_78_and_create_makes_it() {
    let base = server().replace(&format!("dynamodb://{TABLE}?"), "dynamodb://Fresh_Table?");
    missing_is_78_until_created(&base, "Fresh_Table");
}

/// A table whose key is not dlock's (here a sort key beside `pk`) is 78 in one line naming
/// the key dlock needs, even with `?create=1` (it never alters a table).
#[test]
fn a_table_with_another_key_is_78() {
    let ddb = DynamoServer::start();
    let (status, answer) = ddb
        .request(
            "CreateTable",
            r#"{"TableName":"sorted","BillingMode":"PAY_PER_REQUEST",
            "AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"},
            {"AttributeName":"sk","AttributeType":"S"}],
            "KeySchema":[{"AttributeName":"pk","KeyType":"HASH"},
            {"AttributeName":"sk","KeyType":"RANGE"}]}"#,
        )
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    for extra in ["", "&create=1"] {
        let env = Env::with_stores(vec![ddb.url_in("sorted", extra)]);
        let o = env.run(&["lock", "k", "-n"]);
        assert_code(&o, 78);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("partition key pk") && err.contains("sorted"),
            "{err}"
        );
    }
}

/// No secret reaches a message: not one in the URL (refused, never echoed), not the secret
/// key of the environment when the endpoint is unreachable; `doctor` never prints it either.
#[test]
fn secrets_never_appear_in_messages() {
    secrets_never_shown(&[
        ("dynamodb://u:hunter2@locks?region=r", 64),
        (
            "dynamodb://locks?region=r&endpoint=http://u:hunter2@127.0.0.1:1",
            64,
        ),
        ("dynamodb://locks?region=r&endpoint=http://127.0.0.1:1", 69),
    ]);
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
