//! A MySQL waiter's bell: a connection of its own that sleeps in `SELECT SLEEP(…)` until a
//! release KILLs it (see the module comment of `super`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};

use crate::store::Listener;

/// This process's waiters: token -> the id of the connection its bell sleeps on.
#[derive(Default)]
pub struct Bells(Mutex<HashMap<String, Arc<AtomicI64>>>);

impl Bells {
    /// Open a bell for `token`; its id goes into the waiter's row from the next attempt on.
    pub async fn ring_for(
        self: &Arc<Self>,
        token: &str,
        opts: OptsBuilder,
    ) -> Result<Bell, mysql_async::Error> {
        let conn = Conn::new(opts.clone()).await?;
        let id = self.enter(token, i64::from(conn.id()));
        Ok(Bell {
            conn: Some(conn),
            opts,
            id,
            token: token.to_string(),
            all: self.clone(),
        })
    }

    /// Make `id` the connection of `token`'s bell.
    fn enter(&self, token: &str, id: i64) -> Arc<AtomicI64> {
        let id = Arc::new(AtomicI64::new(id));
        self.0.lock().unwrap().insert(token.to_string(), id.clone());
        id
    }

    /// The bell's connection id for `token`; 0 when it has none.
    pub fn id(&self, token: &str) -> i64 {
        self.0
            .lock()
            .unwrap()
            .get(token)
            .map_or(0, |id| id.load(Ordering::Relaxed))
    }
}

pub struct Bell {
    /// None once rung: the connection was killed, and the next wait opens a new one.
    conn: Option<Conn>,
    opts: OptsBuilder,
    id: Arc<AtomicI64>,
    token: String,
    all: Arc<Bells>,
}

impl Drop for Bell {
    fn drop(&mut self) {
        let mut all = self.all.0.lock().unwrap();
        // A waiter opens its new bell before its old one goes (when its store came back):
        // the token's entry is then the new bell's, which stays.
        if all
            .get(&self.token)
            .is_some_and(|id| Arc::ptr_eq(id, &self.id))
        {
            all.remove(&self.token);
        }
    }
}

#[async_trait]
impl Listener for Bell {
    async fn changed(&mut self, max: Duration) {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            // Rung before: a new connection, whose id the next attempt writes into the row.
            // Until then a release rings the old one and this waiter looks again after `max`
            // at the latest.
            None => match Conn::new(self.opts.clone()).await {
                Ok(c) => {
                    self.id.store(i64::from(c.id()), Ordering::Relaxed);
                    c
                }
                Err(_) => {
                    tokio::time::sleep(max).await;
                    return;
                }
            },
        };
        let sleep = format!("SELECT SLEEP({:.3})", max.as_secs_f64());
        // SLEEP answers 0 when it slept the whole time; a KILL ends it early with an error
        // (or 1 where the server reports the interruption as a result).
        if let Ok(Some(0i64)) = conn.query_first(sleep).await {
            self.conn = Some(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mysql_async::OptsBuilder;

    use super::{Bell, Bells};

    /// A waiter that opens a new bell while its old one lives (its store came back) keeps
    /// the new bell's id after the old one goes: releases ring it. (When dropping the old
    /// bell took the token out, the waiter's row got id 0 and no release could ring it: it
    /// waited for its next poll every time.)
    #[test]
    fn a_bell_opened_again_keeps_its_id_after_the_old_one_goes() {
        let all = Arc::new(Bells::default());
        let bell = |id| Bell {
            conn: None,
            opts: OptsBuilder::default(),
            id: all.enter("t", id),
            token: "t".to_string(),
            all: all.clone(),
        };
        let old = bell(7);
        let new = bell(8);
        drop(old);
        assert_eq!(all.id("t"), 8);
        drop(new);
        assert_eq!(all.id("t"), 0);
    }
}
