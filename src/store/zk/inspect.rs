//! What a store knows of a name: holders (by fence) and waiters (in queue order), with their
//! metadata, read from the nodes themselves.

use zookeeper_client::{Client, Error};

use super::layout::{self, decode};
use super::{Inner, classify};
use crate::store::{Holder, LockState, Previous, StoreResult, Waiter};

impl Inner {
    pub(super) async fn inspect(&self, c: &Client, name: &str) -> StoreResult<LockState> {
        let names = [name.to_string()];
        let mut views = self.view(c, &names, None).await?;
        let Some(v) = views.pop().filter(|v| v.exists) else {
            return Ok(LockState {
                name: name.to_string(),
                ..LockState::default()
            });
        };
        let held = self
            .held(c, &names, std::slice::from_ref(&v), None, true)
            .await?;
        let queued: Vec<&layout::Child> = v.children.iter().filter(|ch| ch.queued()).collect();
        let paths: Vec<String> = queued
            .iter()
            .map(|ch| self.paths.child(name, &ch.node))
            .collect();
        let data = self.fetch(c, &paths).await?;
        let mut out = LockState {
            name: name.to_string(),
            fence: v.record.fence,
            previous: Previous::parse(&v.record.previous),
            ..LockState::default()
        };
        let mut alive = Vec::new();
        for h in held[0].iter().filter(|h| h.left_ms > 0) {
            alive.push(h.child.token.clone());
            out.holders.push(Holder {
                owner: crate::names::owner_id(&h.child.token),
                mode: h.child.mode,
                fence: v.record.open.get(&h.child.token).copied().unwrap_or(0),
                ttl_left_ms: h.left_ms as u64,
                meta: crate::meta::parse(&h.meta),
            });
        }
        for (ch, d) in queued.into_iter().zip(data) {
            let Some((bytes, _)) = d else { continue };
            let (ttl_ms, meta) = layout::parse_entry(&bytes);
            alive.push(ch.token.clone());
            match v.record.open.get(&ch.token) {
                // Held by a live session: the lease lasts as long as the session does.
                Some(&fence) => out.holders.push(Holder {
                    owner: crate::names::owner_id(&ch.token),
                    mode: ch.mode,
                    fence,
                    ttl_left_ms: ttl_ms,
                    meta: granted_at(crate::meta::parse(&meta), v.record.since.get(&ch.token)),
                }),
                None => out.waiters.push(Waiter {
                    owner: crate::names::owner_id(&ch.token),
                    mode: ch.mode,
                    meta: crate::meta::parse(&meta),
                }),
            }
        }
        if v.record.open.keys().any(|t| !alive.contains(t)) {
            // A holder's node went without a release: that lease expired.
            out.previous = Previous::Expired;
        }
        out.holders.sort_by_key(|h| h.fence);
        Ok(out)
    }

    pub(super) async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let c = self.client(None).await?;
        let nodes = match c.list_children(&self.paths.base).await {
            Ok(n) => n,
            Err(Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(classify(e, "list the locks")),
        };
        let mut names: Vec<String> = nodes
            .iter()
            .map(|n| decode(n))
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let st = self.inspect(&c, &name).await?;
            if !st.holders.is_empty() {
                out.push(st);
            }
        }
        Ok(out)
    }
}

/// A queue entry's metadata with the grant's time (`Record::since`) as its `acquired_at`.
fn granted_at(mut meta: serde_json::Value, since: Option<&String>) -> serde_json::Value {
    if let (Some(at), Some(m)) = (since, meta.as_object_mut()) {
        m.insert("acquired_at".into(), at.clone().into());
    }
    meta
}
