//! The rules on their own: each grant, renewal, release and view on rows in memory.

use super::*;

fn rows(name: &str) -> Rows {
    Rows {
        name: name.into(),
        previous: "none".into(),
        ..Rows::default()
    }
}

struct Yes;
impl Lives for Yes {
    fn alive(&self, _: &WaiterRow) -> bool {
        true
    }
}

/// The SQL stores' rules at `now`.
fn cx(now: i64) -> Ctx<'static> {
    Ctx {
        now,
        rules: &Rules::SQL,
        alive: &Yes,
    }
}

fn req<'a>(token: &'a str, mode: Mode, queue: bool) -> GrantRequest<'a> {
    // As many as any test's rows, all in the one mode.
    let modes: &'static [Mode] = match mode {
        Mode::Exclusive => &[Mode::Exclusive; 3],
        Mode::Shared => &[Mode::Shared; 3],
        Mode::Limit(k) => Vec::leak(vec![Mode::Limit(k); 3]),
    };
    GrantRequest {
        token,
        modes,
        ttl: 1000,
        meta: "{}",
        queue,
        bell: 7,
    }
}

/// The rules change `rows` in place; the writes they return must say the same.
fn assert_writes_match(rows: &[Rows], writes: &[Write]) {
    for wr in writes {
        match wr {
            Write::PutHolder { name, row } => {
                let r = rows.iter().find(|r| &r.name == name).unwrap();
                assert!(r.holders.contains(row), "{wr:?}");
            }
            Write::DeleteHolder { name, token } => {
                let r = rows.iter().find(|r| &r.name == name).unwrap();
                assert!(!r.holders.iter().any(|h| &h.token == token), "{wr:?}");
            }
            _ => {}
        }
    }
}

#[test]
fn exclusive_grant_bumps_the_fence_and_blocks_the_next() {
    let mut rs = vec![rows("a")];
    let (o, w) = grant(&mut rs, &cx(100), &req("t1", Mode::Exclusive, false));
    assert_writes_match(&rs, &w);
    let Outcome::Granted(g) = o else { panic!() };
    assert_eq!(g[0].fence, 1);
    assert_eq!(g[0].previous, Previous::None);
    assert!(w.contains(&Write::Record {
        name: "a".into(),
        fence: 1,
        previous: "none".into(),
        wseq: 0
    }));
    let (o, _) = grant(&mut rs, &cx(200), &req("t2", Mode::Exclusive, false));
    assert_eq!(o, Outcome::Busy(Some(900), false));
}

#[test]
fn an_expired_holder_is_dropped_inside_the_grant_and_reported() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    let (o, w) = grant(&mut rs, &cx(1000), &req("t2", Mode::Exclusive, false));
    let Outcome::Granted(g) = o else { panic!() };
    assert_eq!((g[0].fence, g[0].previous), (2, Previous::Expired));
    assert!(w.contains(&Write::DeleteHolder {
        name: "a".into(),
        token: "t1".into()
    }));
}

#[test]
fn release_checks_the_owner_and_says_released() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    let (held, w) = release(&mut rs, &cx(10), "stale", End::Released);
    assert!(!held);
    assert!(w.is_empty());
    let (held, _) = release(&mut rs, &cx(10), "t1", End::Released);
    assert!(held);
    let (o, _) = grant(&mut rs, &cx(20), &req("t2", Mode::Exclusive, false));
    let Outcome::Granted(g) = o else { panic!() };
    assert_eq!(g[0].previous, Previous::Released);
}

#[test]
fn a_failed_end_is_recorded_and_a_withdrawal_leaves_it() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    release(&mut rs, &cx(10), "t1", End::Failed(Some(2)));
    assert_eq!(rs[0].previous, "failed:2");
    grant(&mut rs, &cx(20), &req("w", Mode::Exclusive, false));
    let (held, w) = release(&mut rs, &cx(30), "w", End::Withdrawn);
    assert!(held);
    assert!(
        !w.iter().any(|w| matches!(w, Write::Record { .. })),
        "{w:?}"
    );
    let (o, _) = grant(&mut rs, &cx(40), &req("t2", Mode::Exclusive, false));
    let Outcome::Granted(g) = o else { panic!() };
    assert_eq!(g[0].previous, Previous::Failed(Some(2)));
}

