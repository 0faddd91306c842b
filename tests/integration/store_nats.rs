//! The NATS JetStream KV store's own promises: waiters ride out a server restart, a bucket
//! that cannot expire leases is refused, fences rise across a deleted record, a deleted
//! bucket and an emptied server, a killed holder's lease ends by the server's expiry, one
//! release wakes one waiter, and secrets stay out of messages. The store contract is in
//! conformance.rs.

use std::process::{Child, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use dlock::store::Attempt;

use crate::common::nats::NatsServer;
use crate::common::proxy::Proxy;
use crate::common::*;
use crate::store_redis::{one_release_wakes_one_of_five, request};
use crate::store_s3::missing_is_78_to_every_command;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Run `f` with a JetStream context on the server, as an operator's tool would.
fn operator<F: std::future::Future<Output = ()>>(
    server: &NatsServer,
    f: impl FnOnce(jetstream::Context) -> F,
) {
    runtime().block_on(async { f(jetstream::new(client(server).await)).await });
}

/// A client of the server, as an operator's tool would connect.
async fn client(server: &NatsServer) -> async_nats::Client {
    async_nats::connect(format!("127.0.0.1:{}", server.port))
        .await
        .unwrap()
}

fn fence(env: &Env, name: &str) -> u64 {
    let o = env.run(&["--json", "inspect", name]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["fence"].as_u64().unwrap_or_else(|| panic!("{v}"))
}

/// `lock NAME`, then `unlock`: the fence it was granted.
fn lock_and_unlock(env: &Env, name: &str) -> u64 {
    let o = env.run(&["--json", "lock", name]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    assert_code(&env.run(&["unlock", name, "--token", &token]), 0);
    v["fence"].as_u64().unwrap()
}

#[test]
fn waiters_ride_out_a_server_restart_and_are_served() {
    let mut server = NatsServer::start();
    let env = Env::with_stores(vec![server.url()]);
    let served = env.path("served");
    let mut holder = env.spawn_run(&["r", "--ttl", "10s"], "sleep 3");
    assert!(wait_for(Duration::from_secs(10), || env.held("r")));
    let mut waiters: Vec<Child> = (0..2)
        .map(|_| {
            let script = format!("echo served >> {}", served.display());
            env.spawn_run(&["r", "-w", "60s"], &script)
        })
        .collect();
    assert!(wait_for(Duration::from_secs(10), || env.waiters("r") == 2));
    server.restart();
    assert!(
        wait_child(&mut holder, Duration::from_secs(30))
            .unwrap()
            .success()
    );
    for w in &mut waiters {
        let status = wait_child(w, Duration::from_secs(60)).expect("a waiter never served");
        assert!(status.success(), "{status:?}");
    }
    let lines = std::fs::read_to_string(&served).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
}

#[test]
fn a_bucket_that_cannot_expire_leases_is_refused_naming_create() {
    let server = NatsServer::start();
    operator(&server, |js| async move {
        js.create_key_value(kv::Config {
            bucket: "plain".into(),
            history: 1,
            ..kv::Config::default()
        })
        .await
        .unwrap();
    });
    let plain = format!("nats://127.0.0.1:{}/plain", server.port);
    for url in [
        plain.clone(),
        format!("nats://127.0.0.1:{}/absent", server.port),
    ] {
        let env = Env::with_stores(vec![url.clone()]);
        let bucket = url.rsplit('/').next().unwrap();
        missing_is_78_to_every_command(&env, bucket);
        let o = env.run(&["doctor"]);
        assert!(stdout(&o).contains("?create=1") || stderr(&o).contains("?create=1"));
    }
    let err = stderr(&Env::with_stores(vec![plain.clone()]).run(&["lock", "x", "-n"]));
    assert!(err.contains("allow_msg_ttl"), "{err}");
    // With ?create=1 the bucket gets what it lacks, and leases expire there.
    let env = Env::with_stores(vec![format!("{plain}?create=1")]);
    assert_code(&env.run(&["lock", "x", "--ttl", "1s"]), 0);
    assert!(wait_for(Duration::from_secs(10), || !env.held("x")));
}

#[test]
fn fences_rise_across_a_deleted_record_a_deleted_bucket_and_an_emptied_server() {
    let mut server = NatsServer::start();
    let env = Env::with_stores(vec![server.url()]);
    let mut last = lock_and_unlock(&env, "f");
    let mut next = |what: &str, env: &Env| {
        let f = lock_and_unlock(env, "f");
        assert!(f > last, "after {what}: fence {f} after {last}");
        last = f;
    };
    next("a release", &env);
    operator(&server, |js| async move {
        let kv = js.get_key_value("locks").await.unwrap();
        kv.purge("default.r.f").await.unwrap();
    });
    next("a purged record", &env);
    operator(&server, |js| async move {
        js.delete_key_value("locks").await.unwrap();
    });
    next("a deleted bucket", &env);
    server.start_again_empty();
    next("a server emptied", &env);
    assert!(fence(&env, "f") >= last);
}

/// A lease nobody releases (a `lock` whose script died, after one `extend`) ends by the
/// server's expiry of its holder key: the waiter is let in within its wait, told the lease
/// before expired. A renewal written without `Nats-TTL` would make the key immortal.
#[test]
fn an_abandoned_lease_ends_by_the_servers_expiry_after_a_renewal() {
    let server = NatsServer::start();
    let env = Env::with_stores(vec![server.url()]);
    let token = stdout(&env.run(&["lock", "k", "--ttl", "2s"]));
    let o = env.run(&["extend", "k", "--token", token.trim(), "--ttl", "2s"]);
    assert_code(&o, 0);
    assert!(env.held("k"));
    let o = env.run(&[
        "run",
        "k",
        "-w",
        "8s",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_PREVIOUS",
    ]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), "expired");
}

/// On the store at `url`: a holder of `name`, then `meanwhile`, then one release among five
/// queued exclusive waiters wakes exactly one of them.
fn one_release_wakes_one(url: &str, name: &str, meanwhile: impl Future<Output = ()>) {
    let url = dlock::store::url::parse(url).unwrap();
    runtime().block_on(async {
        let store = url.open("default", Duration::from_secs(2)).await.unwrap();
        let holder = request(name);
        let granted = store.try_acquire(&holder, false).await.unwrap();
        assert!(matches!(granted, Attempt::Granted(_)));
        meanwhile.await;
        // A release's tombstone expires a second later: the listeners wait past it.
        let max = Duration::from_millis(1600);
        one_release_wakes_one_of_five(&*store, name, &holder, max).await;
    });
}

/// Five queued exclusive waiters, one release: exactly one waiter's listener fires.
#[test]
fn one_release_wakes_exactly_one_exclusive_waiter() {
    let server = NatsServer::start();
    one_release_wakes_one(&server.url(), "hot", async {});
}

/// The stream at its consumer limit (the server's default is 1,000 per stream, which
/// short-lived waiters filled while each one's consumer lingered after it): a release still
/// wakes exactly one waiter, which hears its ring without a consumer.
#[test]
fn one_release_wakes_one_waiter_with_the_streams_consumers_at_their_limit() {
    let server = NatsServer::start();
    let fill = async {
        let js = jetstream::new(client(&server).await);
        let stream = js.get_stream("KV_locks").await.unwrap();
        let config = || jetstream::consumer::push::Config {
            deliver_subject: "nobody".into(),
            ..Default::default()
        };
        let mut made = 0;
        while stream.create_consumer(config()).await.is_ok() {
            made += 1;
            assert!(made < 100_000, "the server has no consumer limit");
        }
    };
    one_release_wakes_one(&server.url(), "full", fill);
}

/// A user who may subscribe to its inboxes only (as KV-only permissions often are): the
/// server refuses the waiters' plain subscriptions to their keys, and a release still wakes
/// exactly one of them, through its consumer.
#[test]
fn one_release_wakes_one_waiter_of_a_user_who_may_subscribe_to_inboxes_only() {
    let dir = temp_dir();
    let conf = dir.path().join("nats.conf");
    let users = r#"authorization { users = [ { user: kv, password: kvpass, permissions: {
        publish: ["$JS.API.>", "$KV.locks.>"], subscribe: ["_INBOX.>"] } } ] }"#;
    std::fs::write(&conf, users).unwrap();
    let server = NatsServer::start_with(&["-c", conf.to_str().unwrap()]);
    let url = format!("nats://kv:kvpass@127.0.0.1:{}/locks?create=1", server.port);
    one_release_wakes_one(&url, "inbox", async {});
}

