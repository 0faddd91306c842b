//! Lock names spread over several stores (issue 15, part 2): `--shard STORES`, repeated.
//!
//! Each shard is one store or a quorum, served by its own `Engine`; this router sends each
//! name to one shard by rendezvous hashing (`hash`) and splits what spans shards (a
//! `multilock`, a lease's renewal and release) into one request per shard. With no `--shard`
//! there is one shard, the `--store` quorum, and every call goes straight to its engine: no
//! hashing, no grouping, no extra round trip.
//!
//! Shards are kept in canonical order (sorted by label), whatever order the flags came in:
//! placement, the order `multilock` takes its per-shard groups in, and the list's fingerprint
//! all follow it, so two clients with the same shards in another order agree on everything.
//! `record` keeps clients with different lists from both holding one name.

pub mod hash;
mod plain;
pub mod record;

use std::time::Duration;

use std::sync::Arc;

use futures_util::future::{join_all, select_all};
use tokio::sync::watch;

use crate::engine::{Budget, Engine, EngineError, Failed, Halt, Keeper, Lease, Session, Tally};
use crate::events::Events;
use crate::store::url::StoreUrl;
use crate::store::{Acquire, Outcome, StoreError};

pub struct Shard {
    /// The shard's stores as messages show them (secrets redacted), sorted, comma-separated:
    /// its name in placement, in the fingerprint and in output.
    pub label: String,
    /// Shared with the sessions of the groups held while a later one is waited for.
    pub engine: Arc<Engine>,
}

pub struct Shards {
    /// In canonical order (see the module's comment).
    shards: Vec<Shard>,
    namespace: String,
    /// `--shard` or `DLOCK_SHARDS` was given: grants wait for `record::check`.
    sharded: bool,
}

/// An owner-checked operation's tally on each shard it touched (shard index, tally).
pub struct Tallies(Vec<(usize, Tally)>);

impl Tallies {
    fn of(groups: &[(usize, Vec<String>)], tallies: Vec<Tally>) -> Tallies {
        Tallies(groups.iter().map(|(i, _)| *i).zip(tallies).collect())
    }

    pub fn errors(&self) -> impl Iterator<Item = &StoreError> {
        self.0.iter().flat_map(|(_, t)| &t.errors)
    }
}

impl Shards {
    /// The `--store` quorum alone: every call goes to `engine`.
    pub fn single(engine: Engine, namespace: &str) -> Shards {
        Shards {
            shards: vec![Shard {
                label: label_of(engine.stores().iter().map(|s| s.describe().to_string())),
                engine: Arc::new(engine),
            }],
            namespace: namespace.to_string(),
            sharded: false,
        }
    }

    /// Open every shard's stores at once. `lists` are the shards as given; a store in two
    /// shards is a usage error (its one record could not name two places).
    pub async fn open(
        lists: &[Vec<StoreUrl>],
        namespace: &str,
        store_timeout: Duration,
    ) -> Result<Shards, StoreError> {
        let mut labelled: Vec<(String, &[StoreUrl])> = lists
            .iter()
            .map(|urls| {
                (
                    label_of(urls.iter().map(|u| u.to_string())),
                    urls.as_slice(),
                )
            })
            .collect();
        labelled.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = std::collections::HashSet::new();
        for u in lists.iter().flatten() {
            if !seen.insert(u.to_string()) {
                return Err(StoreError::invalid(format!(
                    "the store {u} is in two shards; each store belongs to one shard"
                )));
            }
        }
        let engines = join_all(
            labelled
                .iter()
                .map(|(_, urls)| Engine::open(urls, namespace, store_timeout)),
        )
        .await;
        let mut shards = Vec::with_capacity(engines.len());
        for ((label, _), engine) in labelled.into_iter().zip(engines) {
            shards.push(Shard {
                label,
                engine: Arc::new(engine?),
            });
        }
        Ok(Shards {
            shards,
            namespace: namespace.to_string(),
            sharded: true,
        })
    }

