//! The S3 store on a real SeaweedFS gateway that checks signatures: refusals, a fast client
//! clock, ETags of identical bytes, a restart mid-wait, a deleted record, a missing bucket.

use std::sync::OnceLock;
use std::time::Duration;

use dlock::store::aws::{Endpoint, Service, creds::Credentials};
use dlock::store::{Acquire, Attempt, Mode, url};

use crate::common::proxy::Proxy;
use crate::common::s3::{ACCESS_KEY, BUCKET, S3Server, SECRET_KEY};
use crate::common::{
    Env, assert_code, event_ms, finish, libfaketime, output_within, read, shared, signal, stderr,
    stdout, wait_for,
};

fn server() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    shared(&SERVER, S3Server::start, S3Server::url)
}

fn env() -> Env {
    Env::with_stores(vec![server().to_string()])
}

/// A proxy to the server of `url`, and clients of that server through it.
pub(crate) fn through_proxy(url: &str) -> (Proxy, Env) {
    let port = url.split("127.0.0.1:").nth(1).unwrap();
    let port: u16 = port[..port
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(port.len())]
        .parse()
        .unwrap();
    let proxy = Proxy::to_port(port);
    let url = url.replace(&format!("127.0.0.1:{port}"), &proxy.addr());
    (proxy, Env::with_stores(vec![url]))
}

pub(crate) fn fence_of(o: &std::process::Output) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&stdout(o)).unwrap();
    v["fence"].as_u64().unwrap()
}

/// A wrong secret is refused by the gateway's signature check: 77, one line that names the
/// signature, and the secret nowhere.
#[test]
fn a_wrong_secret_is_77_in_one_line_without_the_secret() {
    let env = env();
    for args in [&["lock", "wrong", "-n"][..], &["inspect", "wrong"][..]] {
        let mut c = env.cmd();
        c.args(args)
            .env("AWS_SECRET_ACCESS_KEY", "not-the-s3cret-42");
        let o = output_within(c, Duration::from_secs(30));
        assert_code(&o, 77);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("signature"), "{err}");
        assert!(
            !err.contains("not-the-s3cret-42") && !err.contains(SECRET_KEY),
            "{err}"
        );
    }
    // `doctor` reports the refusal the same way, and with the right key says it was accepted.
    let o = env.run(&["doctor"]);
    assert!(!stdout(&o).contains(SECRET_KEY) && !stderr(&o).contains(SECRET_KEY));
    assert!(
        stdout(&o).contains("accepted a request signed"),
        "{}",
        stdout(&o)
    );
}

/// No secret reaches a message: not one in the URL (refused, never echoed), not the secret
/// key of the environment when the endpoint is unreachable or the key wrong.
#[test]
fn secrets_never_appear_in_messages() {
    secrets_never_shown(&[
        ("s3://u:hunter2@locks?region=r", 64),
        (
            "s3://locks?region=r&endpoint=http://u:hunter2@127.0.0.1:1",
            64,
        ),
        (
            "s3://locks?region=r&endpoint=http://127.0.0.1:1&path_style=1",
            69,
        ),
    ]);
}

