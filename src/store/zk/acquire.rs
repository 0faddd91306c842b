//! Taking a lock: enqueue once, judge the queue, grant by compare-and-set, or watch.

use std::time::Duration;

use zookeeper_client::{Client, CreateMode, Error, MultiWriteError, MultiWriteResult};

use super::layout::{Paths, Record, entry_data};
use super::{CONTENTION, Held, Hold, Inner, Mine, View, bad_path, classify, ms};
use crate::store::queue::{Turn, turn};
use crate::store::{Acquire, Attempt, Granted, Mode, Previous, StoreResult};

impl Inner {
    pub(super) async fn acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        let c = self.client(Some(req)).await?;
        let own = self.enqueue(&c, req).await?;
        let mut retry_after = None;
        for _ in 0..CONTENTION {
            let views = self.view(&c, &req.names, Some(&own)).await?;
            if let Some(g) = already_granted(req, &views) {
                self.granted(req);
                return Ok(Attempt::Granted(g));
            }
            if views.iter().any(|v| v.own.is_none()) {
                // Our entry is gone (its session expired, or `unlock --force`): enqueue again
                // on the next attempt, at the back, as any newcomer.
                self.forget(&req.token);
                return Ok(Attempt::busy(Some(Duration::ZERO)));
            }
            let held = self.held(&c, &req.names, &views, None, false).await?;
            let mut watch = Vec::new();
            retry_after = None;
            for (i, v) in views.iter().enumerate() {
                let live: Vec<&Held> = held[i].iter().filter(|h| h.left_ms > 0).collect();
                // Ahead of us: what cannot be read (as exclusive holders), the live detached
                // holders, then the queue entries before ours, in order.
                let mut ahead: Vec<(&str, Option<Mode>)> =
                    v.undecodable.iter().map(|n| (n.as_str(), None)).collect();
                ahead.extend(
                    live.iter()
                        .map(|h| (h.child.node.as_str(), Some(h.child.mode))),
                );
                for ch in v.children.iter().filter(|ch| ch.queued()) {
                    if ch.node == own[i] {
                        break;
                    }
                    ahead.push((&ch.node, Some(ch.mode)));
                }
                let nodes = match turn(req.modes[i], &ahead) {
                    Turn::Hold => None,
                    Turn::After(node) => Some(vec![node]),
                    Turn::Slots(nodes) => Some(nodes),
                };
                if let Some(nodes) = nodes {
                    watch.extend(nodes.iter().map(|n| self.paths.child(&req.names[i], n)));
                    // A detached holder's lease ends without any event: look again by then.
                    for h in &live {
                        let left = Duration::from_millis(h.left_ms as u64);
                        retry_after = Some(retry_after.map_or(left, |r: Duration| r.min(left)));
                    }
                }
            }
            if watch.is_empty() {
                match self.grant(&c, req, &own, &views, &held).await? {
                    Some(g) => {
                        self.granted(req);
                        return Ok(Attempt::Granted(g));
                    }
                    None => continue,
                }
            }
            if !queue {
                self.withdraw(&c, req, &own).await?;
                return Ok(Attempt::busy(retry_after));
            }
            self.watch(&c, &req.token, watch).await?;
            return Ok(Attempt::busy(retry_after));
        }
        // Lost every compare-and-set to other grants: busy for now, like any contended lock.
        if !queue {
            self.withdraw(&c, req, &own).await?;
        }
        Ok(Attempt::busy(retry_after))
    }

    /// Our queue entries, created once per token in one multi-op (all names or none).
    async fn enqueue(&self, c: &Client, req: &Acquire) -> StoreResult<Vec<String>> {
        let state = self
            .mine
            .lock()
            .ok()
            .and_then(|m| m.get(&req.token).cloned());
        match state {
            Some(Mine::Created(nodes)) => return Ok(nodes),
            Some(Mine::Holding(holds)) => return Ok(holds.into_iter().map(|h| h.node).collect()),
            Some(Mine::Pending) => {
                // A create whose answer was lost may have happened: find it by token.
                let views = self.view(c, &req.names, None).await?;
                let found: Option<Vec<String>> = views
                    .iter()
                    .map(|v| {
                        v.children
                            .iter()
                            .find(|ch| ch.queued() && ch.token == req.token)
                            .map(|ch| ch.node.clone())
                    })
                    .collect();
                if let Some(nodes) = found {
                    self.remember(req, Mine::Created(nodes.clone()));
                    return Ok(nodes);
                }
            }
            None => {}
        }
        self.remember(req, Mine::Pending);
        let data = entry_data(ms(req.ttl), &req.meta);
        let nodes = match self.create_entries(c, req, &data).await {
            Err(Error::NoNode) => {
                self.ensure(c, &req.names).await?;
                self.create_entries(c, req, &data).await
            }
            r => r,
        }
        .map_err(|e| classify(e, "join the lock's queue"))?;
        self.remember(req, Mine::Created(nodes.clone()));
        Ok(nodes)
    }

    fn remember(&self, req: &Acquire, state: Mine) {
        if let Ok(mut m) = self.mine.lock() {
            m.insert(req.token.clone(), state);
        }
    }

    async fn create_entries(
        &self,
        c: &Client,
        req: &Acquire,
        data: &[u8],
    ) -> Result<Vec<String>, Error> {
        let opts = self.opts(CreateMode::EphemeralSequential);
        if req.names.len() == 1 {
            let prefix = self
                .paths
                .queue_prefix(&req.names[0], req.modes[0], &req.token);
            let (_, seq) = c.create(&prefix, data, &opts).await?;
            let node = format!("q-{}-{}-{seq}", req.modes[0].code(), req.token);
            return Ok(vec![node]);
        }
        let mut w = c.new_multi_writer();
        for (name, mode) in req.each() {
            w.add_create(
                &self.paths.queue_prefix(name, mode, &req.token),
                data,
                &opts,
            )?;
        }
        w.commit()
            .await
            .map_err(Error::from)?
            .into_iter()
            .map(|r| match r {
                MultiWriteResult::Create { path, .. } => {
                    Ok(path.rsplit('/').next().unwrap_or_default().to_string())
                }
                _ => Err(Error::UnexpectedError(
                    "create answered with another result".into(),
                )),
            })
            .collect()
    }

    /// The grant: one multi-op over all names that compare-and-sets each record, checks our
    /// entries are still there, drops expired detached holders, and for `lock` turns our entry
    /// into a TTL node. `None`: something changed since the view; look again.
    async fn grant(
        &self,
        c: &Client,
        req: &Acquire,
        own: &[String],
        views: &[View],
        held: &[Vec<Held>],
    ) -> StoreResult<Option<Vec<Granted>>> {
        let mut w = c.new_multi_writer();
        let mut out = Vec::with_capacity(req.names.len());
        let mut holds = Vec::with_capacity(req.names.len());
        let ttl_opts = self.opts(CreateMode::Persistent).with_ttl(req.ttl);
        for (i, name) in req.names.iter().enumerate() {
            let v = &views[i];
            for h in held[i].iter().filter(|h| h.left_ms <= 0) {
                w.add_delete(&self.paths.child(name, &h.child.node), Some(h.version))
                    .map_err(bad_path)?;
            }
            let (rec, granted) = granted_record(req, v, &held[i]);
            out.push(granted);
            w.add_set_data(&self.paths.name(name), &rec.to_bytes(), Some(v.version))
                .map_err(bad_path)?;
            holds.push(Hold {
                node: own[i].clone(),
                record: rec,
                version: -1,
            });
            let entry = self.paths.child(name, &own[i]);
            if req.detached {
                w.add_delete(&entry, None).map_err(bad_path)?;
                let node = self
                    .paths
                    .child(name, &Paths::held_node(req.modes[i], &req.token));
                w.add_create(&node, &entry_data(ms(req.ttl), &req.meta), &ttl_opts)
                    .map_err(|e| classify(e, "create the lease's node"))?;
            } else {
                w.add_check_version(&entry, -1).map_err(bad_path)?;
            }
        }
        match w.commit().await {
            Ok(results) => {
                // One setData per name, in order: the record versions our grant left.
                let versions = results.iter().filter_map(|r| match r {
                    MultiWriteResult::SetData { stat } => Some(stat.version),
                    _ => None,
                });
                for (h, v) in holds.iter_mut().zip(versions) {
                    h.version = v;
                }
                if !req.detached {
                    self.remember(req, Mine::Holding(holds));
                }
                Ok(Some(out))
            }
            Err(MultiWriteError::OperationFailed {
                source: Error::BadVersion | Error::NoNode | Error::NodeExists,
                ..
            }) => Ok(None),
            Err(e) => Err(classify(e.into(), "take the lock")),
        }
    }

    fn granted(&self, req: &Acquire) {
        if let Ok(mut w) = self.waits.lock() {
            w.remove(&req.token);
        }
        if req.detached {
            // The queue entry became the TTL node.
            if let Ok(mut m) = self.mine.lock() {
                m.remove(&req.token);
            }
        }
    }

    /// A busy attempt without queueing leaves nothing behind.
    async fn withdraw(&self, c: &Client, req: &Acquire, own: &[String]) -> StoreResult<()> {
        for (name, node) in req.names.iter().zip(own) {
            match c.delete(&self.paths.child(name, node), None).await {
                Ok(()) | Err(Error::NoNode) => {}
                Err(e) => return Err(classify(e, "leave the lock's queue")),
            }
        }
        self.forget(&req.token);
        Ok(())
    }

    /// Watch the nodes that block us (each once), waking the waiter's listener when one changes.
    async fn watch(&self, c: &Client, token: &str, paths: Vec<String>) -> StoreResult<()> {
        for path in paths {
            let notify = {
                let Ok(mut waits) = self.waits.lock() else {
                    return Ok(());
                };
                let Some(w) = waits.get_mut(token) else {
                    // No listener (the engine asked for none): nothing to wake.
                    return Ok(());
                };
                if !w.watching.insert(path.clone()) {
                    continue;
                }
                w.notify.clone()
            };
            match c.check_and_watch_stat(&path).await {
                Ok((Some(_), watcher)) => {
                    let (waits, token) = (self.waits.clone(), token.to_string());
                    tokio::spawn(async move {
                        watcher.changed().await;
                        if let Ok(mut waits) = waits.lock()
                            && let Some(w) = waits.get_mut(&token)
                        {
                            w.watching.remove(&path);
                        }
                        notify.notify_one();
                    });
                }
                Ok((None, _)) => {
                    self.unwatch(token, &path);
                    notify.notify_one();
                }
                Err(e) => {
                    self.unwatch(token, &path);
                    return Err(classify(e, "watch the lock"));
                }
            }
        }
        Ok(())
    }

    fn unwatch(&self, token: &str, path: &str) {
        if let Ok(mut waits) = self.waits.lock()
            && let Some(w) = waits.get_mut(token)
        {
            w.watching.remove(path);
        }
    }
}