#[test]
fn renew_needs_every_name_held_and_live() {
    let mut rs = vec![rows("a"), rows("b")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    assert_ne!(renew(&mut rs, 10, "t2", 1000).0, Renewal::Renewed);
    let (ok, w) = renew(&mut rs, 10, "t1", 5000);
    assert_eq!(ok, Renewal::Renewed);
    assert_eq!(w.len(), 2);
    assert!(rs.iter().all(|r| r.holders[0].expires == 5010));
    assert_ne!(
        renew(&mut rs, 5010, "t1", 1000).0,
        Renewal::Renewed,
        "expired: no renewal"
    );
}

/// A first lease on a name that ran out is lost, not forgotten: its row is still there. A
/// record that no longer names the token and says no lease ended was lost with the data.
#[test]
fn a_renewal_tells_a_lease_run_out_from_a_record_forgotten() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    assert_eq!(renew(&mut rs, 2000, "t1", 1000).0, Renewal::Lost);
    let mut wiped = vec![rows("a")];
    assert_eq!(renew(&mut wiped, 10, "t1", 1000).0, Renewal::Forgotten);
    release(&mut rs, &cx(10), "t1", End::Released);
    assert_eq!(renew(&mut rs, 20, "t1", 1000).0, Renewal::Lost);
}

#[test]
fn several_names_are_granted_all_or_none() {
    let mut rs = vec![rows("a"), rows("b")];
    let mut b_only = vec![rows("b")];
    grant(&mut b_only, &cx(0), &req("t0", Mode::Exclusive, false));
    rs[1] = b_only.pop().unwrap();
    let (o, w) = grant(&mut rs, &cx(10), &req("t1", Mode::Exclusive, false));
    assert!(matches!(o, Outcome::Busy(..)));
    assert!(!w.iter().any(|w| matches!(w, Write::PutHolder { .. })));
    assert!(rs[0].holders.is_empty());
}

#[test]
fn sharers_share_limits_count_and_exclusive_waits() {
    let mut rs = vec![rows("a")];
    for t in ["s1", "s2"] {
        assert!(matches!(
            grant(&mut rs, &cx(0), &req(t, Mode::Shared, false)).0,
            Outcome::Granted(_)
        ));
    }
    assert!(matches!(
        grant(&mut rs, &cx(0), &req("x", Mode::Exclusive, false)).0,
        Outcome::Busy(..)
    ));
    let mut rs = vec![rows("b")];
    for (t, ok) in [("l1", true), ("l2", true), ("l3", false)] {
        let o = grant(&mut rs, &cx(0), &req(t, Mode::Limit(2), false)).0;
        assert_eq!(matches!(o, Outcome::Granted(_)), ok, "{t}");
    }
}

#[test]
fn a_queued_waiter_is_woken_by_release_and_leaves_no_row() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    let (_, w) = grant(&mut rs, &cx(1), &req("w1", Mode::Exclusive, true));
    assert!(w.iter().any(|w| matches!(w, Write::PutWaiter { .. })));
    grant(&mut rs, &cx(2), &req("w2", Mode::Exclusive, true));
    grant(&mut rs, &cx(3), &req("w1", Mode::Exclusive, true));
    assert_eq!(rs[0].waiters.len(), 2);
    assert_eq!(rs[0].wseq, 2, "a waiter coming back keeps its place");
    let (_, w) = release(&mut rs, &cx(4), "t1", End::Released);
    let wakes: Vec<_> = w
        .iter()
        .filter(|w| matches!(w, Write::Wake { .. }))
        .collect();
    assert_eq!(
        wakes,
        vec![&Write::Wake {
            token: "w1".into(),
            bell: 7
        }]
    );
    grant(&mut rs, &cx(5), &req("w1", Mode::Exclusive, true));
    assert_eq!(rs[0].waiters.len(), 1);
    let (_, w) = release(&mut rs, &cx(6), "w2", End::Released);
    assert!(w.contains(&Write::DeleteWaiter {
        name: "a".into(),
        token: "w2".into()
    }));
    assert!(rs[0].waiters.is_empty());
}