/// Each URL fails with its code in one line that shows no `hunter2`, which is also the secret
/// key of the environment (the S3 and DynamoDB tests).
pub(crate) fn secrets_never_shown(urls: &[(&str, i32)]) {
    let env = Env::file();
    for &(url, code) in urls {
        let mut c = env.cmd();
        c.args(["--store", url, "lock", "x", "-n"])
            .env("AWS_SECRET_ACCESS_KEY", "hunter2");
        let o = output_within(c, Duration::from_secs(30));
        assert_code(&o, code);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// A waiter whose wall clock runs an hour (or ten minutes) fast never takes a live lock: expiry
/// is judged by the server's `Date`, never by the client's clock.
#[test]
fn a_waiter_with_a_fast_clock_never_takes_a_live_lock() {
    // Not acquired (75); or, an hour off, refused for its clock by the signature check
    // (78), as AWS does past 15 minutes.
    fast_waiters_take_nothing(&env(), &[("+1h", &[75, 78]), ("+10m", &[75])]);
}

/// A lock held for 30 s, and a waiter for 3 s whose wall clock runs `ahead` (each with the exit
/// codes it may end with): none takes the lock, whose holder stays.
pub(crate) fn fast_waiters_take_nothing(env: &Env, waiters: &[(&str, &[i32])]) {
    let o = env.run(&["--json", "lock", "fast", "--ttl", "30s"]);
    assert_code(&o, 0);
    let fence = fence_of(&o);
    for &(ahead, codes) in waiters {
        let mut c = env.cmd();
        c.args(["lock", "fast", "-w", "3s"])
            .env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", ahead)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        let o = output_within(c, Duration::from_secs(60));
        let code = o.status.code().unwrap_or(-1);
        assert!(codes.contains(&code), "{ahead}: {code} {}", stderr(&o));
    }
    let v = env.inspect("fast");
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["holders"][0]["fence"], fence);
}

fn service(port_url: &str) -> Service {
    let endpoint = port_url
        .split("endpoint=")
        .nth(1)
        .and_then(|e| e.split('&').next())
        .unwrap();
    let creds = Credentials {
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        session_token: None,
        source: "test".into(),
    };
    Service::new(
        Endpoint::parse(endpoint).unwrap(),
        None,
        creds,
        "us-east-1".into(),
        "s3",
    )
}

/// The record's body and ETag, read with a signed GET.
async fn object(svc: &Service, key: &str) -> (serde_json::Value, String) {
    let r = svc
        .send(
            "GET",
            &format!("/{BUCKET}/{key}"),
            "",
            &[],
            bytes::Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let etag = r.header("etag").unwrap().to_string();
    (serde_json::from_slice(&r.body).unwrap(), etag)
}

/// S3's ETag is the body's MD5: a record that comes back to the very same holders and expiry
/// (renewed to 10 s, then to 30 s again, within the server second of its grant) must still
/// have a new ETag, or a writer still holding the first one would get its `If-Match` through.
#[test]
fn a_record_written_twice_alike_has_a_new_etag() {
    let url = server();
    let svc = service(url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = url::parse(url)
            .unwrap()
            .open("etag", Duration::from_secs(10))
            .await
            .unwrap();
        // Until both writes fall in one server second (a renewal right after the grant).
        for _ in 0..10 {
            let req = Acquire {
                names: vec!["twice".into()],
                modes: vec![Mode::Exclusive],
                token: dlock::names::new_token(),
                ttl: Duration::from_secs(30),
                meta: "{}".into(),
                detached: true,
            };
            let granted = store.try_acquire(&req, false).await.unwrap();
            assert!(matches!(granted, Attempt::Granted(_)));
            let (first, stale) = object(&svc, "etag/lock/twice").await;
            let short = Duration::from_secs(10);
            assert!(store.renew(&req.names, &req.token, short).await.unwrap());
            assert!(store.renew(&req.names, &req.token, req.ttl).await.unwrap());
            let (second, etag) = object(&svc, "etag/lock/twice").await;
            store
                .release(&req.names, &req.token, dlock::store::Outcome::Released)
                .await
                .unwrap();
            if first["holders"] != second["holders"] {
                continue;
            }
            assert_ne!(stale, etag, "the same record written twice kept its ETag");
            // A writer still holding the first ETag is refused.
            let r = svc
                .send(
                    "PUT",
                    &format!("/{BUCKET}/etag/lock/twice"),
                    "",
                    &[("if-match", stale.as_str())],
                    bytes::Bytes::from_static(b"{}"),
                )
                .await
                .unwrap();
            assert_eq!(r.status, 412, "a stale If-Match was let through");
            return;
        }
        panic!("never two writes in one server second");
    });
}

/// The server restarted (with its data) while a waiter waits: the waiter rides it out and is
/// served once the holder's lease runs out.
#[test]
fn a_waiter_is_served_across_a_restart() {
    let mut s3 = S3Server::start();
    let env = Env::with_stores(vec![s3.url()]);
    waiter_served_across_restart(&env, || s3.restart());
}

/// A lock held for 8 s, a waiter that waits up to 90 s, and `restart` once it waits: the
/// waiter rides the restart out and is served.
pub(crate) fn waiter_served_across_restart(env: &Env, restart: impl FnOnce()) {
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
    restart();
    let o = finish(waiter, Duration::from_secs(90));
    assert_code(&o, 0);
    assert!(read(&events).contains("\"acquired\""), "{}", read(&events));
}

#[test]
fn a_release_rings_a_waiter_on_this_host() {
    released_waiters_here_look_at_once(&env());
}

/// A waiter polls once a second or less, and its first look comes a whole interval after it
/// starts to wait: a waiter on the host of the release is rung by it and takes the lock well
/// within that second. A waiter killed while it waited, or a `dlock wait` watching, ahead of
/// it, does not take the ring, and no bell is left behind.
pub(crate) fn released_waiters_here_look_at_once(env: &Env) {
    for round in 0..3 {
        let name = format!("rung{round}");
        let token = stdout(&env.run(&["lock", &name, "--ttl", "30s"]));
        let waiting = |events: &std::path::Path| {
            let flag = events.to_str().unwrap();
            let child = env.spawn(&["run", &name, "-w", "60s", "--events", flag, "--", "true"]);
            assert!(wait_for(Duration::from_secs(30), || event_ms(
                events, "waiting"
            )
            .is_some()));
            child
        };
        if round > 0 {
            let mut dead = waiting(&env.path(&format!("dead{round}.events")));
            signal(dead.id(), libc::SIGKILL);
            dead.wait().unwrap();
        }
        // A `dlock wait` ahead of the waiter: it takes nothing, so it must not take the ring.
        let watcher = (round == 2).then(|| {
            let w = env.spawn(&["wait", &name, "-w", "60s"]);
            std::thread::sleep(Duration::from_millis(500));
            w
        });
        let events = env.path(&format!("waiter{round}.events"));
        let waiter = waiting(&events);
        assert_code(&env.run(&["unlock", &name, "--token", &token]), 0);
        assert_code(&finish(waiter, Duration::from_secs(60)), 0);
        if let Some(w) = watcher {
            assert_code(&finish(w, Duration::from_secs(60)), 0);
        }
        let took = event_ms(&events, "acquired").unwrap() - event_ms(&events, "waiting").unwrap();
        assert!(
            took < 1000,
            "round {round}: the waiter took {took} ms: it was not rung"
        );
    }
    let left: Vec<_> = std::fs::read_dir(env.path("runtime/dlock-bells"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "bells left behind: {left:?}");
}

#[test]
fn a_rung_waiter_grants_without_reading_the_record() {
    let (proxy, env) = through_proxy(server());
    rung_waiter_grants_without_a_read(&proxy, &env, "GET /", "PUT /");
}

/// A waiter rung by a release on this host writes its grant on the record the release wrote
/// (the ring carries it), on condition of that version, without reading it first: the request
/// after the release's write is the waiter's write. A waiter also looks on its own once a
/// second, and such a look may fall in those few milliseconds now and then, so a round may
/// show a read; one clean round of three shows the grant needs none (without the record in
/// the ring, every round reads).
pub(crate) fn rung_waiter_grants_without_a_read(proxy: &Proxy, env: &Env, read: &str, write: &str) {
    let find = |hay: &[u8], needle: &str| {
        hay.windows(needle.len())
            .position(|w| w == needle.as_bytes())
    };
    for round in 0..3 {
        let name = format!("unread{round}");
        let token = stdout(&env.run(&["lock", &name, "--ttl", "30s"]));
        let events = env.path(&format!("unread{round}.events"));
        let flag = events.to_str().unwrap();
        let waiter = env.spawn(&["run", &name, "-w", "60s", "--events", flag, "--", "true"]);
        assert!(wait_for(Duration::from_secs(30), || event_ms(
            &events, "waiting"
        )
        .is_some()));
        proxy.record();
        assert_code(&env.run(&["unlock", &name, "--token", &token]), 0);
        assert_code(&finish(waiter, Duration::from_secs(60)), 0);
        let sent = proxy.recorded();
        let released = find(&sent, write).expect("the release's write") + write.len();
        let grant = find(&sent[released..], write).expect("the waiter's grant");
        if find(&sent[released..released + grant], read).is_none() {
            return;
        }
    }
    panic!("in each of three rounds the rung waiter read the record before its grant");
}

/// A record deleted behind dlock's back: the next fence is still above every earlier one.
#[test]
fn a_deleted_record_still_gives_a_higher_fence() {
    let s3 = S3Server::start();
    let env = Env::with_stores(vec![s3.url()]);
    fence_rises_past_a_delete(&env, || {
        s3.delete(&format!("/buckets/{BUCKET}/default/lock/del"))
    });
}

/// Three grants and releases of `del`, then `delete` (its record, behind dlock's back): the
/// next fence is above all three.
pub(crate) fn fence_rises_past_a_delete(env: &Env, delete: impl FnOnce()) {
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
    delete();
    assert_eq!(env.inspect("del")["fence"], 0, "the record was not deleted");
    let o = env.run(&["--json", "lock", "del"]);
    assert_code(&o, 0);
    assert!(
        fence_of(&o) > top,
        "fence {} after the delete, {top} before",
        fence_of(&o)
    );
}

/// A missing bucket is 78 naming `?create=1`; with it, the bucket is made and used.
#[test]
fn a_missing_bucket_is_78_and_create_makes_it() {
    let base = server().replace(&format!("s3://{BUCKET}?"), "s3://fresh-bucket?");
    missing_is_78_until_created(&base, "fresh-bucket");
}

/// A store URL whose bucket or table `name` is missing: 78 in one line naming `name` and
/// `?create=1`; with `&create=1` it is made and used.
pub(crate) fn missing_is_78_until_created(base: &str, name: &str) {
    let env = Env::with_stores(vec![base.to_string()]);
    missing_is_78_to_every_command(&env, name);
    let created = Env::with_stores(vec![format!("{base}&create=1")]);
    assert_code(&created.run(&["lock", "b", "-n"]), 0);
    assert_eq!(env.inspect("b")["held"], true);
}

/// Every command that reads or writes locks refuses a store whose bucket, KV bucket or table
/// `name` is missing alike: 78, in the same one line naming `name` and `?create=1`.
pub(crate) fn missing_is_78_to_every_command(env: &Env, name: &str) {
    let lock = stderr(&env.run(&["lock", "b", "-n"]));
    assert_eq!(lock.lines().count(), 1, "{lock}");
    assert!(lock.contains("?create=1") && lock.contains(name), "{lock}");
    for args in [&["lock", "b", "-n"][..], &["inspect", "b"], &["list"]] {
        let o = env.run(args);
        assert_code(&o, 78);
        assert_eq!(stderr(&o), lock, "{args:?}");
    }
}

/// An `https` endpoint: the gateway serves S3 over TLS with a certificate from a CA of its
/// own. Named by `?ca_file=`, the CA is trusted and a job runs under the lock; without it, the
/// certificate is refused in one line and nothing is held. (DynamoDB goes through the same
/// signed HTTP client; DynamoDB Local has no TLS to test it on.)
#[test]
fn an_https_endpoint_is_trusted_through_its_ca_file_only() {
    let s3 = S3Server::start_tls();
    let url = s3.url();
    assert!(url.contains("endpoint=https://"), "{url}");
    let env = Env::with_stores(vec![url.clone()]);
    let o = env.run(&["run", "t", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    assert!(stdout(&o).parse::<u64>().is_ok(), "{}", stdout(&o));
    let bare: String = url
        .split('&')
        .filter(|p| !p.starts_with("ca_file="))
        .collect::<Vec<_>>()
        .join("&");
    let o = Env::with_stores(vec![bare]).run(&["lock", "t", "-n"]);
    let err = stderr(&o);
    assert_ne!(
        o.status.code(),
        Some(0),
        "an untrusted certificate was accepted"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert_eq!(env.inspect("t")["held"], false);
}

/// With no keys in the environment, a profile of the shared credentials file signs the
/// requests (`AWS_PROFILE`, `AWS_SHARED_CREDENTIALS_FILE`), and the gateway checks them: the
/// right profile holds the lock, another profile's wrong secret is refused (77), and a
/// profile the file lacks is a setup error (78) that names where credentials come from.
#[test]
fn a_profile_of_the_shared_credentials_file_signs_the_requests() {
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        format!(
            "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = wrong-one\n\n\
             [ci]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        ),
    )
    .unwrap();
    let with = |profile: Option<&str>, args: &[&str]| {
        let mut c = env.cmd();
        c.args(args)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("AWS_SHARED_CREDENTIALS_FILE", &file);
        match profile {
            Some(p) => c.env("AWS_PROFILE", p),
            None => c.env_remove("AWS_PROFILE"),
        };
        output_within(c, Duration::from_secs(30))
    };
    let o = with(
        Some("ci"),
        &["run", "profiled", "--", "sh", "-c", "echo $DLOCK_FENCE"],
    );
    assert_code(&o, 0);
    assert!(stdout(&o).parse::<u64>().is_ok(), "{}", stdout(&o));
    let o = with(None, &["lock", "profiled", "-n"]);
    assert_code(&o, 77);
    assert!(!stderr(&o).contains("wrong-one"), "{}", stderr(&o));
    let o = with(Some("absent"), &["lock", "profiled", "-n"]);
    assert_code(&o, 78);
    let err = stderr(&o);
    assert!(
        err.contains("\"absent\"") && err.contains("credentials"),
        "{err}"
    );
    assert_eq!(env.inspect("profiled")["held"], false);
}
