//! The waiter-kill fault: SIGKILL a `dlock run` while it waits for the lock. A blocker holds
//! the lock (the other clients hold off meanwhile) so that the victim has to wait; it is killed
//! once the store lists it among the waiters (stores with a queue) or after a quarter of the
//! ttl. Nothing of it may be left behind (the final leftover check: etcd and ZooKeeper queue
//! entries, Redis waiter lists, SQL waiter rows), and the queue must move on: someone else
//! enters within the ttl and a little more (the stuck check), even where the lock was handed
//! to the dead waiter on release.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::signal;
use crate::{Fault, Injected, Run, mono_ns};

impl Run {
    pub(crate) fn waiter_kill_fault(&self, n: usize) -> Injected {
        let ttl = self.cfg.ttl;
        let (blocker, victim) = (format!("b{n}"), format!("v{n}-waiter-kill"));
        self.hold_off.store(true, Ordering::SeqCst);
        let mut block = self.dlock_run(&blocker, ttl / 2).spawn().expect("spawn");
        let blocking = self
            .wait_entered(&blocker, &mut block, Duration::from_secs(60))
            .is_some();
        let mut child = self
            .dlock_run(&victim, self.cfg.hold)
            .spawn()
            .expect("spawn");
        let pid = child.id();
        let start = Instant::now();
        let mut listed = false;
        while blocking && start.elapsed() < ttl / 4 && !listed {
            listed = self.listed("waiters", pid);
        }
        let mut at = None;
        let outcome =
            if self.section_of(&victim).is_some() || matches!(child.try_wait(), Ok(Some(_))) {
                "entered first (or ended) before it could be killed waiting".to_string()
            } else {
                signal(pid, libc::SIGKILL);
                at = Some(mono_ns());
                format!(
                    "killed after {} ms of waiting ({})",
                    start.elapsed().as_millis(),
                    if listed {
                        "listed among the waiters"
                    } else {
                        "not listed"
                    }
                )
            };
        self.hold_off.store(false, Ordering::SeqCst);
        let code = self.finish(&mut child, Duration::from_secs(10));
        self.finish(&mut block, ttl * 4 + Duration::from_secs(10));
        Injected {
            fault: Fault::WaiterKill,
            victim: Some(victim),
            at,
            exit: None,
            outcome: format!("{outcome}, dlock exit {code}"),
        }
    }
}