/// The token already holds every name (a grant whose answer was lost): the same grant again.
fn already_granted(req: &Acquire, views: &[View]) -> Option<Vec<Granted>> {
    views
        .iter()
        .map(|v| {
            let fence = *v.record.open.get(&req.token)?;
            v.children
                .iter()
                .any(|ch| ch.token == req.token)
                .then(|| Granted {
                    fence,
                    previous: Previous::parse(&v.record.previous),
                    started: None,
                })
        })
        .collect()
}

/// The name's record once `req` is granted over view `v` (with `held`, the detached holders
/// it shows), and what the grant answers: leases granted and not released whose nodes are
/// gone ended by expiry; the fence is above the record's and our entry's creation.
fn granted_record(req: &Acquire, v: &View, held: &[Held]) -> (Record, Granted) {
    let mut rec = v.record.clone();
    let alive = |t: &str| {
        v.children.iter().any(|ch| ch.queued() && ch.token == t)
            || held.iter().any(|h| h.left_ms > 0 && h.child.token == t)
    };
    let before = rec.open.len();
    rec.open.retain(|t, _| alive(t));
    if rec.open.len() < before {
        rec.previous = Previous::Expired.text();
    }
    let czxid = v.own.map_or(0, |s| s.czxid.max(0) as u64);
    let fence = czxid.max(rec.fence + 1);
    let granted = Granted {
        fence,
        previous: Previous::parse(&rec.previous),
        started: None,
    };
    rec.fence = fence;
    rec.open.insert(req.token.clone(), fence);
    rec.since.retain(|t, _| rec.open.contains_key(t));
    if let Some(at) = crate::meta::parse(&req.meta)["acquired_at"].as_str() {
        rec.since.insert(req.token.clone(), at.to_string());
    }
    (rec, granted)
}