/// A waiter leaves nothing on the server for long: the consumer that tells it of holders'
/// expiries goes within seconds of it (the server's count of the stream's consumers is
/// back to none well inside the 30 s a watch of async-nats lingered).
#[test]
fn waiters_leave_no_consumer_behind() {
    let server = NatsServer::start();
    let env = Env::with_stores(vec![server.url()]);
    let token = stdout(&env.run(&["lock", "gone"]));
    let waiters: Vec<Child> = (0..5)
        .map(|_| env.spawn_run(&["gone", "-w", "30s"], "true"))
        .collect();
    let queued = || env.inspect("gone")["waiters"].as_array().map(Vec::len) == Some(5);
    assert!(
        wait_for(Duration::from_secs(10), queued),
        "the waiters never queued"
    );
    assert_code(&env.run(&["unlock", "gone", "--token", &token]), 0);
    for w in waiters {
        assert_code(&finish(w, Duration::from_secs(20)), 0);
    }
    let consumers = || {
        runtime().block_on(async {
            let js = jetstream::new(client(&server).await);
            let mut stream = js.get_stream("KV_locks").await.unwrap();
            stream.info().await.unwrap().state.consumer_count
        })
    };
    assert!(
        wait_for(Duration::from_secs(15), || consumers() == 0),
        "{} consumers left",
        consumers()
    );
}

