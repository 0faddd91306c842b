//! How a decision of the rules is written: the lease keys first, then each changed record
//! with the revision it was read at, in name order (all in one atomic batch where the bucket
//! takes them), then what only tidies up or rings.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use tokio::time::Instant;

use super::bucket::{Bucket, Msg, Wrote};
use super::record::Record;
use super::{Loaded, Nats, Step, handover, setup, wake};
use crate::store::StoreResult;
use crate::store::record::rules::{Rows, Write};

/// A key a decision writes before the records: a holder's lease or a waiter's presence.
struct Lease {
    key: String,
    value: Bytes,
    /// The revision it must still be at (a holder the record names), or None.
    expect: Option<u64>,
    ttl: Duration,
    holder: bool,
    /// A holder's key that was live when read: a renewal, or a grant tried again.
    was_live: bool,
    /// The token, of a holder's or a waiter's key.
    token: String,
}

impl Lease {
    fn msg(&self) -> Msg {
        Msg::put(
            self.key.clone(),
            self.value.clone(),
            self.expect,
            Some(self.ttl),
        )
    }
}

impl Nats {
    /// The writes of a decision: lease keys first, then the records in name order, then
    /// what only tidies up or rings (a lost one of those costs a waiter a look, no more).
    /// On a bucket that takes atomic batches, a decision that writes several records is one
    /// batch: a grant of several names is all written or not at all, whenever its writer
    /// dies.
    pub(super) async fn apply(
        &self,
        b: &Bucket,
        names: &[String],
        loaded: &[Loaded],
        rows: &[Rows],
        (now, sent): (i64, Instant),
        writes: &[Write],
    ) -> StoreResult<Step> {
        let (leases, renewed) = self.leases(names, loaded, now, writes);
        let records = self.records(names, loaded, rows);
        let tidy = self.tidying(loaded, names, writes);
        if b.checked().await?.atomic && records.len() > 1 {
            // The tidying too, after the records. Only for several records: a batch costs
            // the server far more than a few plain writes (tens of ms against tenths on a
            // busy host: it waits for the batch and syncs it to disk), and one record
            // needs no batch to be all or nothing.
            let msgs = leases.iter().map(Lease::msg).chain(records).chain(tidy);
            if b.batch(msgs.collect()).await? == Wrote::Conflict {
                return Ok(Step::Again);
            }
        } else if records.len() <= 1 && leases.iter().all(|l| l.expect.is_none()) {
            // One record: pipelined (see `in_order`). The tidying waits for the record when
            // it deletes a waiter's key (whose waiter would lose its place in line if the
            // record lost) or rings a handover (which must not be heard unless it won).
            let (now, after) = match drops_waiters(writes) {
                true => (Vec::new(), tidy),
                false => (tidy, Vec::new()),
            };
            let Some(seqs) = in_order(b, &leases, records, now).await? else {
                return Ok(Step::Again);
            };
            self.wrote(&leases, &seqs, sent);
            let after = self.handing_over(after, rows, writes, &leases, &seqs);
            // Their answers awaited, as the proof that they left this process (which may
            // end as soon as this returns), not as a condition: a lost one leaves a key
            // that no record names, gone at its ttl, or a waiter to find its turn at its
            // next look.
            let mut sent = Vec::new();
            for m in after {
                sent.extend(b.submit(m).await.ok());
            }
            join_all(sent.into_iter().map(|s| b.acked(s))).await;
        } else {
            let wrote = join_all(leases.iter().map(|l| b.send(l.msg()))).await;
            if first_conflict(wrote)? || !write_records(b, records, &leases).await? {
                return Ok(Step::Again);
            }
            // A lost one costs a waiter a look, no more.
            join_all(tidy.into_iter().map(|m| b.send(m))).await;
        }
        for (name, token) in renewed {
            let i = at(names, name);
            if !self.still_names(b, name, loaded[i].rev, token).await? {
                return Ok(Step::Again);
            }
        }
        Ok(Step::Done)
    }