    pub fn all(&self) -> &[Shard] {
        &self.shards
    }

    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// The index (in canonical order) of the shard `name` lives on.
    pub fn index_of(&self, name: &str) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        hash::pick(
            self.shards.iter().map(|s| s.label.as_str()),
            &self.namespace,
            name,
        )
    }

    pub fn shard_of(&self, name: &str) -> &Shard {
        &self.shards[self.index_of(name)]
    }

    /// The engine of the shard `name` lives on: for what concerns one name.
    pub fn engine(&self, name: &str) -> &Engine {
        &self.shard_of(name).engine
    }

    /// `names` (sorted) split by shard, in canonical shard order, each group still sorted.
    fn groups(&self, names: &[String]) -> Vec<(usize, Vec<String>)> {
        let mut out: Vec<(usize, Vec<String>)> = Vec::new();
        for n in names {
            let i = self.index_of(n);
            match out.iter_mut().find(|(j, _)| *j == i) {
                Some((_, g)) => g.push(n.clone()),
                None => out.push((i, vec![n.clone()])),
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out
    }

    /// Take the lease for all of `req.names`, as `Engine::acquire_until` (ended early by
    /// `halt`). Names on several shards are taken one shard's group after another in
    /// canonical order, all or none, each group's wait within what is left of `budget`.
    /// Holding the earlier groups while waiting for a later one cannot deadlock: every client
    /// with this list takes groups in the same order, and names within one shard's group are
    /// granted together. The groups already held are sessions, renewed while it waits; if
    /// one is lost, the attempt starts over.
    pub async fn acquire_until(
        &self,
        req: &Acquire,
        budget: Budget,
        busy: Option<&watch::Sender<u32>>,
        halt: Halt,
    ) -> Result<Lease, EngineError> {
        let groups = match self.shards.len() {
            1 => vec![(0, Vec::new())],
            _ => self.groups(&req.names),
        };
        if let [(i, _)] = groups.as_slice() {
            let engine = &self.shards[*i].engine;
            return engine.acquire_until(req, budget, busy, halt.raised()).await;
        }
        loop {
            if let Some(lease) = self.take_groups(req, &groups, budget, busy, &halt).await? {
                return Ok(lease);
            }
        }
    }

    /// One attempt at every group in turn, each waited for by its shard's engine, until
    /// `halt` or the loss of a group already held: the lease, or None when a held group was
    /// lost (start over). What is held when it fails is given back by its sessions.
    async fn take_groups(
        &self,
        req: &Acquire,
        groups: &[(usize, Vec<String>)],
        budget: Budget,
        busy: Option<&watch::Sender<u32>>,
        halt: &Halt,
    ) -> Result<Option<Lease>, EngineError> {
        let mut held: Vec<(usize, Session<Engine>)> = Vec::with_capacity(groups.len());
        for (i, names) in groups {
            let engine = &self.shards[*i].engine;
            let stop = async {
                tokio::select! {
                    _ = halt.clone().raised() => {}
                    _ = any_lost(&mut held) => {}
                }
            };
            let got = engine
                .acquire_until(&req.part(names), budget, busy, stop)
                .await;
            if let Ok(lease) = got.as_ref() {
                let mut part = Session::new(engine.clone(), lease.clone());
                part.keep_alive(&Events::default());
                held.push((*i, part));
            }
            let lost = held.iter().any(|(_, s)| s.health().lost.is_some());
            if lost || got.is_err() {
                // Never held as a whole, so no job ended: withdrawn.
                join_all(held.iter_mut().map(|(_, s)| s.release(Outcome::Withdrawn))).await;
                return if lost { Ok(None) } else { got.map(Some) };
            }
        }
        let parts = held
            .iter()
            .map(|(i, s)| {
                let mut lease = s.lease().clone();
                lease.deadline = s.health().deadline;
                (*i, lease)
            })
            .collect();
        Ok(Some(combine(req, parts)))
    }

    /// Renew every part; the first error if any failed.
    async fn renew_parts(&self, parts: &mut [(usize, Lease)]) -> Result<(), EngineError> {
        let results = join_all(
            parts
                .iter_mut()
                .map(|(i, l)| self.shards[*i].engine.renew(l)),
        )
        .await;
        results.into_iter().collect()
    }

    /// Renew a held lease, as `Engine::renew`; a lease over several shards is renewed on
    /// each at once, and its deadline is the earliest of theirs.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), EngineError> {
        if self.shards.len() == 1 {
            return self.shards[0].engine.renew(lease).await;
        }
        let groups = self.groups(&lease.req.names);
        if let [(i, _)] = groups.as_slice() {
            return self.shards[*i].engine.renew(lease).await;
        }
        let mut parts = split(lease, groups);
        let r = self.renew_parts(&mut parts).await;
        lease.deadline = parts
            .iter()
            .map(|(_, l)| l.deadline)
            .min()
            .unwrap_or(lease.deadline);
        r
    }

    /// Owner-checked release on every shard `names` live on, recording `outcome`.
    pub async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> Tallies {
        if self.shards.len() == 1 {
            let tally = self.shards[0].engine.release(names, token, outcome).await;
            return Tallies(vec![(0, tally)]);
        }
        let groups = self.groups(names);
        let each = groups
            .iter()
            .map(|(i, g)| self.shards[*i].engine.release(g, token, outcome));
        Tallies::of(&groups, join_all(each).await)
    }

    /// Release a held lease on every shard it spans, each asking its stores that give no
    /// answer again (`Engine::release_held`).
    pub async fn release_held(
        &self,
        lease: &Lease,
        outcome: Outcome,
        failed: &Failed<'_>,
    ) -> Tallies {
        let groups = match self.shards.len() {
            1 => vec![(0, lease.req.names.clone())],
            _ => self.groups(&lease.req.names),
        };
        let parts = split(lease, groups.clone());
        let each = parts
            .iter()
            .map(|(i, part)| self.shards[*i].engine.release_held(part, outcome, failed));
        Tallies::of(&groups, join_all(each).await)
    }

    /// Owner-checked extension on every shard `names` live on.
    pub async fn extend(&self, names: &[String], token: &str, ttl: Duration) -> Tallies {
        if self.shards.len() == 1 {
            return Tallies(vec![(
                0,
                self.shards[0].engine.extend(names, token, ttl).await,
            )]);
        }
        let groups = self.groups(names);
        let each = groups
            .iter()
            .map(|(i, g)| self.shards[*i].engine.extend(g, token, ttl));
        Tallies::of(&groups, join_all(each).await)
    }

    /// The outcome of an owner-checked operation: done on every shard it touched.
    pub fn verdict(&self, t: Tallies) -> Result<usize, EngineError> {
        let mut done = 0;
        for (i, tally) in t.0 {
            done += self.shards[i].engine.verdict(tally)?;
        }
        Ok(done)
    }

    /// Whether a majority of every shard touched confirmed the operation.
    pub fn confirmed(&self, t: &Tallies) -> bool {
        t.0.iter()
            .all(|(i, tally)| tally.yes >= self.shards[*i].engine.majority())
    }
}