#[test]
fn a_wrong_password_is_exit_77_and_no_secret_is_shown() {
    let server = NatsServer::start_with(&["--user", "dl", "--pass", "s3cret-pw"]);
    let at = format!("127.0.0.1:{}/locks?create=1", server.port);
    let env = Env::with_stores(vec![format!("nats://dl:wrong-pw@{at}")]);
    let o = env.run(&["lock", "x"]);
    assert_code(&o, 77);
    assert!(!stderr(&o).contains("wrong-pw"), "{}", stderr(&o));
    let env = Env::with_stores(vec![format!("nats://dl:s3cret-pw@{at}")]);
    assert_code(&env.run(&["lock", "x", "--ttl", "5s"]), 0);
    let o = env.run(&["inspect", "x"]);
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("dl:***@") || !all.contains("dl:"), "{all}");
    assert!(!all.contains("s3cret-pw"), "{all}");
    let mut c = env.cmd();
    c.args(["run", "x", "-n", "--", "true"])
        .stdout(Stdio::null());
    let o = output_within(c, Duration::from_secs(30));
    assert_code(&o, 75);
    assert!(!stderr(&o).contains("s3cret-pw"), "{}", stderr(&o));
}

/// `tls://` with the CA that signed the server's certificate; without it the server is not
/// trusted (the system's roots do not know a test CA).
#[test]
fn tls_with_a_self_signed_ca() {
    let dir = temp_dir();
    let (ca, cert, key) = tls_certs(dir.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let server = NatsServer::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key]);
    let at = format!("tls://127.0.0.1:{}/locks?create=1", server.port);
    let env = Env::with_stores(vec![format!("{at}&ca_file={}", ca.display())]);
    let o = env.run(&["run", "t", "-n", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    assert!(stdout(&o).trim().parse::<u64>().is_ok(), "{}", stdout(&o));
    let o = Env::with_stores(vec![at]).run(&["lock", "t", "-n"]);
    assert_code(&o, 69);
}

/// Two clients of `server`: one straight to it, and one through a recording proxy.
fn direct_and_through_a_proxy(server: &NatsServer) -> (Env, Proxy, Env) {
    let direct = Env::with_stores(vec![server.url()]);
    let proxy = Proxy::to_port(server.port);
    let url = server
        .url()
        .replace(&format!("127.0.0.1:{}", server.port), &proxy.addr());
    let via = Env::with_stores(vec![url]);
    (direct, proxy, via)
}

/// A release reads the keys of the waiters from the head of the line to the one it rings,
/// never those behind it (each is a request, and one more round trip when it was not
/// guessed): the releasing process (through a recording proxy) never names the second
/// waiter's key, and the first one is rung and served.
#[test]
fn a_release_reads_no_key_of_the_waiters_behind_the_one_it_rings() {
    let server = NatsServer::start();
    let (direct, proxy, via) = direct_and_through_a_proxy(&server);
    let token = stdout(&via.run(&["lock", "behind"]));
    let waiters = |n: usize| {
        wait_for(Duration::from_secs(10), || {
            direct.inspect("behind")["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == n)
        })
    };
    let first = direct.spawn_run(&["behind", "-w", "30s"], "echo first");
    assert!(waiters(1), "the first waiter never queued");
    let second = direct.spawn_run(&["behind", "-w", "30s"], "echo second");
    assert!(waiters(2), "the second waiter never queued");
    let line = direct.inspect("behind")["waiters"].clone();
    let owner = |i: usize| line[i]["owner"].as_str().unwrap().to_string();
    proxy.record();
    assert_code(&via.run(&["unlock", "behind", "--token", &token]), 0);
    assert!(
        proxy.sent(&format!(".w.{}", owner(0))) > 0,
        "the head was not rung"
    );
    assert_eq!(
        proxy.sent(&format!(".w.{}", owner(1))),
        0,
        "the second waiter's key read"
    );
    let o = finish(first, Duration::from_secs(20));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "first");
    assert_code(&finish(second, Duration::from_secs(20)), 0);
}

/// A release hands the lock to the waiter at the head of the line in its own write: the
/// waiter (through a recording proxy) holds without reading or writing the name's record or
/// its own lease key, and with a fence above the releaser's.
#[test]
fn a_release_hands_the_lock_to_the_waiter_which_holds_without_a_request() {
    let server = NatsServer::start();
    let (direct, proxy, via) = direct_and_through_a_proxy(&server);
    let token = stdout(&direct.run(&["lock", "handed"]));
    let before = fence(&direct, "handed");
    let waiter = via.spawn(&["lock", "handed", "-w", "30s"]);
    let queued = || direct.inspect("handed")["waiters"].as_array().map(Vec::len) == Some(1);
    assert!(wait_for(Duration::from_secs(10), queued), "never queued");
    proxy.record();
    assert_code(&direct.run(&["unlock", "handed", "--token", &token]), 0);
    let o = finish(waiter, Duration::from_secs(20));
    assert_code(&o, 0);
    assert_eq!(
        proxy.sent(".r.handed"),
        0,
        "the waiter read or wrote the record"
    );
    assert_eq!(proxy.sent(".h.handed"), 0, "the waiter wrote its lease key");
    let state = direct.inspect("handed");
    assert_eq!(
        state["holders"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    assert!(fence(&direct, "handed") > before);
    let mine = stdout(&o);
    assert_code(&direct.run(&["unlock", "handed", "--token", &mine]), 0);
}
