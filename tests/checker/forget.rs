//! Stores that forget, at once and without warning: Redis servers restarted empty (one, or
//! two in turn, back to back or spaced), the Redis Cluster master of the name restarted empty
//! before its replica can take over (the replica then copies the empty master), the file
//! store's state files wiped, and a NATS server, S3 gateway or DynamoDB Local restarted
//! without its data. Nothing waits for the leases to run out first: the engine's
//! amnesia rule keeps a quorum safe, and fences floored at the store's clock keep rising.
//!
//! A single store that forgot cannot be told from a first use: the section running at the
//! fault may meet the next one until its holder's next renewal finds the lease gone. Such an
//! overlap is counted apart (`beyond-claims-overlaps=forget-one:N`) only within its bounds
//! (`allowed_overlap`); any other is an overlap.

use std::thread;
use std::time::Duration;

use crate::common::wait_for;
use crate::{Fault, Injected, Section, Setup, Stores, cluster};

pub(crate) fn inject(fault: Fault, setup: &mut Setup, ttl: Duration) -> String {
    match &mut setup.stores {
        Stores::Redis(servers) => {
            let two = fault != Fault::ForgetOne && servers.len() > 1;
            servers[0].start_again_empty();
            if two {
                if fault == Fault::ForgetTwoSpaced {
                    thread::sleep(ttl / 2);
                }
                servers[1].start_again_empty();
            }
            let n = if two { 2 } else { 1 };
            format!("{n} of {} servers restarted empty", servers.len())
        }
        Stores::Cluster(c) => {
            let old = c.master_of(&cluster::cluster_key());
            // The fixture's nodes keep no data, only their cluster config: a plain restart,
            // well inside the node timeout, brings the master back empty and still master.
            c.nodes[old].restart();
            let healthy = wait_for(Duration::from_secs(30), || c.healthy());
            format!("master {old} restarted empty, cluster healthy {healthy}")
        }
        Stores::File(d) => {
            // The state files and the journal; the flock file stays, as it must for any two
            // processes at work to keep excluding each other.
            let ns = d.path().join("default");
            let mut n = 0;
            for e in std::fs::read_dir(&ns).into_iter().flatten().flatten() {
                if e.file_name() != ".lock" && std::fs::remove_file(e.path()).is_ok() {
                    n += 1;
                }
            }
            format!("{n} state files wiped")
        }
        Stores::Nats(n) => {
            n.start_again_empty();
            "the server restarted with its store dir emptied".to_string()
        }
        Stores::S3(s) => {
            s.start_again_empty();
            "the gateway restarted with its data dir emptied".to_string()
        }
        Stores::Dynamo(d) => {
            d.start_again_empty();
            "the server restarted without its data file".to_string()
        }
        _ => unreachable!("no forgetting fault on a durable store"),
    }
}

/// Whether the overlap of `a` and `b` is the one a single store that forgot allows, and no
/// more. Of the two, the lower fence is the grant the store forgot (`old`), the higher one a
/// grant made after (`new`; under load its command may even start first, so entry order says
/// nothing): a forget-one fault began before `new` entered; `old` held at the fault or was
/// granted during it (it entered at most a ttl after the fault's end), and ended within a ttl
/// of the later of its entry and the fault's end (its holder learns at its next renewal; a
/// fenced resource refuses it once `new` wrote). On a quorum (`alone` false) none is allowed:
/// a member that forgot abstains.
pub(crate) fn allowed_overlap(
    a: &Section,
    b: &Section,
    faults: &[Injected],
    spans: &[(u64, u64)],
    ttl: Duration,
    alone: bool,
) -> bool {
    let (old, new) = if a.fence < b.fence { (a, b) } else { (b, a) };
    let ttl = ttl.as_nanos() as u64;
    alone
        && old.fence < new.fence
        && faults.iter().zip(spans).any(|(f, &(began, ended))| {
            f.fault == Fault::ForgetOne
                && began <= new.enter
                && old.enter < ended + ttl
                && old.end() <= old.enter.max(ended) + ttl
        })
}
