//! Where a namespace's keys live in the KV bucket. Every part of a key is one NATS subject
//! token: lock names, namespaces and tokens are escaped into the characters a KV key allows
//! (letters, digits, `-`, `_`), with `=XX` for every other byte. The escape is one-to-one and
//! keeps prefixes (a name's escape starts with its prefix's), so no two names share a key.
//!
//! - `NS.r.NAME`: the name's record (fence, previous, holders, waiters), never expiring;
//! - `NS.h.NAME.TOKEN`: one holder's lease, expired by the server (`Nats-TTL`);
//! - `NS.w.TOKEN`: one waiter's presence and its wake-up bell, also on a short TTL;
//! - `NS.shards`: the namespace's shard-list record.

/// `text` escaped into one KV key token; "" is `=` (no escape of a non-empty text is).
pub fn escape(text: &str) -> String {
    if text.is_empty() {
        return "=".into();
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02x}"));
        }
    }
    out
}

/// The text an `escape` came from; None for a token no escape makes. An escape has no `%`
/// (it is `=25`), so with `=` read as `%` it is percent-encoding.
pub fn unescape(token: &str) -> Option<String> {
    if token == "=" {
        return Some(String::new());
    }
    crate::store::server::percent_decode(&token.replace('=', "%")).ok()
}

/// The keys of one namespace.
#[derive(Clone, Debug)]
pub struct Keys {
    ns: String,
}

impl Keys {
    pub fn new(namespace: &str) -> Keys {
        Keys {
            ns: escape(namespace),
        }
    }
    pub fn record(&self, name: &str) -> String {
        format!("{}.r.{}", self.ns, escape(name))
    }
    /// Every record of the namespace, as a subject filter under the bucket's prefix.
    pub fn records(&self) -> String {
        format!("{}.r.*", self.ns)
    }
    /// The name a record's key names, if it is one.
    pub fn name_of(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&self.ns)?.strip_prefix(".r.")?;
        unescape(rest)
    }
    pub fn holder(&self, name: &str, token: &str) -> String {
        format!("{}.h.{}.{}", self.ns, escape(name), escape(token))
    }
    pub fn waiter(&self, token: &str) -> String {
        format!("{}.w.{}", self.ns, escape(token))
    }
    pub fn shards(&self) -> String {
        format!("{}.shards", self.ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_one_to_one_and_keep_prefixes() {
        for s in [
            "",
            "a",
            "=",
            "a.b",
            "jobs/nightly",
            "x y",
            "é",
            "a-b_c",
            "=3d",
        ] {
            assert_eq!(unescape(&escape(s)).as_deref(), Some(s), "{s:?}");
        }
        assert_ne!(escape(""), escape("="));
        assert_ne!(escape("a.b"), escape("a=2eb"));
        assert!(escape("jobs/nightly").starts_with(&escape("jobs/")));
        assert!(
            escape("a.b*>")
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=".contains(c))
        );
    }

    #[test]
    fn record_keys_give_back_their_names() {
        let k = Keys::new("team.a");
        assert_eq!(
            k.name_of(&k.record("db/migrate")).as_deref(),
            Some("db/migrate")
        );
        assert_eq!(k.name_of(&k.holder("x", "t")), None);
        assert_eq!(Keys::new("team").name_of(&k.record("x")), None);
    }
}
