//! The KV bucket as dlock uses it: reads of a key's last message (with the server's
//! timestamp and headers), and writes as raw publishes whose headers dlock sets itself:
//! `Nats-Expected-Last-Subject-Sequence` on every conditional write and `Nats-TTL` on every
//! write of a lease (async-nats's `create_with_ttl` drops the TTL after a delete, and a put
//! without one makes the key immortal).

use std::sync::Mutex;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::{Context, PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{DirectGetErrorKind, Stream};
use bytes::Bytes;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use crate::store::{StoreError, StoreResult};

/// What a key's last message says.
#[derive(Clone, Debug, Default)]
pub struct Got {
    /// Its stream sequence, what a conditional write expects (0: the key has no message).
    pub rev: u64,
    /// A value (not a delete, a purge or the server's marker of an expiry).
    pub live: bool,
    pub value: Bytes,
    /// When the server stored it, in µs since the Unix epoch.
    pub micros: u64,
    /// Its `Nats-TTL`, if it has one.
    pub ttl: Option<Duration>,
}

impl Got {
    /// About how long a live key has left, in ms, by this host's clock: for `inspect` and a
    /// waiter's next look only, never for a decision (the server alone expires keys).
    pub fn left_ms(&self) -> Option<i64> {
        if !self.live {
            return None;
        }
        let Some(ttl) = self.ttl else {
            return Some(i64::MAX / 4);
        };
        let ttl = ttl.as_millis() as i64;
        let age = crate::store::wall_ms() - (self.micros / 1000) as i64;
        Some((ttl - age).clamp(1, ttl.max(1)))
    }
}

/// How a conditional write ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Wrote {
    Done(u64),
    /// The key's last sequence was not the one expected: someone wrote first.
    Conflict,
}

/// The bucket and the stream under it.
pub struct Bucket {
    pub js: Context,
    pub name: String,
    /// The stream for direct gets, which need nothing of its configuration: a process's
    /// first read goes out beside the check of the bucket instead of after it.
    direct: Stream<()>,
    /// The bucket as `setup::ensure` checked it (or set it up), asked for when the bucket
    /// handle is made and awaited by every read and write: nothing is written to a bucket
    /// that lacks what a lock needs, and nothing read from one is believed.
    checked: OnceCell<Checked>,
    /// The check under way; taken by the first to await it (a failed check runs again).
    check: Mutex<Option<JoinHandle<StoreResult<kv::Store>>>>,
    create: bool,
}

/// A bucket found fit for locks.
pub struct Checked {
    pub kv: kv::Store,
    /// The stream takes atomic batches (`allow_atomic`, NATS 2.12): a decision that writes
    /// several records is then one batch, all of it or nothing.
    pub atomic: bool,
}

/// One write of a batch: a key, its value and its headers (what `put` or `delete` would send).
pub struct Msg {
    pub key: String,
    pub value: Bytes,
    pub headers: HeaderMap,
}

impl Msg {
    /// A write of `value`, only over the key's last sequence `expect` when given, with a
    /// `Nats-TTL` when given.
    pub fn put(key: String, value: Bytes, expect: Option<u64>, ttl: Option<Duration>) -> Msg {
        let mut headers = HeaderMap::new();
        if let Some(seq) = expect {
            headers.insert("Nats-Expected-Last-Subject-Sequence", seq.to_string());
        }
        if let Some(ttl) = ttl {
            headers.insert("Nats-TTL", ttl_header(ttl));
        }
        Msg {
            key,
            value,
            headers,
        }
    }

    /// A delete (a tombstone that itself expires after `ttl`, so nothing is left behind).
    pub fn delete(key: String, ttl: Duration) -> Msg {
        let mut headers = HeaderMap::new();
        headers.insert("KV-Operation", "DEL");
        headers.insert("Nats-TTL", ttl_header(ttl));
        Msg {
            key,
            value: Bytes::new(),
            headers,
        }
    }
}

/// `Nats-TTL` for a lease of `ttl`: whole seconds, rounded up (the server's expiry must come
/// after the holder's own deadline, never before), at least the server's minimum of 1 s.
pub fn ttl_header(ttl: Duration) -> String {
    let secs = ttl.as_millis().div_ceil(1000).max(1);
    format!("{secs}s")
}

impl Bucket {
    /// The bucket `name`, its check (with `create`: its set-up) started now, in the
    /// background.
    pub async fn new(js: Context, name: String, create: bool) -> StoreResult<Bucket> {
        let direct = direct(&js, &name).await?;
        let check = {
            let (js, name) = (js.clone(), name.clone());
            tokio::spawn(async move { super::setup::ensure(&js, &name, create).await })
        };
        Ok(Bucket {
            direct,
            checked: OnceCell::new(),
            check: Mutex::new(Some(check)),
            js,
            name,
            create,
        })
    }

