//! A quorum member that forgot abstains until it is safe: the "delayed restart" of a store
//! without persistence, enforced by the client instead of left to the operator.
//!
//! A Redis server restarted without its data, or a file store whose directory was emptied,
//! has lost its holders: it would grant a lock that the other members still hold, and with
//! one more such member a second holder would get a majority. So every member keeps, per
//! name, a marker that only the engine sets (`Store::mark`, after the member voted for a
//! lease) and that goes with the rest of its data; and each grant attempt tells, from the same
//! atomic operation, whether the marker is there and how long the leases the member holds on
//! the name still run by its own clock (its horizon; a busy member holds one that runs on).
//!
//! The rule, per name, on every attempt: a member whose marker is gone while another member
//! that answered still has its own, with a horizon not yet passed (or busy), counts as "no"
//! (busy until that horizon) and its grant is given back. Once the horizons of the members
//! that remember have passed, every lease the forgetful member could have held before has run
//! out or was released, so it votes again, gets its marker back, and tells the holder it
//! admits that the lease before ended unknown (`expired`). When no member has a marker (the
//! first use of a name, or an upgrade from a version without markers) every member votes at
//! once. A majority that forgot at once looks exactly like that first use: no rule on the
//! client can tell them apart, which is the limit RELIABILITY.md states and `doctor` warns of.

use std::time::Duration;

use crate::store::{Attempt, MAX_POLL, Previous, Recall, StoreResult};

/// One store's answer to a grant attempt, with what it remembers per name.
pub(super) type Answer = (usize, StoreResult<(Attempt, Vec<Recall>)>);

/// What the rule decided beyond the answers it rewrote.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    /// Stores whose grant was set aside: it must be given back.
    pub abstained: Vec<usize>,
    /// Stores that granted without a marker and may vote: mark them once the lease holds.
    pub to_mark: Vec<usize>,
}

/// Whether the answers so far decide the attempt, so stragglers may be cut off: a majority
/// granted by members that all remember, or a majority busy (the rule never turns a busy
/// answer into a grant, so the rest cannot make a majority). A grant from a member without
/// its marker waits for every answer, since a slow member may be the one that remembers a
/// live holder: only then do the answers in hand leave the vote open.
pub(super) fn decided(done: &[Answer], need: usize) -> bool {
    let sure = |r: &StoreResult<(Attempt, Vec<Recall>)>| match r {
        Ok((Attempt::Granted(_), recall)) => recall.iter().all(|r| r.marked),
        _ => false,
    };
    let busy = |r: &StoreResult<(Attempt, Vec<Recall>)>| matches!(r, Ok((Attempt::Busy { .. }, _)));
    done.iter().filter(|(_, r)| sure(r)).count() >= need
        || done.iter().filter(|(_, r)| busy(r)).count() >= need
}

/// Whether the answers so far split the vote: a majority answered, some busy, and too few
/// granted to hold without a member still to answer. Such a member breaks the tie if it
/// answers; one that never does (frozen) would cost every split the whole store timeout. The
/// engine does not wait for a member that has given no answer at all (`Reach::is_silent`):
/// the attempt fails, which is always safe, and the contenders queue again (`take`). A single
/// attempt (`-n`) has no next look, so it does wait for a member whose open is still going on.
pub(super) fn split(done: &[Answer], need: usize) -> bool {
    let granted =
        |r: &StoreResult<(Attempt, Vec<Recall>)>| matches!(r, Ok((Attempt::Granted(_), _)));
    let busy = |r: &StoreResult<(Attempt, Vec<Recall>)>| matches!(r, Ok((Attempt::Busy { .. }, _)));
    done.len() >= need
        && done.iter().any(|(_, r)| busy(r))
        && done.iter().filter(|(_, r)| granted(r)).count() < need
}

