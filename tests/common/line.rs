//! A store's waiting line as a user meets it: waiters started one after another are served in
//! the order they started (file store, Redis).

use std::process::Child;
use std::time::Duration;

use super::{Env, assert_code, finish, read, stdout, wait_for};

const LIMIT: Duration = Duration::from_secs(60);

/// Waiters that are stopped (and reaped) if the test fails before they finish.
pub struct Waiters(pub Vec<Child>);

impl Drop for Waiters {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// N waiters on one held name, each started once `inspect` lists the one before it as queued,
/// each appending its index to a file once it holds: they are served in start order.
pub fn assert_served_in_arrival_order(env: &Env, n: usize) {
    let o = env.run(&["lock", "q", "--ttl", "5m"]);
    assert_code(&o, 0);
    let token = stdout(&o);
    let order = env.path("order");
    let mut waiters = Waiters(Vec::new());
    for i in 0..n {
        let script = format!("echo {i} >> {}", order.display());
        waiters.0.push(env.spawn_run(&["q"], &script));
        let queued = wait_for(LIMIT, || {
            env.inspect("q")["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == i + 1)
        });
        assert!(queued, "waiter {i} never queued: {}", env.inspect("q"));
    }
    assert_code(&env.run(&["unlock", "q", "--token", &token]), 0);
    for w in std::mem::take(&mut waiters.0) {
        assert_code(&finish(w, LIMIT), 0);
    }
    let served: Vec<usize> = read(&order).lines().map(|l| l.parse().unwrap()).collect();
    let inversions = (0..served.len())
        .flat_map(|i| (i + 1..served.len()).map(move |j| (i, j)))
        .filter(|&(i, j)| served[i] > served[j])
        .count();
    assert_eq!(
        served,
        (0..n).collect::<Vec<_>>(),
        "{inversions} of {} pairs out of order",
        n * (n - 1) / 2
    );
}