/// Until one of `held` is known to be lost; never, while none is held.
async fn any_lost(held: &mut [(usize, Session<Engine>)]) {
    if held.is_empty() {
        return std::future::pending().await;
    }
    select_all(held.iter_mut().map(|(_, s)| Box::pin(s.lost()))).await;
}

/// A shard's label from its stores' URLs as shown.
fn label_of(urls: impl Iterator<Item = String>) -> String {
    let mut urls: Vec<String> = urls.collect();
    urls.sort();
    urls.join(",")
}

/// One lease from the parts taken on each shard: grants in `req.names` order, the earliest
/// deadline.
fn combine(req: &Acquire, parts: Vec<(usize, Lease)>) -> Lease {
    let deadline = parts.iter().map(|(_, l)| l.deadline).min().expect("a part");
    let grants = req
        .names
        .iter()
        .map(|n| {
            parts
                .iter()
                .find_map(|(_, l)| {
                    let k = l.req.names.iter().position(|m| m == n)?;
                    Some(l.grants[k].clone())
                })
                .expect("every name was granted")
        })
        .collect();
    Lease {
        req: req.clone(),
        grants,
        deadline,
    }
}

/// A lease over several shards as one lease per shard, for renewing each.
fn split(lease: &Lease, groups: Vec<(usize, Vec<String>)>) -> Vec<(usize, Lease)> {
    groups
        .into_iter()
        .map(|(i, names)| {
            let grants = names
                .iter()
                .map(|n| {
                    let k = lease.req.names.iter().position(|m| m == n).expect("a name");
                    lease.grants[k].clone()
                })
                .collect();
            let req = lease.req.part(&names);
            (
                i,
                Lease {
                    req,
                    grants,
                    deadline: lease.deadline,
                },
            )
        })
        .collect()
}

/// A lease over the shards is renewed and released through the router (see `Session`).
impl Keeper for Shards {
    type Released = Tallies;

    async fn renew(&self, lease: &mut Lease) -> Result<(), EngineError> {
        Shards::renew(self, lease).await
    }

    async fn release(&self, lease: &Lease, outcome: Outcome, failed: &Failed<'_>) -> Tallies {
        self.release_held(lease, outcome, failed).await
    }
}
