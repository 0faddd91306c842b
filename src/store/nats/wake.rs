//! How a waiter learns that it may look again: a release rings the longest-waiting live
//! waiter of the name by writing its key (`NS.w.TOKEN`): `wake`, or what it handed the
//! waiter (`handover`). `record::rules` picks one waiter: never the herd. The waiter hears it
//! through a plain subscription to the key's subject, which the server delivers as the write
//! is published: no state on the server, nothing left behind when the waiter goes. It is made
//! before the waiter's first write names it (on the same connection, so the server has it
//! first): no ring can come before it. A push consumer of the key delivers the ring too, for
//! a user allowed to subscribe to its inboxes only (as KV-only permissions often are: the
//! server then refuses the plain subscription); a ring heard twice wakes once. The server
//! drops that consumer within `FORGET` of the waiter going (a killed waiter included).
//!
//! A holder that died is released by nobody: its key expires, which nothing publishes (the
//! server's marker goes into the stream only). A waiter learns of it by looking again at
//! the lease's end, as its key's write time and ttl tell it, and at least every
//! `MAX_POLL`. (A consumer of every holder key, for the markers, woke every waiter at each
//! grant and release on two cores, and cost each handoff more than it saved an expiry.)
//!
//! The consumer is best effort: a stream at its consumer limit (the server's default is
//! 1,000 per stream), or a server restarted (which forgets it), leaves the waiter without
//! it. Rings depend on it only where the plain subscription is refused. (A watch from
//! async-nats lingered 30 s after every waiter, so a busy lock filled the stream's consumer
//! limit, and waiters then missed their rings and waited for their next look.)

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, push};
use async_nats::jetstream::kv::Store;
use async_nats::{Client, Message, Subscriber};
use async_trait::async_trait;
use futures_util::StreamExt;

use super::handover::Handovers;
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
    /// The waiter's token, and where a handover rung on its key is noted for its next
    /// attempt to take.
    told: (String, Arc<Handovers>),
    ring: Option<Subscriber>,
    /// The consumer's deliveries of the waiter's key.
    keys: Option<Subscriber>,
    /// Rings heard on each path (the subscription, the consumer), and rings acted on: a
    /// ring is new when a path has heard more than were acted on.
    heard: [u64; 2],
    acted: u64,
}

impl Bell {
    /// Hear rings on `own` (the waiter key's subject), and through a consumer of `kv`'s
    /// stream; note a handover for `told`'s token.
    pub async fn open(
        client: &Client,
        kv: &Store,
        own: String,
        told: (String, Arc<Handovers>),
    ) -> Bell {
        let ring = client.subscribe(own.clone()).await.ok();
        let keys = consumer(client, kv, own.clone()).await;
        Bell {
            own,
            told,
            ring,
            keys,
            heard: [0; 2],
            acted: 0,
        }
    }

    /// Whether a message on the waiter's key rings it: a plain ring, or a handover (noted
    /// for the next attempt to take).
    fn is_ring(&self, payload: &[u8]) -> bool {
        let (token, handovers) = &self.told;
        payload == RING || handovers.heard(token, payload)
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
}

/// A push consumer of the changes of `subject`, delivering to a subscription made first.
async fn consumer(client: &Client, kv: &Store, subject: String) -> Option<Subscriber> {
    let inbox = client.new_inbox();
    let sub = client.subscribe(inbox.clone()).await.ok()?;
    let config = push::Config {
        deliver_subject: inbox,
        description: Some("dlock waiter".into()),
        filter_subject: subject,
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
            if m.subject.as_str() == self.own && self.is_ring(&m.payload) && self.rung(path) {
                return;
            }
        }
    }
}
