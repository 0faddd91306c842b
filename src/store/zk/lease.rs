//! Owner-checked renew and release, force, and fence raises: each one multi-op that
//! compare-and-sets the record, retried when a concurrent change wins.

use std::time::Duration;

use zookeeper_client::{Client, CreateMode, Error, MultiWriteError};

use super::layout::entry_data;
use super::{CONTENTION, Inner, Mine, bad_path, classify, ms};
use crate::store::{Outcome, Previous, StoreError, StoreResult};

/// A lost compare-and-set: read again and retry.
fn raced(e: &MultiWriteError) -> bool {
    matches!(
        e,
        MultiWriteError::OperationFailed {
            source: Error::BadVersion | Error::NoNode | Error::NodeExists,
            ..
        }
    )
}

fn contended(doing: &str) -> StoreError {
    StoreError::unavailable(format!(
        "cannot {doing}: the lock kept changing under concurrent grants; try again"
    ))
}

impl Inner {
    /// A `run` lease lives in the session: it holds while its entry exists. A `lock` lease is a
    /// TTL node, re-created with the new ttl (ZooKeeper fixes a node's TTL when it is created),
    /// version-checked so that a grant that dropped it as expired wins over us.
    pub(super) async fn renew(
        &self,
        names: &[String],
        token: &str,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let c = self.client(None).await?;
        let views = self.view(&c, names, None).await?;
        let mut detached = false;
        for v in &views {
            if !v.record.open.contains_key(token) {
                return Ok(false);
            }
            match v.children.iter().find(|ch| ch.token == token) {
                None => return Ok(false),
                Some(ch) => detached |= !ch.queued(),
            }
        }
        if !detached {
            return Ok(true);
        }
        let held = self.held(&c, names, &views, Some(token), false).await?;
        let opts = self.opts(CreateMode::Persistent).with_ttl(ttl);
        let mut w = c.new_multi_writer();
        for (i, name) in names.iter().enumerate() {
            for h in &held[i] {
                if h.left_ms <= 0 {
                    return Ok(false);
                }
                let path = self.paths.child(name, &h.child.node);
                w.add_delete(&path, Some(h.version)).map_err(bad_path)?;
                w.add_create(&path, &entry_data(ms(ttl), &h.meta), &opts)
                    .map_err(|e| classify(e, "extend the lease"))?;
            }
        }
        match w.commit().await {
            Ok(_) => Ok(true),
            Err(e) if raced(&e) => Ok(false),
            Err(e) => Err(classify(e.into(), "extend the lease")),
        }
    }

    /// Remove whatever `token` holds or has queued, and record how its lease ended.
    ///
    /// An attempt whose answer was not heard may have been granted: while answers are lost,
    /// the usual release (read, then compare-and-set) never gets past its read, and a wait
    /// that rides the outage out keeps the session, and so the grant's entry, alive. So the
    /// session is given up first (its close needs no answer to act, and takes the entry with
    /// it), unless this process holds another lease in it; then the usual release follows on
    /// a new session, which also tidies the record once the store answers.
    pub(super) async fn release(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
    ) -> StoreResult<bool> {
        if let Ok(mut w) = self.waits.lock() {
            w.remove(token);
        }
        if self.may_abandon_for(token) {
            self.conn.abandon().await;
            self.mark_unheard(token, false);
            if let Ok(mut m) = self.mine.lock() {
                m.remove(token);
            }
        }
        let c = self.client(None).await?;
        if let Some(true) = self.release_held(&c, names, token, outcome).await? {
            return Ok(true);
        }
        for _ in 0..CONTENTION {
            let views = self.view(&c, names, None).await?;
            let held = self.held(&c, names, &views, Some(token), false).await?;
            let mut w = c.new_multi_writer();
            let (mut ops, mut any) = (0, false);
            for (i, name) in names.iter().enumerate() {
                let v = &views[i];
                let mut alive = false;
                for ch in v.children.iter().filter(|ch| ch.token == token) {
                    let version = if ch.queued() {
                        alive = true;
                        None
                    } else {
                        let Some(h) = held[i].iter().find(|h| h.child.node == ch.node) else {
                            continue;
                        };
                        alive |= h.left_ms > 0;
                        Some(h.version)
                    };
                    w.add_delete(&self.paths.child(name, &ch.node), version)
                        .map_err(bad_path)?;
                    ops += 1;
                }
                if v.record.open.contains_key(token) {
                    let mut rec = v.record.clone();
                    rec.open.remove(token);
                    if let Some(p) = outcome.ends(alive) {
                        rec.previous = p.text();
                    }
                    any |= alive;
                    w.add_set_data(&self.paths.name(name), &rec.to_bytes(), Some(v.version))
                        .map_err(bad_path)?;
                    ops += 1;
                }
            }
            if ops == 0 {
                self.forget(token);
                return Ok(false);
            }
            match w.commit().await {
                Ok(_) => {
                    self.forget(token);
                    return Ok(any);
                }
                Err(e) if raced(&e) => continue,
                Err(e) => return Err(classify(e.into(), "release the lock")),
            }
        }
        Err(contended("release the lock"))
    }

