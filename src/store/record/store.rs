//! `RecordStore`: the `Store` contract over a `Backend`, each operation one transaction that
//! decides by `rules`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::rules::{self, Ctx, GrantRequest, Outcome, Renewal, Rows, Rules, Write};
use super::{Backend, Decision};
use crate::store::{
    Acquire, Attempt, FORGOTTEN, Health, HealthQuery, Listener, LockState, MAX_POLL,
    Outcome as End, Recall, Store, StoreError, StoreResult, TagWrite,
};

/// A `Store` over any record backend.
pub struct RecordStore<B: Backend> {
    pub backend: B,
    rules: Rules,
    /// Tokens whose last grant attempt's answer was not heard (it errored or was cut off by
    /// the engine's timeout), so the grant may have been committed unheard: their release
    /// goes out blind first (`Backend::release_unheard`).
    unheard: Mutex<HashSet<String>>,
    /// Tokens whose attempt was answered here and that are not yet granted or released: the
    /// others' attempts are first attempts, made through `Backend::transact_arrival` (so is
    /// one again after a first that got no answer).
    arrived: Mutex<HashSet<String>>,
}

/// Which transaction an operation makes (`Backend::transact` or `transact_arrival`).
#[derive(Clone, Copy, PartialEq)]
enum Tx {
    /// On records that exist already: a name without one has nothing to change.
    Existing,
    /// Creating the missing records.
    Create,
    /// A request's first attempt (creating the missing records).
    Arrival,
}

impl<B: Backend> RecordStore<B> {
    pub fn new(backend: B) -> RecordStore<B> {
        RecordStore {
            rules: backend.rules(),
            backend,
            unheard: Mutex::default(),
            arrived: Mutex::default(),
        }
    }

    fn mark_unheard(&self, token: &str, unheard: bool) {
        let mut set = self.unheard.lock().unwrap();
        if unheard {
            set.insert(token.to_string());
        } else {
            set.remove(token);
        }
    }

    fn is_unheard(&self, token: &str) -> bool {
        self.unheard.lock().unwrap().contains(token)
    }

    /// The transaction of `token`'s next attempt.
    fn attempt_tx(&self, token: &str) -> Tx {
        match self.arrived.lock().unwrap().contains(token) {
            true => Tx::Create,
            false => Tx::Arrival,
        }
    }

    /// `token`'s request was granted or withdrawn.
    fn done(&self, token: &str) {
        self.arrived.lock().unwrap().remove(token);
        self.backend.done(token);
    }

    /// The rules' view of the store at `now`.
    fn ctx(&self, now: i64) -> Ctx<'_> {
        Ctx {
            now,
            rules: &self.rules,
            alive: &self.backend,
        }
    }

    /// One transaction that decides by `rule` and returns what it answered (the default if
    /// the rule never ran, which a committed transaction rules out). Its commit is flushed if
    /// it writes a holder (a grant or a renewal), or always with `always_flush` (a fence
    /// raise).
    async fn decide<T: Default + Send>(
        &self,
        names: &[String],
        tx: Tx,
        always_flush: bool,
        mut rule: impl FnMut(&Ctx, &mut [Rows]) -> (T, Vec<Write>) + Send,
    ) -> StoreResult<T> {
        let mut answer = T::default();
        let mut decide = |now, rows: &mut [Rows]| {
            let (a, writes) = rule(&self.ctx(now), rows);
            answer = a;
            let flush = always_flush || writes.iter().any(|w| matches!(w, Write::PutHolder { .. }));
            Decision { writes, flush }
        };
        match tx {
            Tx::Arrival => self.backend.transact_arrival(names, &mut decide).await?,
            _ => {
                let create = tx == Tx::Create;
                self.backend.transact(names, create, &mut decide).await?
            }
        }
        Ok(answer)
    }

    /// The attempt's answer, as the store's own records say it.
    /// A waiter far back in line that hears wake-ups may look less often (`rules::Far`).
    fn answer(&self, outcome: Outcome, token: &str) -> Attempt {
        match outcome {
            Outcome::Granted(g) => Attempt::Granted(g),
            Outcome::Busy(retry, far) => Attempt::Busy {
                retry_after: retry.map(|r| self.rules.duration(r)),
                patience: self
                    .rules
                    .far
                    .filter(|_| far && self.backend.hears(token))
                    .map(|f| MAX_POLL * f.factor),
            },
        }
    }

    /// A busy answer read without a transaction (`Backend::peek`), when the records as they
    /// stand certainly keep the request out and the attempt would change nothing.
    fn busy_at_a_glance(
        &self,
        req: &Acquire,
        grant: &GrantRequest,
    ) -> Option<(Attempt, Vec<Recall>)> {
        let (now, mut rows) = self
            .backend
            .peek(&req.names, Some((&req.token, grant.queue)))?;
        let recall = rules::recall(&rows, now, &self.rules);
        match rules::grant(&mut rows, &self.ctx(now), grant) {
            (Outcome::Busy(retry, far), writes) if writes.is_empty() => {
                Some((self.answer(Outcome::Busy(retry, far), &req.token), recall))
            }
            _ => None,
        }
    }
}

