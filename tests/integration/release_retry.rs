//! A release that gets no answer (issue 41): while the lease is still valid (and for at most
//! 10 s), dlock asks again, with backoff, so the next holder gets the lock once the store
//! answers again, not when the lease's ttl runs out. (That a clock bent by libfaketime can
//! neither stretch nor stall this: `engine::release`'s own test, and the checker's
//! clock-jump fault.)

use std::time::Duration;

use crate::common::etcd::EtcdServer;
use crate::common::postgres::PgServer;
use crate::common::proxy::{Mode, Proxy};
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A holder on the store at `port` through a proxy, whose `run` ends while the store does
/// not answer it (its connections reset, new ones refused, as when the server or the way to
/// it goes away for a while). Its release fails; once the store answers again the next
/// holder, waiting at most 10 s of the holder's 30 s ttl, gets the lock, and the holder ends
/// with its command's status.
fn released_after_the_outage(port: u16, scheme_url: impl Fn(&str) -> String, direct: Env) {
    let proxy = Proxy::to_port(port);
    let holder = Env::with_stores(vec![scheme_url(&proxy.addr())]);
    let go = holder.path("go");
    let events = holder.path("events");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let events_arg = events.display().to_string();
    let args = ["job", "--ttl", "30s", "--events", &events_arg];
    let child = holder.spawn_run(&args, &script);
    assert!(
        wait_for(LIMIT, || direct.held("job")),
        "the holder never got the lock"
    );
    proxy.set(Mode::Reset);
    std::fs::write(&go, "").unwrap();
    assert!(
        wait_for(LIMIT, || event(&events, "release-failed").is_some()),
        "the release never failed: {:?}",
        events_of(&events)
    );
    proxy.set(Mode::Pass);
    let next = next_holder(&direct, "job");
    assert_eq!(next.previous.trim(), "released");
    let o = finish(child, LIMIT);
    assert_code(&o, 0);
    let released = event(&events, "released").expect("a released event");
    assert_eq!(released["confirmed"], true, "{released}");
}

fn events_of(path: &std::path::Path) -> Vec<serde_json::Value> {
    if path.exists() {
        events(path)
    } else {
        Vec::new()
    }
}

#[test]
fn an_unanswered_etcd_release_is_asked_again_within_the_lease() {
    let etcd = EtcdServer::start();
    let direct = Env::with_stores(vec![etcd.url()]);
    released_after_the_outage(etcd.client_port(0), |a| format!("etcd://{a}"), direct);
}

#[test]
fn an_unanswered_postgres_release_is_asked_again_within_the_lease() {
    let pg = PgServer::start();
    let url = pg.url();
    let direct = Env::with_stores(vec![url.clone()]);
    let port: u16 = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .expect("a port in the URL");
    let host = format!("127.0.0.1:{port}");
    released_after_the_outage(port, |a| url.replace(&host, a), direct);
}
