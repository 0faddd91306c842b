//! The partition faults of the checker: a holder cut off from its stores by fault proxies
//! (`tests/common/proxy.rs`) in front of every server it talks to, and what the record must
//! show afterwards.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::Env;
use crate::common::proxy::{Mode, Proxy};
use crate::{Fault, Injected, NAME, Run, Section, Setup, Stores, Summary, mono_ns};

impl Run {
    /// A holder cut off from its stores: the victim reaches every server through a fault
    /// proxy of its own, and once it is in its section the proxies of a majority of a quorum
    /// (every server of a single store) turn into blackholes or drop every reply. dlock must stop
    /// the child (exit 70) before the lease can run out on the stores, so within the ttl of
    /// the cut and before anybody else enters. Cut from a minority, it keeps its lock: the
    /// child runs its whole section and dlock exits 0. Cut from one member of an etcd
    /// cluster or ZooKeeper ensemble, it keeps its lock or is stopped cleanly (exit 70). The
    /// clock-rate victim (on a bent clock, see `clock.rs`) is cut as by a blackhole.
    pub(crate) fn partition_fault(&self, fault: Fault, n: usize, setup: &Setup) -> Injected {
        let ttl = self.cfg.ttl;
        let way = Proxied::new(setup);
        let (proxies, n_servers, majority) = (&way.proxies, way.proxies.len(), way.majority);
        let victim = format!("v{n}-{}", fault.name());
        let mut cmd = self.dlock_run_on(&way.env, &victim, ttl * 4);
        let rate = (fault == Fault::ClockRate).then(|| self.clock_rate());
        if let Some(rate) = rate {
            crate::clock::bend(&mut cmd, rate);
        }
        let mut child = cmd.spawn().expect("spawn the victim");
        let entered = self.wait_entered(&victim, &mut child, Duration::from_secs(60));
        let (mode, cut) = match fault {
            Fault::PartitionBlackhole | Fault::ClockRate => (Mode::Blackhole, majority),
            Fault::PartitionDropReplies => (Mode::DropReplies, majority),
            Fault::PartitionMember => (Mode::Blackhole, 1),
            _ => (Mode::Blackhole, (n_servers - 1) / 2),
        };
        // A member cut: each in turn.
        let mut order: Vec<usize> = (0..n_servers).map(|i| (i + n) % n_servers).collect();
        let mut held = String::new();
        if fault == Fault::PartitionMinority && entered.is_some() {
            // A lease may be on a bare majority only (a split vote left it off the rest): a
            // minority cut from it would leave no majority, and dlock rightly stops the child.
            // Cut the servers without the lease first, so that a majority of those with it
            // stays reachable whatever the split.
            let on = self.lease_on(&victim);
            order.sort_by_key(|&i| on[i]);
            held = format!(
                ", lease on {} of {}",
                on.iter().filter(|&&h| h).count(),
                on.len()
            );
        }
        let cut_off = &order[..cut];
        let at = entered.map(|_| {
            cut_off.iter().for_each(|&i| proxies[i].set(mode));
            mono_ns()
        });
        // The child of a victim that keeps its lease runs 4 x ttl; give it that and more.
        let (code, said) = self.finish_saying(&mut child, ttl * 6 + Duration::from_secs(10));
        // Healed only once the victim is done, so nothing it sent late can help it.
        drop(way);
        let said = said.trim().replace('\n', " / ");
        let held = match rate {
            Some(r) => format!("{held}, clock x{r}"),
            None => held,
        };
        Injected {
            fault,
            victim: Some(victim),
            at,
            exit: Some(code),
            outcome: match at {
                Some(_) => format!(
                    "servers {cut_off:?} of {n_servers} cut{held}, dlock exit {code}: {said}"
                ),
                None => format!("never entered, exit {code}: {said}"),
            },
        }
    }