    /// The keys a decision writes before the records, and the holders it renews (a key
    /// that was live: their record must still name them once written).
    fn leases<'w>(
        &self,
        names: &[String],
        loaded: &[Loaded],
        now: i64,
        writes: &'w [Write],
    ) -> (Vec<Lease>, Vec<(&'w str, &'w str)>) {
        let ttl = |expires: i64| Duration::from_millis((expires - now).max(1) as u64);
        let mut leases: Vec<Lease> = Vec::new();
        let mut renewed = Vec::new();
        for w in writes {
            match w {
                Write::PutHolder { name, row } => {
                    let l = &loaded[at(names, name)];
                    // A holder the record names is written only over the key it read (a
                    // renewal never brings a lease back); a new one unconditionally.
                    let expect = l.holders.get(&row.token).map(|g| g.rev);
                    let was_live = l.holders.get(&row.token).is_some_and(|g| g.live);
                    if was_live {
                        renewed.push((name.as_str(), row.token.as_str()));
                    }
                    leases.push(Lease {
                        key: self.keys.holder(name, &row.token),
                        value: Bytes::from_static(b"held"),
                        expect,
                        ttl: ttl(row.expires),
                        holder: true,
                        was_live,
                        token: row.token.clone(),
                    });
                }
                Write::PutWaiter { row, .. } => {
                    let key = self.keys.waiter(&row.token);
                    if !leases.iter().any(|l| l.key == key) {
                        leases.push(Lease {
                            key,
                            value: Bytes::from_static(wake::WAITING),
                            expect: None,
                            ttl: ttl(row.expires),
                            holder: false,
                            was_live: false,
                            token: row.token.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        (leases, renewed)
    }

    /// Note when each waiter's key was written by an attempt sent at `sent` (`handover`).
    fn wrote(&self, leases: &[Lease], seqs: &[u64], sent: Instant) {
        for (l, &seq) in leases.iter().zip(seqs).filter(|(l, _)| !l.holder) {
            self.handovers.queued(&l.token, seq, sent);
        }
    }

    /// `after` with the ring of a waiter handed the lock (`Rules::hand_over`: rung, and
    /// given a holder's lease key by this decision) saying so, with the stream sequence of
    /// that key's write.
    fn handing_over(
        &self,
        mut after: Vec<Msg>,
        rows: &[Rows],
        writes: &[Write],
        leases: &[Lease],
        seqs: &[u64],
    ) -> Vec<Msg> {
        for w in writes {
            let Write::Wake { token, .. } = w else {
                continue;
            };
            let Some(i) = leases.iter().position(|l| l.holder && l.token == *token) else {
                continue;
            };
            let Some((r, h)) = rows.iter().find_map(|r| {
                let h = r.holders.iter().find(|h| h.token == *token)?;
                Some((r, h))
            }) else {
                continue;
            };
            let key = self.keys.waiter(token);
            let next = r
                .waiters
                .iter()
                .min_by_key(|x| x.seq)
                .map(|x| x.token.as_str());
            let told = handover::message(seqs[i], h.fence, r.marked, &r.previous, next);
            let ring = |m: &&mut Msg| m.key == key && m.value == wake::RING;
            for m in after.iter_mut().filter(ring) {
                m.value = told.clone();
            }
        }
        after
    }

    /// The writes of the records the decision changed, in name order, each over the
    /// revision it was read at.
    fn records(&self, names: &[String], loaded: &[Loaded], rows: &[Rows]) -> Vec<Msg> {
        let mut msgs = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let after = Record::of(r);
            if after != loaded[i].record {
                let body = Bytes::from(serde_json::to_vec(&after).expect("json"));
                let key = self.keys.record(&names[i]);
                msgs.push(Msg::put(key, body, Some(loaded[i].rev), None));
            }
        }
        msgs
    }

    /// Whether the record of `name` still names `token` as a holder (a renewal's last check:
    /// an `unlock --force` may have dropped it between the read and the renewal's write).
    async fn still_names(
        &self,
        b: &Bucket,
        name: &str,
        rev: u64,
        token: &str,
    ) -> StoreResult<bool> {
        let got = b.get(&self.keys.record(name)).await?;
        if got.rev == rev {
            return Ok(true);
        }
        let record: Record = serde_json::from_slice(&got.value).unwrap_or_default();
        Ok(got.live && record.holders.iter().any(|h| h.token == token))
    }

    /// What comes after the records: delete the keys of holders and waiters that left, ring
    /// the waiters the rules woke. Only a waiter's later look depends on them.
    fn tidying(&self, loaded: &[Loaded], names: &[String], writes: &[Write]) -> Vec<Msg> {
        let mut msgs = Vec::new();
        let gone = |key: String| Msg::delete(key, setup::MARKER_TTL);
        for w in writes {
            match w {
                Write::DeleteHolder { name, token } => {
                    let live = loaded[at(names, name)]
                        .holders
                        .get(token)
                        .is_some_and(|g| g.live);
                    if live {
                        msgs.push(gone(self.keys.holder(name, token)));
                    }
                }
                Write::DeleteWaiter { token, .. } => msgs.push(gone(self.keys.waiter(token))),
                Write::Wake { token, .. } => {
                    let bell = Bytes::from_static(wake::RING);
                    let key = self.keys.waiter(token);
                    msgs.push(Msg::put(key, bell, None, Some(super::WAITER_TTL)));
                }
                _ => {}
            }
        }
        msgs
    }
}

/// Write the records one by one, in name order (a bucket without atomic batches). False if
/// one lost to another writer: the holder keys this grant wrote are deleted then, so the
/// records it did write name a dead holder, and no key the records do not name lingers
/// until its expiry (whose marker would wake the waiters for nothing).
async fn write_records(b: &Bucket, records: Vec<Msg>, leases: &[Lease]) -> StoreResult<bool> {
    let mut wrote_any = false;
    for m in records {
        match b.send(m).await? {
            Wrote::Done(_) => wrote_any = true,
            Wrote::Conflict => {
                // A holder key that was live before is this token's own lease (a grant
                // tried again): it stays, unless a partial grant must die. Any other
                // would be a lease no grant gave, live if a record names its token.
                let undo = leases
                    .iter()
                    .filter(|l| l.holder && (wrote_any || !l.was_live));
                let gone = undo.map(|l| b.delete(&l.key, setup::MARKER_TTL));
                for r in join_all(gone).await {
                    r?;
                }
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The writes of a decision on one record, handed over at once and their answers awaited
/// after: one round trip. The server writes them in order (lease keys, record, `tidy`), so
/// the record never lands before the keys it names. No lease here expects a revision (a new
/// holder's key, a waiter's), so none can lose; if the record loses, the tidying that went
/// out with it costs no more than after a win (a holder that left gone sooner, a waiter
/// rung for nothing). A new holder key is left to its ttl then, not deleted: a record that
/// names no holder by it makes it nobody's lease, and the key may be a lease after all,
/// written over by a release that handed this token the lock meanwhile (`handover`). (A
/// waiter that judged the holder gone from a record read just before that release, and
/// lost, deleted the handed lease's key: the next attempt found the handed waiter dead
/// and took the lock while the waiter took its handover.) The stream sequences of the
/// leases' writes if the record won; `None` if it lost.
async fn in_order(
    b: &Bucket,
    leases: &[Lease],
    records: Vec<Msg>,
    tidy: Vec<Msg>,
) -> StoreResult<Option<Vec<u64>>> {
    let mut sent = Vec::new();
    for m in leases.iter().map(Lease::msg).chain(records) {
        sent.push(b.submit(m).await?);
    }
    let mut later = Vec::new();
    for m in tidy {
        later.extend(b.submit(m).await.ok());
    }
    let (mut seqs, mut won) = (Vec::new(), true);
    for s in sent {
        match b.acked(s).await? {
            Wrote::Done(seq) => seqs.push(seq),
            Wrote::Conflict => won = false,
        }
    }
    join_all(later.into_iter().map(|s| b.acked(s))).await;
    seqs.truncate(leases.len());
    Ok(won.then_some(seqs))
}

/// Whether a decision deletes a waiter's key: a waiter whose key went while its record
/// write lost would lose its place in the line, so that delete waits for the record.
fn drops_waiters(writes: &[Write]) -> bool {
    writes
        .iter()
        .any(|w| matches!(w, Write::DeleteWaiter { .. }))
}

/// Where `name` is among the operation's names.
fn at(names: &[String], name: &str) -> usize {
    names
        .iter()
        .position(|n| n == name)
        .expect("a name of the op")
}

/// Whether any of the writes lost to another writer; the first error otherwise.
fn first_conflict(wrote: Vec<StoreResult<Wrote>>) -> StoreResult<bool> {
    let mut conflict = false;
    for w in wrote {
        conflict |= w? == Wrote::Conflict;
    }
    Ok(conflict)
}
