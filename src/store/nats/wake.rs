//! How a waiter learns that it may look again, from two kinds of keys:
//!
//! - Its own key (`NS.w.TOKEN`): a release rings the longest-waiting live waiter of the name
//!   by writing `wake` there (`record::rules` picks one: never the herd). The waiter hears it
//!   through a plain subscription to the key's subject, which the server delivers as the
//!   write is published: no state on the server, nothing left behind when the waiter goes.
//!   It is made before the waiter's first write names it (on the same connection, so the
//!   server has it first): no ring can come before it. The consumer below delivers the ring
//!   too, for a user allowed to subscribe to its inboxes only (as KV-only permissions often
//!   are: the server then refuses the plain subscription); a ring heard twice wakes once.
//! - The namespace's holder keys, for the server's marker of an expiry only: a holder that
//!   died is released by nobody. The server writes those markers into the stream without
//!   publishing them, so only a consumer of the stream sees them: a push consumer on the
//!   holder keys (and the waiter's own), delivering to a subscription of its own, that the
//!   server drops within `FORGET` of the waiter going (a killed waiter included). A release
//!   deletes its holder key, which the consumer tells apart (a delete, and the marker its own
//!   expiry leaves a second later on a key seen deleted), so releases wake no one but the
//!   one rung.
//!
//! The consumer is best effort: a stream at its consumer limit (the server's default is
//! 1,000 per stream), or a server restarted (which forgets it), leaves the waiter without
//! it, and the waiter then learns of a dead holder at the lease's end, when it looks again
//! anyway. Rings depend on it only where the plain subscription is refused. (A watch from
//! async-nats lingered 30 s after every waiter, so a busy lock filled the stream's consumer
//! limit, and waiters then missed their rings and waited for their next look.)

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, push};
use async_nats::jetstream::kv::Store;
use async_nats::{Client, Message, Subscriber};
use async_trait::async_trait;
use futures_util::StreamExt;

use crate::store::Listener;

/// What a release writes to a waiter's key to wake it.
pub const RING: &[u8] = b"wake";
/// What a waiter writes to its key while it waits.
pub const WAITING: &[u8] = b"wait";

/// How soon the server drops the consumer of a waiter gone.
const FORGET: Duration = Duration::from_secs(2);

pub struct Bell {
    /// The waiter key's subject, subscribed to.
    own: String,
    ring: Option<Subscriber>,
    /// The consumer's deliveries: the waiter's key and the holder keys.
    keys: Option<Subscriber>,
    /// Rings heard on each path (the subscription, the consumer), and rings acted on: a
    /// ring is new when a path has heard more than were acted on.
    heard: [u64; 2],
    acted: u64,
    /// Holder keys seen deleted (released), whose marker is not an expiry.
    deleted: HashSet<String>,
}

impl Bell {
    /// Hear rings on `own` (the waiter key's subject), and expiries of the holder keys under
    /// `holders` (a wildcard subject), through a consumer of `kv`'s stream that delivers the
    /// rings too.
    pub async fn open(client: &Client, kv: &Store, own: String, holders: String) -> Bell {
        let ring = client.subscribe(own.clone()).await.ok();
        let keys = consumer(client, kv, vec![own.clone(), holders]).await;
        Bell {
            own,
            ring,
            keys,
            heard: [0; 2],
            acted: 0,
            deleted: HashSet::new(),
        }
    }

    /// A ring heard on `path`: whether it is one not acted on yet.
    fn rung(&mut self, path: usize) -> bool {
        self.heard[path] += 1;
        if self.heard[path] <= self.acted {
            return false;
        }
        self.acted = self.heard[path];
        true
    }

    /// Whether a message on a holder key is the marker of its expiry (not of a release).
    fn expired(&mut self, m: &Message) -> bool {
        let key = m.subject.to_string();
        let header = |name: &str| m.headers.as_ref().and_then(|h| h.get(name)).cloned();
        if header("Nats-Marker-Reason").is_some() {
            // A released holder's key was deleted, and the delete's own expiry brings the
            // server's marker a second later: that is no expiry of a lease.
            return !self.deleted.remove(&key);
        }
        match header("KV-Operation").as_ref().map(|v| v.as_str()) {
            Some("DEL") => {
                self.deleted.insert(key);
                false
            }
            Some("PURGE") => !self.deleted.remove(&key),
            _ => false,
        }
    }
}

/// A push consumer of the changes of `subjects`, delivering to a subscription made first.
async fn consumer(client: &Client, kv: &Store, subjects: Vec<String>) -> Option<Subscriber> {
    let inbox = client.new_inbox();
    let sub = client.subscribe(inbox.clone()).await.ok()?;
    let config = push::Config {
        deliver_subject: inbox,
        description: Some("dlock waiter".into()),
        filter_subjects: subjects,
        deliver_policy: DeliverPolicy::New,
        ack_policy: AckPolicy::None,
        inactive_threshold: FORGET,
        memory_storage: true,
        num_replicas: 1,
        ..Default::default()
    };
    kv.stream.create_consumer(config).await.ok()?;
    Some(sub)
}

/// The next message of `sub`, or never when there is none (a lost subscription stays lost).
async fn next(sub: &mut Option<Subscriber>) -> Option<Message> {
    match sub.as_mut() {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

#[async_trait]
impl Listener for Bell {
    async fn changed(&mut self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let (path, got) = tokio::select! {
                () = tokio::time::sleep_until(deadline) => return,
                m = next(&mut self.ring) => (0, m),
                m = next(&mut self.keys) => (1, m),
            };
            let Some(m) = got else {
                // Lost (a server restarted forgets the consumer): the other path goes on.
                match path {
                    0 => self.ring = None,
                    _ => self.keys = None,
                }
                continue;
            };
            let woken = match m.subject.as_str() == self.own {
                true => m.payload.as_ref() == RING && self.rung(path),
                false => self.expired(&m),
            };
            if woken {
                return;
            }
        }
    }
}