    /// The bucket `name` as `kv`, just set up with `?create=1`.
    pub async fn ready(js: Context, kv: kv::Store, name: String) -> StoreResult<Bucket> {
        Ok(Bucket {
            direct: direct(&js, &name).await?,
            checked: OnceCell::new_with(Some(Checked::of(kv))),
            check: Mutex::new(None),
            js,
            name,
            create: true,
        })
    }

    /// The bucket, checked: an error (78 for a missing bucket or one without per-message
    /// TTL) when it is not fit for locks or the server did not answer the check.
    pub async fn checked(&self) -> StoreResult<&Checked> {
        self.checked
            .get_or_try_init(|| async {
                let started = self.check.lock().unwrap().take();
                let kv = match started {
                    Some(task) => task.await.unwrap_or_else(|e| {
                        Err(StoreError::unavailable(format!("checking the bucket: {e}")))
                    }),
                    None => super::setup::ensure(&self.js, &self.name, self.create).await,
                };
                kv.map(Checked::of)
            })
            .await
    }

    /// The subject of `key` (a key of the bucket, or a wildcard of keys).
    pub fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{key}", self.name)
    }

    /// The key's last message.
    pub async fn get(&self, key: &str) -> StoreResult<Got> {
        let early = !self.checked.initialized();
        let (mut got, checked) = tokio::join!(
            self.direct.direct_get_last_for_subject(self.subject(key)),
            self.checked()
        );
        checked?;
        if early
            && got
                .as_ref()
                .is_err_and(|e| e.kind() != DirectGetErrorKind::NotFound)
        {
            // Sent before the check had created the bucket, or switched on its direct gets.
            got = self
                .direct
                .direct_get_last_for_subject(self.subject(key))
                .await;
        }
        let m = match got {
            Ok(m) => m,
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => return Ok(Got::default()),
            Err(e) => return Err(self.failed(e).await),
        };
        let h = &m.headers;
        let op = h.get("KV-Operation").map(|v| v.as_str().to_string());
        let live = h.get("Nats-Marker-Reason").is_none()
            && !matches!(op.as_deref(), Some("DEL") | Some("PURGE"));
        let ttl = h.get("Nats-TTL").and_then(|v| parse_ttl(v.as_str()));
        Ok(Got {
            rev: m.sequence,
            live,
            value: m.payload,
            micros: (m.time.unix_timestamp_nanos() / 1000).max(0) as u64,
            ttl,
        })
    }

    /// Write `value` to `key`: only if its last sequence is `expect` (0: it has no message),
    /// when given; with a `Nats-TTL` when given.
    pub async fn put(
        &self,
        key: &str,
        value: Bytes,
        expect: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreResult<Wrote> {
        self.send(Msg::put(key.to_string(), value, expect, ttl))
            .await
    }

    /// Delete `key` (a tombstone that itself expires after `ttl`, so nothing is left behind).
    /// A waiter's watch sees a delete, which it tells apart from the server's marker of an
    /// expiry.
    pub async fn delete(&self, key: &str, ttl: Duration) -> StoreResult<Wrote> {
        self.send(Msg::delete(key.to_string(), ttl)).await
    }

    /// Write the messages as one atomic batch (in this order, all of them or none): Conflict
    /// when any expected sequence is not its key's last. Needs `atomic`.
    ///
    /// Only the commit asks for an answer: the messages before it go out on the same
    /// connection, so the whole batch costs one round trip. A batch the server dropped (its
    /// first messages lost to a reconnect, too many batches open at once) wrote nothing
    /// either: read again, as after a conflict.
    pub async fn batch(&self, mut msgs: Vec<Msg>) -> StoreResult<Wrote> {
        let Some(mut commit) = msgs.pop() else {
            return Ok(Wrote::Done(0));
        };
        if msgs.is_empty() {
            return self.send(commit).await;
        }
        self.checked().await?;
        let id = format!("{:032x}", crate::sys::random_u128());
        let client = self.js.client();
        let mut seq = 0;
        for mut m in msgs {
            seq += 1;
            m.headers.insert("Nats-Batch-Id", id.as_str());
            m.headers.insert("Nats-Batch-Sequence", seq.to_string());
            let sent = client
                .publish_with_headers(self.subject(&m.key), m.headers, m.value)
                .await;
            if let Err(e) = sent {
                return Err(StoreError::unavailable(format!("NATS did not answer: {e}")));
            }
        }
        commit.headers.insert("Nats-Batch-Id", id.as_str());
        commit
            .headers
            .insert("Nats-Batch-Sequence", (seq + 1).to_string());
        commit.headers.insert("Nats-Batch-Commit", "1");
        self.send(commit).await
    }

    /// Write one message; Conflict when its expected sequence is not the key's last.
    pub async fn send(&self, m: Msg) -> StoreResult<Wrote> {
        let sent = self.submit(m).await?;
        self.acked(sent).await
    }

    /// Hand a message to the connection, its answer to come: the server writes the messages
    /// of one connection in the order they were handed over, whether or not the answer to
    /// one was awaited before the next went out.
    pub async fn submit(&self, m: Msg) -> StoreResult<PublishAckFuture> {
        self.checked().await?;
        let sent = self
            .js
            .publish_with_headers(self.subject(&m.key), m.headers, m.value)
            .await;
        match sent {
            Ok(ack) => Ok(ack),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// The answer to a message handed over by `submit`.
    pub async fn acked(&self, sent: PublishAckFuture) -> StoreResult<Wrote> {
        match sent.await {
            Ok(a) => Ok(Wrote::Done(a.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(Wrote::Conflict),
            Err(e) if batch_dropped(&e) => Ok(Wrote::Conflict),
            Err(e) if e.kind() == PublishErrorKind::StreamNotFound => Err(self.gone()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// `get` of a key the caller no longer borrows (for many reads in parallel).
    pub async fn get_owned(&self, key: String) -> StoreResult<Got> {
        self.get(&key).await
    }

    /// `known` if given (read already), else `get`.
    pub async fn get_unless(&self, key: String, known: Option<Got>) -> StoreResult<Got> {
        match known {
            Some(got) => Ok(got),
            None => self.get(&key).await,
        }
    }

    /// The keys under a subject filter (relative to the bucket) that have messages.
    pub async fn subjects(&self, filter: &str) -> StoreResult<Vec<String>> {
        use futures_util::StreamExt;
        let prefix = format!("$KV.{}.", self.name);
        let mut info = match self
            .checked()
            .await?
            .kv
            .stream
            .info_with_subjects(format!("{prefix}{filter}"))
            .await
        {
            Ok(i) => i,
            Err(e) => return Err(self.failed(e).await),
        };
        let mut keys = Vec::new();
        while let Some(s) = info.next().await {
            match s {
                Ok((subject, _)) => keys.extend(subject.strip_prefix(&prefix).map(String::from)),
                Err(e) => return Err(self.failed(e).await),
            }
        }
        Ok(keys)
    }

    /// The bucket is not there (deleted under us, or a server that came back empty).
    pub fn gone(&self) -> StoreError {
        StoreError::config(format!(
            "the NATS KV bucket {:?} does not exist; add ?create=1 to the store URL to create \
             it (with per-message TTL and delete markers)",
            self.name
        ))
    }

    /// A failed request: the bucket gone, or the server not answering.
    async fn failed(&self, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        let text = e.to_string();
        if text.contains("10166") || text.contains("per-message TTL is disabled") {
            return super::setup::no_ttl(&self.name);
        }
        if text.to_lowercase().contains("permission") {
            return StoreError::refused(format!("NATS refused the request: {text}")).with_source(e);
        }
        // A request to a stream that is gone finds no responder.
        if let Ok(false) = self.exists().await {
            return self.gone();
        }
        StoreError::unavailable(format!("NATS did not answer: {text}")).with_source(e)
    }

    /// Whether the bucket's stream is there; an error when the server does not answer.
    pub async fn exists(&self) -> StoreResult<bool> {
        super::setup::stream_config(&self.js, &self.name)
            .await
            .map(|c| c.is_some())
    }
}

impl Checked {
    fn of(kv: kv::Store) -> Checked {
        let atomic = kv.stream.cached_info().config.allow_atomic_publish;
        Checked { kv, atomic }
    }
}

/// The bucket's stream, for direct gets (no request: its configuration is not needed).
async fn direct(js: &Context, bucket: &str) -> StoreResult<Stream<()>> {
    js.get_stream_no_info(format!("KV_{bucket}"))
        .await
        .map_err(|e| StoreError::invalid(format!("the KV bucket {bucket:?}: {e}")))
}

/// The server dropped an atomic batch without writing any of it: it lost its first
/// messages (10176), or too many batches were open on the stream (10210, 50 by default; a
/// killed client's batch stays open until the server's batch timeout).
fn batch_dropped(e: &PublishError) -> bool {
    use async_nats::jetstream::{Error, ErrorCode};
    let code = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<Error>())
        .map(Error::error_code);
    matches!(
        code,
        Some(
            ErrorCode::ATOMIC_PUBLISH_INCOMPLETE_BATCH
                | ErrorCode::ATOMIC_PUBLISH_TOO_MANY_INFLIGHT
        )
    )
}

/// A `Nats-TTL` as the server writes it: a Go duration ("1s", "1m30s") or whole seconds.
fn parse_ttl(text: &str) -> Option<Duration> {
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    humantime::parse_duration(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_expires_a_lease_after_its_holder_gives_up() {
        assert_eq!(ttl_header(Duration::from_millis(500)), "1s");
        assert_eq!(ttl_header(Duration::from_millis(1001)), "2s");
        assert_eq!(ttl_header(Duration::from_secs(30)), "30s");
        assert_eq!(parse_ttl("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_ttl("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_ttl("1m30s"), Some(Duration::from_secs(90)));
    }
}