#[test]
fn a_dead_waiter_is_skipped_and_dropped() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    grant(&mut rs, &cx(1), &req("dead", Mode::Exclusive, true));
    grant(&mut rs, &cx(500), &req("live", Mode::Exclusive, true));
    let (_, w) = release(&mut rs, &cx(2100), "t1", End::Released);
    assert!(w.contains(&Write::Wake {
        token: "live".into(),
        bell: 7
    }));
    assert!(w.contains(&Write::DeleteWaiter {
        name: "a".into(),
        token: "dead".into()
    }));
}

#[test]
fn force_drops_holders_and_says_expired_raise_only_lifts() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
    assert!(force(&mut rs, &cx(1)).0);
    assert!(!force(&mut rs, &cx(1)).0);
    assert_eq!(rs[0].previous, "expired");
    assert_eq!(raise(&mut rs, &[10]).len(), 1);
    assert!(raise(&mut rs, &[5]).is_empty());
    let Outcome::Granted(g) = grant(&mut rs, &cx(2), &req("t2", Mode::Exclusive, false)).0 else {
        panic!()
    };
    assert_eq!(g[0].fence, 11);
}

#[test]
fn an_unreadable_mode_blocks_everyone() {
    let mut rs = vec![rows("a")];
    rs[0].holders.push(HolderRow {
        token: "odd".into(),
        mode: "?".into(),
        fence: 1,
        expires: 100,
        meta: String::new(),
    });
    let o = grant(&mut rs, &cx(0), &req("s", Mode::Shared, false)).0;
    assert!(matches!(o, Outcome::Busy(..)));
}

#[test]
fn view_shows_only_the_live() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("t1", Mode::Shared, false));
    grant(&mut rs, &cx(500), &req("t2", Mode::Shared, false));
    let v = view(&rs[0], &cx(1200));
    assert_eq!(v.holders.len(), 1);
    assert_eq!(v.holders[0].ttl_left_ms, 300);
    assert_eq!(v.fence, 2);
}

/// A release records its own end first, then drops whatever else expired, as the
/// Redis script does: a sharer that ran out is what the next holder hears of.
#[test]
fn a_release_then_drops_the_expired_and_says_so() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &cx(0), &req("s1", Mode::Shared, false));
    grant(&mut rs, &cx(900), &req("s2", Mode::Shared, false));
    let (held, w) = release(&mut rs, &cx(1500), "s2", End::Released);
    assert!(held);
    assert!(w.contains(&Write::DeleteHolder {
        name: "a".into(),
        token: "s1".into()
    }));
    assert_eq!(rs[0].previous, "expired");
}

/// With `Rules::far`, a waiter with enough live waiters ahead is told it stands far back,
/// and its row lives `factor` times longer; the ones near the head live and look as before.
/// Without it nobody is far back, however long the line.
#[test]
fn a_waiter_far_back_in_line_keeps_its_place_longer() {
    let far = Rules {
        far: Some(Far {
            ahead: 2,
            factor: 10,
        }),
        ..Rules::SQL
    };
    for (rules, far_from) in [(far, Some(2)), (Rules::SQL, None)] {
        let cx = |now| Ctx {
            now,
            rules: &rules,
            alive: &Yes,
        };
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(100), &req("h", Mode::Exclusive, false));
        for (i, t) in ["w0", "w1", "w2", "w3"].iter().enumerate() {
            let (o, _) = grant(&mut rs, &cx(100), &req(t, Mode::Exclusive, true));
            let is_far = far_from.is_some_and(|f| i >= f);
            assert_eq!(o, Outcome::Busy(Some(1000), is_far), "{t}");
            let row = rs[0].waiters.iter().find(|w| w.token == *t).unwrap();
            let life = if is_far { 20_000 } else { 2_000 };
            assert_eq!(row.expires, 100 + life, "{t}");
        }
        // The waiters ahead gone, a far one is near at its next look.
        for t in ["w0", "w1"] {
            release(&mut rs, &cx(200), t, crate::store::Outcome::Withdrawn);
        }
        let (o, _) = grant(&mut rs, &cx(300), &req("w2", Mode::Exclusive, true));
        assert_eq!(o, Outcome::Busy(Some(800), false));
        let row = rs[0].waiters.iter().find(|w| w.token == "w2").unwrap();
        assert_eq!(row.expires, 2_300);
    }
}

