//! One lock name's record (an S3 object, a DynamoDB item's body): a JSON object holding the
//! name's fence counter, how its last lease ended, and its holders (`record::rules::Rows`), plus a
//! random nonce and the writer's owner id.
//!
//! Every body is unique: S3's ETag is the body's MD5, so two writes of the same bytes share
//! one ETag, and an `If-Match` made with the first would succeed against the second. The
//! nonce (128 random bits per write) makes every write's ETag new, whatever it records.
//! (DynamoDB's version is a random attribute of its own, but the nonce costs nothing there.)
//! Waiters are not kept in the record (they poll; see `poll`).

use serde::{Deserialize, Serialize};

use crate::store::record::rules::{HolderRow, Rows};
use crate::store::{StoreError, StoreResult};

#[derive(Serialize, Deserialize)]
struct Holder {
    token: String,
    mode: String,
    fence: i64,
    /// The server's clock, ms since the epoch (see the module doc of `records` for its padding).
    expires: i64,
    meta: String,
}

#[derive(Serialize, Deserialize)]
struct Record {
    /// The format's version: a record of a later one is refused, never misread.
    v: u32,
    nonce: String,
    writer: String,
    fence: i64,
    previous: String,
    holders: Vec<Holder>,
    /// The engine's marker (`Store::mark`): in the record itself, so that it goes with the
    /// holders when the bucket or table loses them (absent in a record written before it was
    /// kept: that record reads as one that forgot, which only makes a quorum wait).
    #[serde(default)]
    marked: bool,
}

const VERSION: u32 = 1;

/// The body to write for `rows`, written by `token`'s owner (empty for a write that no lease
/// makes: a purge, a forced release, a fence raise).
pub fn encode(rows: &Rows, token: &str) -> Vec<u8> {
    let record = Record {
        v: VERSION,
        nonce: crate::names::new_token(),
        writer: crate::names::owner_id(token),
        fence: rows.fence,
        previous: rows.previous.clone(),
        holders: rows
            .holders
            .iter()
            .map(|h| Holder {
                token: h.token.clone(),
                mode: h.mode.clone(),
                fence: h.fence,
                expires: h.expires,
                meta: h.meta.clone(),
            })
            .collect(),
        marked: rows.marked,
    };
    serde_json::to_vec(&record).expect("a record serializes")
}

/// The rows a body records, for `name`.
pub fn decode(name: &str, body: &[u8]) -> StoreResult<Rows> {
    let r: Record = serde_json::from_slice(body).map_err(|e| {
        StoreError::protocol(format!(
            "the record of {name:?} is not dlock's ({e}); is another program writing there?"
        ))
    })?;
    if r.v != VERSION {
        return Err(StoreError::protocol(format!(
            "the record of {name:?} is of format {}; this dlock reads {VERSION}: upgrade it",
            r.v
        )));
    }
    Ok(Rows {
        name: name.to_string(),
        fence: r.fence,
        previous: r.previous,
        wseq: 0,
        holders: r
            .holders
            .into_iter()
            .map(|h| HolderRow {
                token: h.token,
                mode: h.mode,
                fence: h.fence,
                expires: h.expires,
                meta: h.meta,
            })
            .collect(),
        marked: r.marked,
        ..Rows::default()
    })
}

/// What a body records, without its nonce and writer: a write that changes nothing of it is
/// not sent (a busy attempt, a waiter's look).
pub fn same(a: &Rows, b: &Rows) -> bool {
    a.fence == b.fence && a.previous == b.previous && a.holders == b.holders && a.marked == b.marked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_no_two_bodies_are_alike() {
        let rows = Rows {
            name: "job".into(),
            fence: 7,
            previous: "released".into(),
            holders: vec![HolderRow {
                token: "t".repeat(32),
                mode: "x".into(),
                fence: 7,
                expires: 1_700_000_000_000,
                meta: "{}".into(),
            }],
            marked: true,
            ..Rows::default()
        };
        let (a, b) = (encode(&rows, "abc"), encode(&rows, "abc"));
        assert_ne!(
            a, b,
            "two writes of one record must differ (S3's ETag is their MD5)"
        );
        let back = decode("job", &a).unwrap();
        assert!(same(&back, &rows));
        assert_eq!(back.name, "job");
        assert!(decode("job", b"{}").is_err());
        let later = String::from_utf8(a).unwrap().replace("\"v\":1", "\"v\":9");
        assert!(
            decode("job", later.as_bytes())
                .unwrap_err()
                .message()
                .contains("upgrade")
        );
    }
}
