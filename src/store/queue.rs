//! The queue rule of the stores that keep a FIFO queue (etcd revisions, ZooKeeper sequence
//! nodes, the record engine's fair line that the file store keeps): who may hold next, given
//! the entries ahead, and whose going to wait for.
//!
//! An entry may hold when its mode admits every entry ahead of it (`Mode::admits`), holders
//! and waiters alike: a waiter ahead will hold before us, which is what makes the queue fair,
//! and nobody overtakes an earlier waiter. What to wait for keeps the classic recipes: an
//! exclusive waiter waits for the entry just ahead; a shared one for the nearest entry ahead
//! it cannot share with (the read/write lock); a `limit K` one whose every compatible slot is
//! taken, for any of its K nearest predecessors, since no change further ahead can admit it
//! before one of those goes. So a release wakes O(1) exclusive waiters, not the herd.
//!
//! An entry the store cannot decode (damaged, or written by a later version in a mode this one
//! does not know) counts as an exclusive holder: it blocks rather than admits, the way the
//! file store refuses a damaged state file. Reading it as absent could admit two holders.

use super::Mode;

/// Where a waiter stands, given the entries ahead of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn<'a, T> {
    /// It may hold now.
    Hold,
    /// Nothing can admit it before this entry (the nearest ahead it cannot share with) goes.
    After(&'a T),
    /// Every slot is taken by entries it may share with: the going of any of these, its K
    /// nearest predecessors (nearest first), makes room.
    Slots(Vec<&'a T>),
}

/// The queue rule. `ahead`: the entries ahead of the waiter in queue order, each with its
/// mode, or `None` for an entry that could not be decoded (an exclusive holder: fail closed).
pub(crate) fn turn<T>(mode: Mode, ahead: &[(T, Option<Mode>)]) -> Turn<'_, T> {
    let mode_of = |m: &Option<Mode>| m.unwrap_or(Mode::Exclusive);
    if mode.admits(ahead.iter().map(|(_, m)| mode_of(m))) {
        return Turn::Hold;
    }
    if let Some((id, _)) = ahead
        .iter()
        .rev()
        .find(|(_, m)| !mode.shares_with(mode_of(m)))
    {
        return Turn::After(id);
    }
    let k = match mode {
        Mode::Limit(k) => k.max(1) as usize,
        _ => 1,
    };
    Turn::Slots(ahead.iter().rev().take(k).map(|(id, _)| id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mode::*;

    fn ahead(entries: &[(&'static str, Option<Mode>)]) -> Vec<(&'static str, Option<Mode>)> {
        entries.to_vec()
    }

    #[test]
    fn an_empty_queue_admits_every_mode() {
        for m in [Exclusive, Shared, Limit(1)] {
            assert_eq!(turn::<&str>(m, &[]), Turn::Hold);
        }
    }

    #[test]
    fn exclusive_waits_for_its_predecessor_only() {
        let a = ahead(&[
            ("a", Some(Exclusive)),
            ("b", Some(Shared)),
            ("c", Some(Exclusive)),
        ]);
        assert_eq!(turn(Exclusive, &a), Turn::After(&"c"));
        assert_eq!(turn(Exclusive, &a[..1]), Turn::After(&"a"));
    }

    #[test]
    fn readers_share_and_wait_for_the_nearest_writer() {
        let readers = ahead(&[("a", Some(Shared)), ("b", Some(Shared))]);
        assert_eq!(turn(Shared, &readers), Turn::Hold);
        let mixed = ahead(&[
            ("w1", Some(Exclusive)),
            ("r1", Some(Shared)),
            ("w2", Some(Exclusive)),
            ("r2", Some(Shared)),
        ]);
        assert_eq!(turn(Shared, &mixed), Turn::After(&"w2"));
        // A writer queued ahead blocks later readers even while readers hold: fair.
        let writer_queued = ahead(&[("r", Some(Shared)), ("w", Some(Exclusive))]);
        assert_eq!(turn(Shared, &writer_queued), Turn::After(&"w"));
    }

    #[test]
    fn limit_waits_for_any_of_its_k_nearest_predecessors() {
        assert_eq!(turn(Limit(2), &ahead(&[("a", Some(Limit(2)))])), Turn::Hold);
        let full = ahead(&[
            ("a", Some(Limit(2))),
            ("b", Some(Limit(2))),
            ("c", Some(Limit(2))),
        ]);
        assert_eq!(turn(Limit(2), &full), Turn::Slots(vec![&"c", &"b"]));
        let writer = ahead(&[("x", Some(Exclusive)), ("a", Some(Limit(2)))]);
        assert_eq!(turn(Limit(2), &writer), Turn::After(&"x"));
        // Another K is waited for like a writer, never counted as a slot.
        let other_k = ahead(&[("a", Some(Limit(2))), ("b", Some(Limit(2)))]);
        assert_eq!(turn(Limit(3), &other_k), Turn::After(&"b"));
    }

    #[test]
    fn an_undecodable_entry_blocks_like_an_exclusive_holder() {
        // Alone ahead, it keeps out every mode, and it is what the waiter waits for.
        let damaged = ahead(&[("?", None)]);
        for m in [Exclusive, Shared, Limit(3)] {
            assert_eq!(turn(m, &damaged), Turn::After(&"?"), "{m}");
        }
        // Among sharers it is still the entry a sharer must wait for, never skipped.
        let among = ahead(&[("s1", Some(Shared)), ("?", None), ("s2", Some(Shared))]);
        assert_eq!(turn(Shared, &among), Turn::After(&"?"));
        let slots = ahead(&[("?", None), ("l1", Some(Limit(5)))]);
        assert_eq!(turn(Limit(5), &slots), Turn::After(&"?"));
    }
}
