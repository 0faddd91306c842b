//! Give-backs sent to a slow store in the background, in order with the calls around them.
//!
//! A call decided without a store's answer (`fan`) may still have taken effect there, so what
//! it asked is given back later, while the engine goes on. Every later call to that store
//! waits for those give-backs first: a give-back of an attempt must never land after the next
//! attempt of the same token, whose grant it would take away (the checker saw two holders
//! when it did).
//!
//! A store that never answers (frozen) lets none of them finish before the store timeout, and
//! a waiter looks every few hundred milliseconds: one give-back per look would make a chain
//! that grows faster than it drains, and polling a chain thousands long overflowed the stack
//! (a unit test's wait with split votes did). So a give-back is queued only if something went
//! out to the store since the last one of the same request was queued; a call that was still
//! waiting behind that one when it was cut off never left, and there is nothing more to give
//! back.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use tokio::time::timeout;

use super::Engine;
use crate::store::Outcome;

type Chain = Shared<BoxFuture<'static, ()>>;

/// One store's give-backs still on their way (the last of the chain, and what it gives back).
#[derive(Default)]
pub(super) struct Behind {
    last: Mutex<Option<(Chain, Vec<String>, String)>>,
    /// A call went out to the store since the last give-back was queued.
    sent: AtomicBool,
}

impl Behind {
    /// What a call to the store waits for before it goes out.
    pub(super) fn last(&self) -> Option<Chain> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().map(|(chain, _, _)| chain.clone())
    }

    /// A call is going out to the store now.
    pub(super) fn sent(&self) {
        self.sent.store(true, Ordering::SeqCst);
    }
}

impl Engine {
    /// Give back an attempt on store `i` in the background (it was found slow: a call was
    /// just decided without it), after whatever was sent it so before; if this process ends
    /// first, the lease's ttl ends it there.
    pub(super) fn give_back_later(&self, i: usize, names: &[String], token: &str) {
        let behind = &self.behind[i];
        let mut last = behind.last.lock().unwrap_or_else(|p| p.into_inner());
        let sent = behind.sent.swap(false, Ordering::SeqCst);
        if let Some((chain, n, t)) = last.as_ref()
            && chain.peek().is_none()
            && n == names
            && t == token
            && !sent
        {
            return;
        }
        let before = last.take().map(|(chain, _, _)| chain);
        let (s, limit) = (self.stores[i].clone(), self.store_timeout);
        let (names, token) = (names.to_vec(), token.to_string());
        let give_back = {
            let (names, token) = (names.clone(), token.clone());
            async move {
                if let Some(b) = before {
                    b.await;
                }
                let _ = timeout(limit, s.release(&names, &token, Outcome::Withdrawn)).await;
            }
        }
        .boxed()
        .shared();
        tokio::spawn(give_back.clone());
        *last = Some((give_back, names, token));
    }
}