/// The rules of a store that hands a released lock over (`Rules::hand_over`), at `now`.
fn handing(now: i64) -> Ctx<'static> {
    static HANDING: Rules = Rules {
        hand_over: true,
        ..Rules::SQL
    };
    Ctx {
        now,
        rules: &HANDING,
        alive: &Yes,
    }
}

#[test]
fn a_release_hands_the_lock_to_the_live_waiter_at_the_head() {
    let mut rs = vec![rows("a")];
    grant(&mut rs, &handing(0), &req("t1", Mode::Exclusive, false));
    grant(&mut rs, &handing(1), &req("gone", Mode::Exclusive, true));
    grant(&mut rs, &handing(500), &req("w1", Mode::Exclusive, true));
    grant(&mut rs, &handing(600), &req("w2", Mode::Exclusive, true));
    renew(&mut rs, 900, "t1", 1000);
    renew(&mut rs, 1800, "t1", 1000);
    let (held, w) = release(&mut rs, &handing(2100), "t1", End::Released);
    assert!(held);
    assert_writes_match(&rs, &w);
    // The dead waiter dropped, the next one holding with the next fence and its own ttl,
    // out of the line and rung; the one behind it still waits.
    let h = &rs[0].holders;
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].token.as_str(), h[0].fence, h[0].expires),
        ("w1", 2, 3100)
    );
    assert_eq!(rs[0].previous, "released");
    let tokens: Vec<&str> = rs[0].waiters.iter().map(|x| x.token.as_str()).collect();
    assert_eq!(tokens, ["w2"]);
    for gone in ["gone", "w1"] {
        assert!(w.contains(&Write::DeleteWaiter {
            name: "a".into(),
            token: gone.into()
        }));
    }
    let wakes: Vec<_> = w
        .iter()
        .filter(|w| matches!(w, Write::Wake { .. }))
        .collect();
    let rung = Write::Wake {
        token: "w1".into(),
        bell: 7,
    };
    assert_eq!(wakes, vec![&rung]);
    // The handed waiter's own attempt finds it holds, and is granted again above it.
    let (o, _) = grant(&mut rs, &handing(2200), &req("w1", Mode::Exclusive, true));
    let Outcome::Granted(g) = o else {
        panic!("{o:?}")
    };
    assert_eq!(g[0].fence, 3);
    assert_eq!(rs[0].holders.len(), 1);
}

#[test]
fn only_a_lone_exclusive_request_is_handed_a_lock() {
    // A sharer, a waiter for two names, and a store that does not hand over: rung only.
    let shared = |rs: &mut Vec<Rows>| {
        grant(rs, &handing(1), &req("w", Mode::Shared, true));
    };
    let two = |rs: &mut Vec<Rows>| {
        let mut both = vec![rs[0].clone(), rows("b")];
        grant(&mut both, &handing(1), &req("w", Mode::Exclusive, true));
        rs[0] = both.remove(0);
    };
    let lone = |rs: &mut Vec<Rows>| {
        grant(rs, &handing(1), &req("w", Mode::Exclusive, true));
    };
    type Queue<'a> = &'a dyn Fn(&mut Vec<Rows>);
    let cases: [(Queue, Ctx); 3] = [(&shared, handing(2)), (&two, handing(2)), (&lone, cx(2))];
    for (queue, at) in cases {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &handing(0), &req("t1", Mode::Exclusive, false));
        queue(&mut rs);
        let (_, w) = release(&mut rs, &at, "t1", End::Released);
        assert!(rs[0].holders.is_empty(), "{:?}", rs[0].holders);
        assert!(w.contains(&Write::Wake {
            token: "w".into(),
            bell: 7
        }));
    }
    // Nor while another holder stays.
    let mut rs = vec![rows("a")];
    grant(&mut rs, &handing(0), &req("s1", Mode::Shared, false));
    grant(&mut rs, &handing(0), &req("s2", Mode::Shared, false));
    grant(&mut rs, &handing(1), &req("w", Mode::Exclusive, true));
    release(&mut rs, &handing(2), "s1", End::Released);
    let tokens: Vec<&str> = rs[0].holders.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens, ["s2"]);
}