/// Apply the rule to every answer of one attempt: grants of members that forgot while another
/// member remembers a live lease become busy answers; the rest keep their grants, told
/// `expired` where their own memory of the name is gone.
pub(super) fn judge(answers: Vec<Answer>) -> (Vec<(usize, StoreResult<Attempt>)>, Verdict) {
    let names = answers
        .iter()
        .find_map(|(_, r)| r.as_ref().ok().map(|(_, recall)| recall.len()))
        .unwrap_or(0);
    // Per name: whether some member has its marker, and the latest horizon among those.
    let mut marked = vec![false; names];
    let mut horizon: Vec<Option<Duration>> = vec![None; names];
    for (_, r) in &answers {
        let Ok((attempt, recall)) = r else { continue };
        for (j, rc) in recall.iter().enumerate().filter(|(_, rc)| rc.marked) {
            marked[j] = true;
            let runs_on = match attempt {
                // A busy member holds a lease that runs on (until at most its retry time).
                Attempt::Busy { retry_after, .. } => {
                    Some(retry_after.unwrap_or(MAX_POLL).max(rc.horizon))
                }
                Attempt::Granted(_) => (!rc.horizon.is_zero()).then_some(rc.horizon),
            };
            horizon[j] = horizon[j].max(runs_on);
        }
    }
    let mut verdict = Verdict::default();
    let out = answers
        .into_iter()
        .map(|(i, r)| {
            let r = r.map(|(attempt, recall)| {
                let Attempt::Granted(mut grants) = attempt else {
                    return attempt;
                };
                let forgot: Vec<usize> = (0..recall.len()).filter(|&j| !recall[j].marked).collect();
                if forgot.is_empty() {
                    return Attempt::Granted(grants);
                }
                let wait = forgot.iter().filter_map(|&j| horizon[j]).max();
                if let Some(wait) = wait {
                    verdict.abstained.push(i);
                    return Attempt::busy(Some(wait + Duration::from_millis(1)));
                }
                for &j in forgot.iter().filter(|&&j| marked[j]) {
                    // What ended before is unknown to this member: say the pessimistic answer.
                    grants[j].previous = Previous::Expired;
                }
                verdict.to_mark.push(i);
                Attempt::Granted(grants)
            });
            (i, r)
        })
        .collect();
    (out, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Granted;

    fn granted(marked: bool, horizon_ms: u64) -> StoreResult<(Attempt, Vec<Recall>)> {
        let g = Granted {
            fence: 1,
            previous: Previous::None,
            started: None,
        };
        let rc = Recall {
            marked,
            horizon: Duration::from_millis(horizon_ms),
        };
        Ok((Attempt::Granted(vec![g]), vec![rc]))
    }

    fn busy(marked: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        let rc = Recall {
            marked,
            horizon: Duration::from_millis(4000),
        };
        let a = Attempt::busy(Some(Duration::from_millis(4000)));
        Ok((a, vec![rc]))
    }

    #[test]
    fn a_member_that_forgot_abstains_while_another_remembers_a_live_lease() {
        let (out, v) = judge(vec![
            (0, granted(false, 0)),
            (1, granted(false, 0)),
            (2, busy(true)),
        ]);
        assert_eq!(v.abstained, vec![0, 1]);
        assert!(v.to_mark.is_empty());
        assert!(
            out.iter()
                .all(|(_, r)| matches!(r, Ok(Attempt::Busy { .. })))
        );
    }

    #[test]
    fn first_use_votes_at_once_and_a_passed_horizon_lets_the_forgetful_vote() {
        let (_, v) = judge(vec![(0, granted(false, 0)), (1, granted(false, 0))]);
        assert!(v.abstained.is_empty());
        assert_eq!(v.to_mark, vec![0, 1]);
        let (out, v) = judge(vec![(0, granted(false, 0)), (1, granted(true, 0))]);
        assert!(v.abstained.is_empty());
        assert_eq!(v.to_mark, vec![0]);
        let Ok(Attempt::Granted(g)) = &out[0].1 else {
            panic!("granted")
        };
        assert_eq!(g[0].previous, Previous::Expired);
    }
}