#[async_trait]
impl<B: Backend> Store for RecordStore<B> {
    fn describe(&self) -> &str {
        self.backend.describe()
    }

    fn reached(&self) -> bool {
        self.backend.reached()
    }

    fn local(&self) -> bool {
        self.backend.local()
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.backend.shard_list(tag, write).await
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        Ok(self.attempt(req, queue).await?.0)
    }

    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        // Handed the lock by a release: held already, nothing to ask.
        if let Some((granted, recall)) = self.backend.handed(req) {
            self.done(&req.token);
            return Ok((Attempt::Granted(vec![granted]), vec![recall]));
        }
        let mut grant = GrantRequest {
            token: &req.token,
            modes: &req.modes,
            ttl: self.rules.ticks(req.ttl),
            meta: &req.meta,
            queue,
            bell: self.backend.bell(&req.token),
        };
        if let Some(busy) = self.busy_at_a_glance(req, &grant) {
            return Ok(busy);
        }
        grant.queue = queue && self.backend.ready_to_wait(req);
        // Marked before the transaction is sent, since a timeout drops this future without
        // a word; cleared only once the answer is heard.
        self.mark_unheard(&req.token, true);
        let (outcome, recall) = self
            .decide(
                &req.names,
                self.attempt_tx(&req.token),
                false,
                |cx, rows| {
                    let recall = rules::recall(rows, cx.now, &self.rules);
                    let (o, writes) = rules::grant(rows, cx, &grant);
                    (Some((o, recall)), writes)
                },
            )
            .await?
            .expect("the transaction decided");
        self.mark_unheard(&req.token, false);
        match outcome {
            Outcome::Granted(_) => self.done(&req.token),
            Outcome::Busy(..) => {
                self.arrived.lock().unwrap().insert(req.token.clone());
            }
        }
        let recall = match self.rules.forgetful {
            true => recall,
            false => vec![Recall::DURABLE; req.names.len()],
        };
        Ok((self.answer(outcome, &req.token), recall))
    }

    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        if !self.rules.forgetful {
            return Ok(());
        }
        self.decide(names, Tx::Create, false, |_, rows| ((), rules::mark(rows)))
            .await
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.backend.listen_for(req).await
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let ttl = self.rules.ticks(ttl);
        let renewal = self
            .decide(names, Tx::Existing, false, |cx, rows| {
                let (r, writes) = rules::renew(rows, cx.now, token, ttl);
                (Some(r), writes)
            })
            .await
            .map_err(|e| self.backend.renew_failed(e))?;
        match renewal.expect("the transaction decided") {
            Renewal::Renewed => {
                // The grant was applied after all, and its lease is being used (a quorum's
                // other stores granted it): from here it ends as any lease does.
                self.mark_unheard(token, false);
                Ok(true)
            }
            Renewal::Forgotten if self.rules.forgetful => Err(StoreError::lease_gone(FORGOTTEN)),
            _ => Ok(false),
        }
    }

    /// An attempt whose answer was not heard is released blind first: while answers are lost,
    /// the usual release (read, then write) never gets past its first read, and a grant that
    /// was committed unheard would block the lock until it expires.
    ///
    /// The blind release leaves the record's `previous` alone, where the usual release says
    /// how the lease ended. An unheard grant never let its owner in, so the record still tells
    /// the truth about the last lease that did work: saying `released` would hide from the
    /// next holder that the lease before ran out mid-work. And where it did let its owner in
    /// (a quorum's other stores granted it, and no renewal has been heard here since), this
    /// store's older answer can only make the next holder more careful: the worst answer of a
    /// majority wins.
    async fn release(&self, names: &[String], token: &str, outcome: End) -> StoreResult<bool> {
        // Before anything is sent: a release that errs may still have been applied, and a
        // lease a release handed this token before it must not be taken after it.
        self.backend.done(token);
        if self.is_unheard(token)
            && let Some(held) = self.backend.release_unheard(names, token).await
        {
            self.mark_unheard(token, false);
            self.done(token);
            return Ok(held);
        }
        let held = self
            .decide(names, Tx::Existing, false, |cx, rows| {
                rules::release(rows, cx, token, outcome)
            })
            .await?;
        self.mark_unheard(token, false);
        self.done(token);
        Ok(held)
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.decide(names, Tx::Existing, false, |cx, rows| {
            rules::force(rows, cx)
        })
        .await
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.decide(names, Tx::Create, true, |_, rows| {
            ((), rules::raise(rows, fences))
        })
        .await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let names = [name.to_string()];
        let state = match self.backend.peek(&names, None) {
            Some((now, rows)) => rows.first().map(|r| rules::view(r, &self.ctx(now))),
            None => {
                self.decide(&names, Tx::Existing, false, |cx, rows| {
                    (rows.first().map(|r| rules::view(r, cx)), Vec::new())
                })
                .await?
            }
        };
        Ok(state.unwrap_or_else(|| LockState {
            name: name.to_string(),
            ..LockState::default()
        }))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let names = self.backend.held_names(prefix).await?;
        crate::store::held_states(self, names).await
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.backend.health(query).await
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