    /// Per store, in order, whether it holds the lease of `client`'s section.
    fn lease_on(&self, client: &str) -> Vec<bool> {
        let token = self.section_of(client).map(|s| s.token).unwrap_or_default();
        let owner = dlock::names::owner_id(&token);
        let v = self.env.inspect(NAME);
        v["stores"]
            .as_array()
            .map(|stores| {
                stores
                    .iter()
                    .map(|st| {
                        st["holders"]
                            .as_array()
                            .is_some_and(|h| h.iter().any(|h| h["owner"] == owner.as_str()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A client's own way to the servers: one fault proxy per server named in the setup's URLs,
/// and an environment whose URLs go through them.
pub(crate) struct Proxied {
    pub(crate) proxies: Vec<Proxy>,
    pub(crate) env: Env,
    /// How many servers a cut must take to leave no majority: a majority of the stores of a
    /// quorum, or every server of a single store (the members of an etcd cluster or a
    /// ZooKeeper ensemble, the nodes of a Redis Cluster, are one store).
    pub(crate) majority: usize,
}

impl Proxied {
    pub(crate) fn new(setup: &Setup) -> Proxied {
        let urls = setup.urls();
        let ports: Vec<u16> = urls.iter().flat_map(|u| loopback_ports(u)).collect();
        let proxies: Vec<Proxy> = ports.iter().map(|&p| Proxy::to_port(p)).collect();
        let to_proxy: BTreeMap<u16, u16> = ports
            .iter()
            .zip(&proxies)
            .map(|(&s, p)| (s, p.port))
            .collect();
        let mut proxied: Vec<String> = urls
            .iter()
            .map(|u| with_ports(u, |p| to_proxy[&p]))
            .collect();
        // A cluster's client connects to the addresses the nodes announce, past any seed:
        // map each node to its proxy (`?nat_map`), replicas too, as they become masters.
        if matches!(setup.stores, Stores::Cluster(_)) {
            let map: Vec<String> = to_proxy
                .iter()
                .map(|(node, proxy)| format!("127.0.0.1:{node}=127.0.0.1:{proxy}"))
                .collect();
            proxied[0] = format!("{}&nat_map={}", proxied[0], map.join(","));
        }
        let env = Env::with_stores(proxied);
        let majority = if urls.len() > 1 {
            urls.len() / 2 + 1
        } else {
            ports.len()
        };
        Proxied {
            proxies,
            env,
            majority,
        }
    }

    pub(crate) fn set_all(&self, mode: Mode) {
        self.proxies.iter().for_each(|p| p.set(mode));
    }
}

/// The ports of the `127.0.0.1:PORT` hosts in a store URL, in order.
fn loopback_ports(url: &str) -> Vec<u16> {
    let mut out = Vec::new();
    with_ports(url, |p| {
        out.push(p);
        p
    });
    out
}

/// `url` with the port of every `127.0.0.1:PORT` host mapped by `f`.
fn with_ports(url: &str, mut f: impl FnMut(u16) -> u16) -> String {
    const HOST: &str = "127.0.0.1:";
    let mut out = String::new();
    let mut rest = url;
    while let Some(i) = rest.find(HOST) {
        out.push_str(&rest[..i + HOST.len()]);
        rest = &rest[i + HOST.len()..];
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        out.push_str(&f(rest[..digits].parse().expect("a port")).to_string());
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// What partitions must show in the record: the victim of a cut from a majority stopped
/// (dlock exit 70) within the ttl of the cut; one cut from a minority keeps its lock; one cut
/// from one member of an etcd cluster or a ZooKeeper ensemble keeps it or is stopped as from
/// a majority.
pub(crate) fn check_cuts(s: &mut Summary, secs: &[Section], faults: &[Injected], ttl: Duration) {
    for f in faults
        .iter()
        .filter(|f| f.fault == Fault::PartitionMinority)
    {
        let losses = s.minority_losses.get_or_insert(0);
        if f.at.is_some() && f.exit != Some(0) {
            *losses += 1;
            s.details.push(format!(
                "minority loss: {:?} cut from a minority ended with dlock exit {:?}",
                f.victim, f.exit
            ));
        }
    }
    // A holder cut from one member may renew through the others for a while and give up
    // later (its lease renewed all along, so no ttl bound): it keeps its lock or ends with 70.
    for f in faults.iter().filter(|f| f.fault == Fault::PartitionMember) {
        let stops = s.member_cut_stops.get_or_insert(0);
        if f.at.is_some() && f.exit == Some(70) {
            *stops += 1;
        } else if f.at.is_some() && f.exit != Some(0) {
            s.late_stops += 1;
            s.details.push(format!(
                "member cut: {:?} ended with dlock exit {:?}",
                f.victim, f.exit
            ));
        }
    }
    for f in faults
        .iter()
        .filter(|f| f.fault.cuts_majority() && f.fault != Fault::PartitionMember)
    {
        let (Some(at), Some(victim)) = (f.at, &f.victim) else {
            continue;
        };
        let end = secs
            .iter()
            .find(|x| &x.client == victim)
            .map_or(u64::MAX, Section::end);
        let stop = end.saturating_sub(at) / 1_000_000;
        s.max_cut_stop_ms = Some(s.max_cut_stop_ms.unwrap_or(0).max(stop));
        let next = secs
            .iter()
            .filter(|x| x.enter > at && &x.client != victim)
            .map(|x| (x.enter - at) / 1_000_000)
            .min();
        if let Some(next) = next {
            s.max_cut_next_ms = Some(s.max_cut_next_ms.unwrap_or(0).max(next));
        }
        if Duration::from_millis(stop) > ttl || f.exit != Some(70) {
            s.late_stops += 1;
            s.details.push(format!(
                "late stop: {victim}'s child ran {stop} ms after the {}, dlock exit {:?}",
                f.fault.name(),
                f.exit
            ));
        }
    }
}