    /// The release of a `run` lease this process was granted, in one round trip: delete the
    /// entry and compare-and-set the record as the grant left it. `None`: not ours or the
    /// record moved on (another grant or release): the caller reads and retries.
    async fn release_held(
        &self,
        c: &Client,
        names: &[String],
        token: &str,
        outcome: Outcome,
    ) -> StoreResult<Option<bool>> {
        let holds = match self.mine.lock().ok().and_then(|m| m.get(token).cloned()) {
            Some(Mine::Holding(h)) if h.len() == names.len() => h,
            _ => return Ok(None),
        };
        let mut w = c.new_multi_writer();
        for (name, h) in names.iter().zip(&holds) {
            let mut rec = h.record.clone();
            rec.open.remove(token);
            if let Some(p) = outcome.previous() {
                rec.previous = p.text();
            }
            w.add_delete(&self.paths.child(name, &h.node), None)
                .map_err(bad_path)?;
            w.add_set_data(&self.paths.name(name), &rec.to_bytes(), Some(h.version))
                .map_err(bad_path)?;
        }
        match w.commit().await {
            Ok(_) => {
                self.forget(token);
                Ok(Some(true))
            }
            Err(e) if raced(&e) => Ok(None),
            Err(e) => Err(classify(e.into(), "release the lock")),
        }
    }

    /// Drop every holder; the next holder hears "expired" (its predecessor did not finish).
    pub(super) async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let c = self.client(None).await?;
        for _ in 0..CONTENTION {
            let views = self.view(&c, names, None).await?;
            let held = self.held(&c, names, &views, None, false).await?;
            let mut w = c.new_multi_writer();
            let (mut ops, mut any) = (0, false);
            for (i, name) in names.iter().enumerate() {
                let v = &views[i];
                for h in &held[i] {
                    any |= h.left_ms > 0;
                    w.add_delete(&self.paths.child(name, &h.child.node), Some(h.version))
                        .map_err(bad_path)?;
                    ops += 1;
                }
                // A child this version cannot read counts as a holder (see
                // `crate::store::queue`): forcing the lock free drops it too, or nothing could.
                for node in &v.undecodable {
                    any = true;
                    w.add_delete(&self.paths.child(name, node), None)
                        .map_err(bad_path)?;
                    ops += 1;
                }
                for ch in v.children.iter().filter(|ch| ch.queued()) {
                    if v.record.open.contains_key(&ch.token) {
                        any = true;
                        w.add_delete(&self.paths.child(name, &ch.node), None)
                            .map_err(bad_path)?;
                        ops += 1;
                    }
                }
                if !v.record.open.is_empty() {
                    let mut rec = v.record.clone();
                    rec.open.clear();
                    rec.previous = Previous::Expired.text();
                    w.add_set_data(&self.paths.name(name), &rec.to_bytes(), Some(v.version))
                        .map_err(bad_path)?;
                    ops += 1;
                }
            }
            if ops == 0 {
                return Ok(false);
            }
            match w.commit().await {
                Ok(_) => return Ok(any),
                Err(e) if raced(&e) => continue,
                Err(e) => return Err(classify(e.into(), "force the lock free")),
            }
        }
        Err(contended("force the lock free"))
    }

    /// The bakery rule of a quorum: the next fence handed out here exceeds `fences`.
    pub(super) async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        let c = self.client(None).await?;
        for _ in 0..CONTENTION {
            let views = self.view(&c, names, None).await?;
            if views.iter().any(|v| !v.exists) {
                self.ensure(&c, names).await?;
                continue;
            }
            let mut w = c.new_multi_writer();
            let mut ops = 0;
            for ((name, v), &fence) in names.iter().zip(&views).zip(fences) {
                if v.record.fence < fence {
                    let mut rec = v.record.clone();
                    rec.fence = fence;
                    w.add_set_data(&self.paths.name(name), &rec.to_bytes(), Some(v.version))
                        .map_err(bad_path)?;
                    ops += 1;
                }
            }
            if ops == 0 {
                return Ok(());
            }
            match w.commit().await {
                Ok(_) => return Ok(()),
                Err(e) if raced(&e) => continue,
                Err(e) => return Err(classify(e.into(), "raise the fence")),
            }
        }
        Err(contended("raise the fence"))
    }
}
