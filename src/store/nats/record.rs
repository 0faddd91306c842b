//! One name's record as it is kept in its KV key: the SQL stores' rows (`record::rules::Rows`)
//! without their expiry times, which the server keeps instead (each holder's and waiter's own
//! key, on a `Nats-TTL`).

use serde::{Deserialize, Serialize};

use crate::store::record::rules::{HolderRow, Rows, WaiterRow};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "f")]
    pub fence: i64,
    #[serde(rename = "p")]
    pub previous: String,
    #[serde(rename = "q")]
    pub wseq: i64,
    #[serde(rename = "h", default)]
    pub holders: Vec<Entry>,
    #[serde(rename = "w", default)]
    pub waiters: Vec<Entry>,
    /// The engine's marker (`Store::mark`), in the record, so that it goes with the holders
    /// when the bucket or the server's data does.
    #[serde(rename = "k", default)]
    pub marked: bool,
}

/// A holder (`n`: its fence) or a waiter (`n`: its arrival number).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "t")]
    pub token: String,
    #[serde(rename = "m")]
    pub mode: String,
    #[serde(rename = "n")]
    pub n: i64,
    #[serde(rename = "d")]
    pub meta: String,
    /// A waiter's: the lease a release may hand it (`WaiterRow::ttl`), 0 for none.
    #[serde(rename = "l", default, skip_serializing_if = "is_zero")]
    pub ttl: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Whether a holder's or waiter's key is live, and (for `inspect` and a waiter's next look
/// only: the server alone judges expiry) about how long it has left.
pub type Left = Option<i64>;

impl Record {
    /// A record that a missing key stands for.
    pub fn empty() -> Record {
        Record {
            previous: "none".into(),
            ..Record::default()
        }
    }

    /// What the rows say, once the rules have decided on them.
    pub fn of(r: &Rows) -> Record {
        let entry = |token: &str, mode: &str, n: i64, meta: &str| Entry {
            token: token.into(),
            mode: mode.into(),
            n,
            meta: meta.into(),
            ttl: 0,
        };
        Record {
            fence: r.fence,
            previous: r.previous.clone(),
            wseq: r.wseq,
            holders: r
                .holders
                .iter()
                .map(|h| entry(&h.token, &h.mode, h.fence, &h.meta))
                .collect(),
            waiters: r
                .waiters
                .iter()
                .map(|w| Entry {
                    ttl: w.ttl,
                    ..entry(&w.token, &w.mode, w.seq, &w.meta)
                })
                .collect(),
            marked: r.marked,
        }
    }

    /// The rows the rules decide on, at the rules' `now`: a holder or waiter whose key is
    /// live runs until `now + left`, one whose key is gone ran out at `now`.
    pub fn rows(
        &self,
        name: &str,
        now: i64,
        holder: impl Fn(&str) -> Left,
        waiter: impl Fn(&str) -> Left,
    ) -> Rows {
        let until = |left: Left| left.map_or(now, |l| now + l.max(1));
        Rows {
            name: name.into(),
            fence: self.fence,
            previous: self.previous.clone(),
            wseq: self.wseq,
            holders: self
                .holders
                .iter()
                .map(|h| HolderRow {
                    token: h.token.clone(),
                    mode: h.mode.clone(),
                    fence: h.n,
                    expires: until(holder(&h.token)),
                    meta: h.meta.clone(),
                })
                .collect(),
            waiters: self
                .waiters
                .iter()
                .map(|w| WaiterRow {
                    token: w.token.clone(),
                    mode: w.mode.clone(),
                    seq: w.n,
                    expires: until(waiter(&w.token)),
                    meta: w.meta.clone(),
                    bell: 0,
                    ttl: w.ttl,
                })
                .collect(),
            marked: self.marked,
            ..Rows::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_without_their_times() {
        let rec = Record {
            fence: 7,
            previous: "released".into(),
            wseq: 2,
            holders: vec![Entry {
                token: "t1".into(),
                mode: "s".into(),
                n: 7,
                meta: "{}".into(),
                ttl: 0,
            }],
            waiters: vec![Entry {
                token: "t2".into(),
                mode: "x".into(),
                n: 2,
                meta: "{}".into(),
                ttl: 0,
            }],
            marked: true,
        };
        let rows = rec.rows("n", 1000, |_| Some(500), |_| None);
        assert_eq!(rows.holders[0].expires, 1500);
        // A key that is gone: expired at `now` (the rules drop what is not after it).
        assert_eq!(rows.waiters[0].expires, 1000);
        assert_eq!(Record::of(&rows), rec);
        let json = serde_json::to_string(&rec).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), rec);
    }
}
