//! The queue on real files: arrival order, one wake per release, dead waiters passed over.

use super::super::FileStore;
use super::super::watch::DirWatch;
use super::super::watch::tests::exclusive;
use crate::store::{Acquire, Attempt, Mode, Outcome, Store};
use std::os::fd::AsRawFd;

/// A store in a fresh directory with `holder` granted.
async fn store_held_by(holder: &Acquire) -> (tempfile::TempDir, FileStore) {
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::open(root.path(), "t", Default::default()).unwrap();
    assert!(granted(&store, holder).await, "the holder was not granted");
    (root, store)
}

async fn granted(store: &FileStore, req: &Acquire) -> bool {
    matches!(
        store.try_acquire(req, true).await.unwrap(),
        Attempt::Granted(_)
    )
}

/// A waiter as the engine makes one: its listener, then its queued attempt (busy).
async fn queue(store: &FileStore, req: &Acquire) -> DirWatch {
    let watch = DirWatch::new(
        &store.backend.0.dir,
        req.names
            .iter()
            .map(|n| super::names::file_name(n))
            .collect(),
        store.backend.0.clone(),
        req.clone(),
    )
    .unwrap();
    assert!(!granted(store, req).await, "granted past the queue");
    watch
}

/// Whether a waiter's bell has something to read now: it was woken.
fn woken(w: &DirWatch) -> bool {
    let mut p = libc::pollfd {
        fd: w.bell().get_ref().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Read the bell empty, so the next wake shows.
fn hush(w: &DirWatch) {
    let mut buf = [0u8; 64];
    while let Ok(n) = std::io::Read::read(&mut w.bell().get_ref(), &mut buf) {
        if n == 0 {
            break;
        }
    }
}

fn request(mode: Mode) -> Acquire {
    Acquire {
        modes: vec![mode],
        ..exclusive("q")
    }
}

/// Ten exclusive waiters: each release wakes exactly one, the next in arrival order, and the
/// lock passes down the queue in that order.
#[tokio::test]
async fn each_release_wakes_the_next_waiter_only() {
    let holder = exclusive("q");
    let (_root, store) = store_held_by(&holder).await;
    let reqs: Vec<Acquire> = (0..10).map(|_| exclusive("q")).collect();
    let mut watches = Vec::new();
    for r in &reqs {
        watches.push(queue(&store, r).await);
    }
    let st = store.inspect("q").await.unwrap();
    let order: Vec<String> = reqs
        .iter()
        .map(|r| crate::names::owner_id(&r.token))
        .collect();
    let listed: Vec<String> = st.waiters.iter().map(|w| w.owner.clone()).collect();
    assert_eq!(listed, order, "inspect lists the waiters in arrival order");
    watches.iter().for_each(hush);
    let mut releasing = holder;
    for (i, r) in reqs.iter().enumerate() {
        assert!(
            store
                .release(&releasing.names, &releasing.token, Outcome::Released)
                .await
                .unwrap()
        );
        let awake: Vec<usize> = (0..watches.len()).filter(|&j| woken(&watches[j])).collect();
        assert_eq!(awake, vec![i], "release {i} woke {awake:?}");
        // A later waiter that looks anyway (its poll) is still kept out.
        if let Some(later) = reqs.get(i + 1) {
            assert!(!granted(&store, later).await, "waiter {} passed {i}", i + 1);
        }
        assert!(
            granted(&store, r).await,
            "the woken waiter {i} was not granted"
        );
        hush(&watches[i]);
        releasing = r.clone();
    }
}

/// A release lets in the next compatible run of `--shared` waiters (and wakes those only),
/// and a `--shared` request after a queued exclusive one waits behind it.
#[tokio::test]
async fn a_release_wakes_the_next_run_of_sharers_and_no_reader_passes_a_writer() {
    let holder = exclusive("q");
    let (_root, store) = store_held_by(&holder).await;
    let (s1, s2, x, s3) = (
        request(Mode::Shared),
        request(Mode::Shared),
        exclusive("q"),
        request(Mode::Shared),
    );
    let watches = [
        queue(&store, &s1).await,
        queue(&store, &s2).await,
        queue(&store, &x).await,
        queue(&store, &s3).await,
    ];
    watches.iter().for_each(hush);
    assert!(
        store
            .release(&holder.names, &holder.token, Outcome::Released)
            .await
            .unwrap()
    );
    let awake: Vec<bool> = watches.iter().map(woken).collect();
    assert_eq!(awake, [true, true, false, false]);
    assert!(granted(&store, &s1).await && granted(&store, &s2).await);
    assert!(
        !granted(&store, &s3).await,
        "a reader passed a queued writer"
    );
    assert!(!granted(&store, &request(Mode::Shared)).await);
}

/// A waiter that died while queued (its flock gone with its process) blocks nobody: the
/// release wakes the one behind it, and inspect no longer lists it.
#[tokio::test]
async fn a_dead_waiter_is_passed_over() {
    let holder = exclusive("q");
    let (_root, store) = store_held_by(&holder).await;
    let (dead, next) = (exclusive("q"), exclusive("q"));
    let gone = queue(&store, &dead).await;
    let watch = queue(&store, &next).await;
    // What a killed process leaves: its entry, and its bell that nobody reads.
    let bell = store
        .backend
        .0
        .bells
        .0
        .lock()
        .unwrap()
        .remove(&dead.token)
        .unwrap();
    let path = bell.path.clone();
    drop(bell);
    drop(gone);
    crate::sys::mkfifo(&path, 0o600).unwrap();
    let meta = super::meta_path(&path);
    std::fs::write(&meta, "{}").unwrap();
    assert_eq!(store.inspect("q").await.unwrap().waiters.len(), 1);
    hush(&watch);
    assert!(
        store
            .release(&holder.names, &holder.token, Outcome::Released)
            .await
            .unwrap()
    );
    assert!(woken(&watch), "the waiter behind a dead one was not woken");
    assert!(granted(&store, &next).await);
    assert!(!path.exists(), "the dead waiter's bell stayed");
    assert!(!meta.exists(), "the dead waiter's metadata stayed");
}

/// Forty waiters with a holder's usual metadata: the state file every operation re-reads
/// and re-writes keeps the queue's order only (it held each waiter's metadata, escaped,
/// 10 KB here), and `inspect` still shows each waiter's own metadata, from beside its bell.
#[tokio::test]
async fn the_state_file_keeps_the_queue_short_and_inspect_shows_each_waiters_metadata() {
    let holder = exclusive("q");
    let (root, store) = store_held_by(&holder).await;
    let meta = |i: usize| {
        format!(
            r#"{{"acquired_at":"2026-11-26T20:32:11Z","command":"make deploy --target {i}","host":"build-7","pid":{i},"ppid":1,"user":"deploy","version":"0.1.0"}}"#
        )
    };
    for i in 0..40 {
        let req = Acquire {
            meta: meta(i),
            ..exclusive("q")
        };
        assert!(!granted(&store, &req).await, "granted past the queue");
    }
    let size = std::fs::metadata(root.path().join("t/q.json"))
        .unwrap()
        .len();
    assert!(size < 4096, "the state file of 40 waiters is {size} bytes");
    let st = store.inspect("q").await.unwrap();
    let pids: Vec<u64> = st
        .waiters
        .iter()
        .map(|w| w.meta["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, (0..40).collect::<Vec<u64>>());
    assert_eq!(st.waiters[3].meta["command"], "make deploy --target 3");
}
