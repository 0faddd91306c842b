//! Bells in a directory of the test's own: the oldest live waiter rung, one per release,
//! dead ones passed over and removed, stores and names kept apart.

use std::path::Path;
use std::time::Duration;

use tokio::time::timeout;

use super::*;

fn bells(dir: &Path, scope: &str) -> HostBells {
    HostBells {
        scope: scope.into(),
        dir: dir.join("bells"),
    }
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// Whether `bell` rings within a short while.
async fn rings(bell: &mut Bell) -> bool {
    timeout(Duration::from_millis(100), bell.rung())
        .await
        .is_ok()
}

/// How many bells are in the directory (none once it is gone).
fn left(dir: &Path) -> usize {
    fs::read_dir(dir.join("bells")).map_or(0, |d| d.count())
}

#[tokio::test]
async fn a_release_rings_the_oldest_waiter_only_and_the_next_one_next() {
    let tmp = tempfile::tempdir().unwrap();
    let store = bells(tmp.path(), "s3://b");
    let mut first = store.hang(&names(&["job"])).unwrap();
    let mut second = store.hang(&names(&["job"])).unwrap();
    store.ring(&names(&["job"]), || None);
    assert!(rings(&mut first).await, "the oldest waiter was not rung");
    assert!(!rings(&mut second).await, "a second waiter was rung too");
    drop(first);
    store.ring(&names(&["job"]), || None);
    assert!(rings(&mut second).await);
    drop(second);
    assert!(
        !tmp.path().join("bells").exists(),
        "the last waiter left its directory"
    );
}

#[tokio::test]
async fn a_dead_waiters_bell_is_passed_over_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = bells(tmp.path(), "s3://b");
    let mut live = store.hang(&names(&["job"])).unwrap();
    // Older than the live one, and nobody reads it: its waiter was killed.
    let dead = tmp
        .path()
        .join("bells")
        .join(format!("{}{:020}-1", store.key("job"), 0));
    crate::sys::mkfifo(&dead, 0o600).unwrap();
    store.ring(&names(&["job"]), || None);
    assert!(rings(&mut live).await, "the dead bell took the ring");
    assert!(!dead.exists(), "the dead bell was left");
}

#[tokio::test]
async fn a_new_waiter_sweeps_dead_bells_of_its_name_and_keeps_live_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let store = bells(tmp.path(), "s3://b");
    let _live = store.hang(&names(&["job"])).unwrap();
    let dead = tmp
        .path()
        .join("bells")
        .join(format!("{}{:020}-1", store.key("job"), 0));
    crate::sys::mkfifo(&dead, 0o600).unwrap();
    let _next = store.hang(&names(&["job"])).unwrap();
    assert!(!dead.exists(), "a dead bell was left");
    assert_eq!(left(tmp.path()), 2);
}

#[tokio::test]
async fn other_stores_and_names_ring_nobody_and_several_names_share_one_bell() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, other) = (bells(tmp.path(), "s3://b"), bells(tmp.path(), "s3://c"));
    let mut both = store.hang(&names(&["a", "b"])).unwrap();
    other.ring(&names(&["a"]), || None);
    store.ring(&names(&["c"]), || None);
    assert!(
        !rings(&mut both).await,
        "rung by another store's or name's release"
    );
    store.ring(&names(&["b"]), || None);
    assert!(rings(&mut both).await);
    assert_eq!(left(tmp.path()), 2);
    drop(both);
    assert_eq!(left(tmp.path()), 0);
}

#[tokio::test]
async fn another_users_directory_is_never_used() {
    let tmp = tempfile::tempdir().unwrap();
    let store = bells(tmp.path(), "s3://b");
    fs::create_dir(tmp.path().join("bells")).unwrap();
    // Open to others: whoever made it could read who waits, or take the rings.
    let open = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    fs::set_permissions(tmp.path().join("bells"), open).unwrap();
    assert!(store.hang(&names(&["job"])).is_none());
}

#[tokio::test]
async fn a_ring_carries_what_the_release_gave_and_the_last_ring_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let store = bells(tmp.path(), "s3://b");
    let mut bell = store.hang(&names(&["job"])).unwrap();
    store.ring(&names(&["job"]), || Some(b"record one".to_vec()));
    assert_eq!(bell.rung().await.as_deref(), Some(&b"record one"[..]));
    // Two releases before the waiter reads: only the later record is worth deciding on.
    store.ring(&names(&["job"]), || Some(b"record one".to_vec()));
    store.ring(&names(&["job"]), || Some(b"record two".to_vec()));
    assert_eq!(bell.rung().await.as_deref(), Some(&b"record two"[..]));
    // A plain ring after one that carried a record: that record may be stale.
    store.ring(&names(&["job"]), || Some(b"record three".to_vec()));
    store.ring(&names(&["job"]), || None);
    assert_eq!(bell.rung().await, None);
    // Too large for one atomic write to a pipe: rung plainly, never cut.
    store.ring(&names(&["job"]), || Some(vec![b'x'; libc::PIPE_BUF]));
    assert_eq!(bell.rung().await, None);
}
