//! Where a name lives, and what a shard list is called: both by SHA-256, a standard that
//! never changes, so every version of dlock places every name on the same shard.

use sha2::{Digest, Sha256};

/// The shard of `name`: rendezvous (highest-random-weight) hashing over the shards' labels.
/// Each shard weighs the name independently of the others, so adding a shard moves only the
/// names it now outweighs (about 1/N of them), and removing one moves only its own names.
pub fn pick<'a>(labels: impl IntoIterator<Item = &'a str>, namespace: &str, name: &str) -> usize {
    let mut best = (0, 0u64);
    for (i, label) in labels.into_iter().enumerate() {
        let w = weight(label, namespace, name);
        // Ties (never seen in practice) go to the first in canonical order.
        if i == 0 || w > best.1 {
            best = (i, w);
        }
    }
    best.0
}

/// A shard's weight for one name: the first 8 bytes of SHA-256 over label, namespace and
/// name, each ended by a NUL (which none of them may contain).
pub fn weight(label: &str, namespace: &str, name: &str) -> u64 {
    let mut h = Sha256::new();
    for part in [label, namespace, name] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let d = h.finalize();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The fingerprint of a shard list in canonical form (labels sorted): 128 bits of SHA-256 in
/// hex, after a version line so a future format can never be mistaken for this one.
pub fn fingerprint(labels: &[String]) -> String {
    digest("dlock shard list 1", labels.iter().map(String::as_str))
}

/// What a `run` tells its command of the stores and namespace it holds its lock on
/// (`DLOCK_STORE_ID`), so that a `dlock run` inside can tell the same stores from others
/// without the URLs (which may carry passwords) in the environment.
pub fn store_id(namespace: &str, labels: &[String]) -> String {
    let parts = std::iter::once(namespace).chain(labels.iter().map(String::as_str));
    digest("dlock store id 1", parts)
}

/// 128 bits of SHA-256 in hex over a version line and `parts`, each line ended by a newline.
fn digest<'a>(version: &'a str, parts: impl Iterator<Item = &'a str>) -> String {
    let mut h = Sha256::new();
    for part in std::iter::once(version).chain(parts) {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned outputs: if one of these changes, names move between shards on an upgrade and
    /// clients of two versions lock the same name on different shards. Never update them.
    #[test]
    fn placement_and_fingerprint_never_change() {
        assert_eq!(
            weight("redis://127.0.0.1:6379", "default", "deploy"),
            PINNED_WEIGHT
        );
        let labels = ["redis://a:1".to_string(), "redis://b:1".to_string()];
        assert_eq!(fingerprint(&labels), PINNED_FINGERPRINT);
        let three = ["redis://a:1", "redis://b:1", "redis://c:1"];
        let picked: Vec<usize> = ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .map(|n| pick(three, "default", n))
            .collect();
        assert_eq!(picked, PINNED_PICKS);
    }

    // Computed with Python's hashlib, not with this code.
    const PINNED_WEIGHT: u64 = 3_204_814_163_070_181_652;
    const PINNED_FINGERPRINT: &str = "b9e281aff547c9dac0cefbc59aa68f01";
    const PINNED_PICKS: [usize; 8] = [2, 1, 1, 1, 0, 1, 0, 2];

    fn names(n: usize) -> impl Iterator<Item = String> {
        (0..n).map(|i| format!("job/{i}"))
    }

    #[test]
    fn names_spread_evenly() {
        let shards = [
            "redis://10.0.0.1:6379",
            "redis://10.0.0.2:6379",
            "redis://10.0.0.3:6379",
        ];
        let mut count = [0usize; 3];
        for n in names(30_000) {
            count[pick(shards, "default", &n)] += 1;
        }
        // 10 000 expected each; a binomial's spread is about 82, so 9 500..10 500 is ~6 sigma.
        for c in count {
            assert!((9_500..=10_500).contains(&c), "{count:?}");
        }
    }

    #[test]
    fn adding_a_shard_moves_about_a_quarter_of_names_and_only_to_it() {
        let three = [
            "redis://10.0.0.1:6379",
            "redis://10.0.0.2:6379",
            "redis://10.0.0.3:6379",
        ];
        let four = [three[0], three[1], three[2], "redis://10.0.0.4:6379"];
        let total = 40_000;
        let mut moved = 0;
        for n in names(total) {
            let (before, after) = (pick(three, "ns", &n), pick(four, "ns", &n));
            if before != after {
                assert_eq!(after, 3, "{n} moved between two old shards");
                moved += 1;
            }
        }
        // 1/4 expected (10 000); the spread is about 87, so this is ~6 sigma either way.
        assert!(
            (9_500..=10_500).contains(&moved),
            "{moved} of {total} moved"
        );
    }

    #[test]
    fn the_namespace_is_part_of_the_key() {
        let shards = ["redis://a:1", "redis://b:1", "redis://c:1", "redis://d:1"];
        let differ = names(1_000)
            .filter(|n| pick(shards, "one", n) != pick(shards, "two", n))
            .count();
        assert!(differ > 600, "{differ}");
    }
}
