//! The queue as the state file writes it: one string, `ticket mode token` per waiter, the
//! waiters separated by `,` (tokens are hex, modes `x`, `s` or `l<K>`). Every operation on
//! a name reads and writes its whole queue, and a JSON object per waiter cost a key and a
//! value to parse for each field: one string is read at memory speed and split by hand.
//! The array of objects an earlier version wrote is still read.

use std::fmt::{self, Write};

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

use super::Entry;

pub(in crate::store::file) fn serialize<S: Serializer>(
    queue: &[Entry],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut text = String::with_capacity(queue.len() * 56);
    for (i, e) in queue.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(text, "{} {} {}", e.ticket, e.mode, e.token);
    }
    s.serialize_str(&text)
}

pub(in crate::store::file) fn deserialize<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<Entry>, D::Error> {
    d.deserialize_any(Queue)
}

struct Queue;

impl<'de> Visitor<'de> for Queue {
    type Value = Vec<Entry>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a queue of waiters")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<Entry>, E> {
        text.split(',')
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut fields = w.splitn(3, ' ');
                let (ticket, mode, token) = (fields.next(), fields.next(), fields.next());
                match (ticket.and_then(|t| t.parse().ok()), mode, token) {
                    (Some(ticket), Some(mode), Some(token)) if !token.is_empty() => Ok(Entry {
                        ticket,
                        token: token.to_string(),
                        mode: mode.to_string(),
                        meta: String::new(),
                    }),
                    _ => Err(E::custom(format!(
                        "a waiter {w:?} is not `ticket mode token`"
                    ))),
                }
            })
            .collect()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Entry>, A::Error> {
        let mut out = Vec::new();
        while let Some(e) = seq.next_element()? {
            out.push(e);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::State;

    /// A queue written now reads back the same; one an earlier version wrote (an object per
    /// waiter, with its metadata) still reads, and a damaged one is refused, never emptied.
    #[test]
    fn the_queue_reads_back_in_both_forms_and_a_damaged_one_is_refused() {
        let old = r#"{"fence":1,"queue":[{"t":5,"k":"ab12","m":"x","d":"{\"pid\":1}"},
            {"t":7,"k":"cd34","m":"l3"}]}"#;
        let st: State = serde_json::from_str(old).unwrap();
        assert_eq!(st.queue.len(), 2);
        assert_eq!(st.queue[0].meta, r#"{"pid":1}"#);
        let text = serde_json::to_string(&st).unwrap();
        assert!(text.contains(r#""queue":"5 x ab12,7 l3 cd34""#), "{text}");
        let again: State = serde_json::from_str(&text).unwrap();
        let got: Vec<_> = again
            .queue
            .iter()
            .map(|e| (e.ticket, e.mode.as_str(), e.token.as_str()))
            .collect();
        assert_eq!(got, [(5, "x", "ab12"), (7, "l3", "cd34")]);
        for bad in [
            r#"{"fence":1,"queue":"5 x"}"#,
            r#"{"fence":1,"queue":"y x ab"}"#,
        ] {
            assert!(serde_json::from_str::<State>(bad).is_err(), "{bad}");
        }
    }
}
