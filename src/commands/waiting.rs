//! What the person waiting for a lock sees: a live line on a terminal, redrawn in place about
//! once a second (issue 17), plain lines with `-v` elsewhere, and the `waiting` event.
//!
//! The line never changes how the engine waits: the engine is still woken by the store's
//! notifications, and only reports here that an attempt found the lock busy. The holder is
//! read with `inspect` when waiting starts and then at most every `REFRESH_MIN` (when the
//! engine has seen the lock busy since) or every `REFRESH_MAX`; between reads the clocks on
//! the line (held for, expires in, waited) tick locally.
//!
//! While the stores cannot be reached the engine keeps trying for the whole wait; the line
//! then says so ("redis://...: unreachable for 4s, retrying"), and `follow_reach` tells `-v`
//! and `--events` (`store-unreachable`, `store-back`) when a store goes away and comes back,
//! for a holder as much as for a waiter.

use std::convert::Infallible;
use std::time::Duration;

use colored::Colorize;
use futures_util::future::join_all;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at, timeout};

use crate::engine::{Engine, show_outage};

use crate::engine::{QuorumHolder, merge};
use crate::events::Events;
use crate::meta::{self, compact, printable};
use crate::output::Output;
use crate::shard::Shards;
use crate::store::{LockState, StoreError, Waiter};
use crate::supervisor::signals::Signals;

/// Fewest seconds between two reads of the holder, however often the engine finds it busy.
const REFRESH_MIN: Duration = Duration::from_secs(3);
/// Most seconds between two reads, so a changed holder shows even without a busy report.
const REFRESH_MAX: Duration = Duration::from_secs(15);
/// How long one read of the holder may take: the line is a courtesy, never a reason to wait.
const READ_LIMIT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Display {
    /// Redrawn in place on a terminal.
    Live,
    /// `-v` without a terminal: one line when waiting starts, one when it ends.
    Plain,
    Off,
}

/// How the wait ended, for the line that replaces the live one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acquired,
    /// `dlock wait`: the lock is free.
    Free,
    GaveUp,
    Interrupted,
}

/// The holder as last read.
struct Seen {
    at: Instant,
    /// The name that was found held (for `multilock`, the first busy one).
    name: String,
    holders: Vec<QuorumHolder>,
    waiters: Vec<Waiter>,
}

pub struct Waiting<'a> {
    out: &'a Output,
    shards: &'a Shards,
    names: &'a [String],
    /// Our own token, to count the waiters ahead of us where the store keeps a queue.
    token: Option<&'a str>,
    events: &'a Events,
    /// The engines the names live on (one without `--shard`).
    engines: Vec<&'a Engine>,
    display: Display,
    started: Option<Instant>,
    /// Whether the live line is on the screen now (and must be cleared).
    drawn: bool,
    seen: Option<Seen>,
}

impl<'a> Waiting<'a> {
    pub fn new(
        out: &'a Output,
        shards: &'a Shards,
        names: &'a [String],
        token: Option<&'a str>,
        events: &'a Events,
    ) -> Waiting<'a> {
        let display = if out.live_line() {
            Display::Live
        } else if out.verbose() {
            Display::Plain
        } else {
            Display::Off
        };
        Waiting {
            out,
            shards,
            names,
            token,
            events,
            engines: engines_of(shards, names),
            display,
            started: None,
            drawn: false,
            seen: None,
        }
    }

    /// How long it has waited so far (None: it never had to).
    pub fn waited(&self) -> Option<Duration> {
        self.started.map(|s| s.elapsed())
    }

    /// `work` (a wait), with this line following `busy` (see `follow`) meanwhile, until it
    /// ends, or a stopping signal comes first (its number). `dlock wait` and every acquire
    /// wait this one way.
    pub async fn until_signal<T>(
        &mut self,
        signals: &mut Signals,
        busy: watch::Receiver<u32>,
        work: impl Future<Output = T>,
    ) -> Result<T, i32> {
        tokio::select! {
            r = work => Ok(r),
            sig = signals.recv() => Err(sig),
            never = self.follow(busy) => match never {},
        }
    }

    /// Show the wait from the engine's first busy report on; `busy` counts those reports.
    /// Never ends: the caller drops it when the wait is over, then calls `finish`.
    pub async fn follow(&mut self, mut busy: watch::Receiver<u32>) -> Infallible {
        // Waiting starts with the first busy answer, or with a store gone away.
        tokio::select! {
            r = busy.changed() => if r.is_err() {
                return std::future::pending().await;
            },
            _ = until_outage(&self.engines) => {}
        }
        self.started = Some(Instant::now());
        if self.display == Display::Off && !self.events.is_on() {
            // Nothing to show and nobody to tell: no reads of the holder either.
            return std::future::pending().await;
        }
        self.refresh().await;
        let (main, _) = self.describe();
        let holder = self.seen.as_ref().and_then(|s| s.holders.first());
        self.events.emit(
            "waiting",
            self.names,
            json!({
                "held_by": holder.map(|h| meta::summary(&h.holder.meta)),
                "reason": holder.and_then(|h| meta::field(&h.holder.meta, "reason")),
                "ci": holder.and_then(|h| meta::field(&h.holder.meta, "ci")),
            }),
        );
        match self.display {
            Display::Live => self.draw(),
            Display::Plain => self.out.debug(&main),
            Display::Off => {}
        }
        if self.display != Display::Live {
            return std::future::pending().await;
        }
        let mut tick = interval_at(
            Instant::now() + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut read_at = Instant::now();
        let mut busy_since = false;
        let mut closed = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = busy.changed(), if !closed => {
                    closed = r.is_err();
                    busy_since = !closed;
                    continue;
                }
            }
            let age = read_at.elapsed();
            // The first read may come before our own queue entry exists (the engine reports
            // busy, then queues): look again at the next busy report, to say where we stand.
            let soon = !self.placed() && age >= Duration::from_secs(1);
            let reading = self.outage().is_none();
            if reading && ((busy_since && (age >= REFRESH_MIN || soon)) || age >= REFRESH_MAX) {
                self.refresh().await;
                read_at = Instant::now();
                busy_since = false;
            }
            self.draw();
        }
    }

    /// Clear the live line; with `-v`, say how long it waited.
    pub fn finish(&mut self, outcome: Outcome) {
        if self.drawn {
            self.out.raw_err("\r\x1b[2K");
            self.drawn = false;
        }
        let Some(waited) = self.waited() else { return };
        if self.display == Display::Off || !self.out.verbose() {
            return;
        }
        let what = printable(&self.names.join(", "));
        let waited = compact(waited);
        match outcome {
            Outcome::Acquired => self
                .out
                .debug(&format!("acquired {what} after waiting {waited}")),
            Outcome::Free => self
                .out
                .debug(&format!("{what} is free after waiting {waited}")),
            Outcome::GaveUp => self
                .out
                .debug(&format!("stopped waiting for {what} after {waited}")),
            Outcome::Interrupted => {}
        }
    }

    /// Read who holds the first busy name, from every store at once, within `READ_LIMIT`.
    async fn refresh(&mut self) {
        self.seen = Self::read(self.shards, self.names).await;
    }

    /// Who holds the first of `names` that is held, from every store at once, within `READ_LIMIT`
    /// and the store timeout (for the last name, its state even when free). None when no store
    /// answered.
    async fn read(shards: &Shards, names: &[String]) -> Option<Seen> {
        for name in names {
            let engine = shards.engine(name);
            let limit = READ_LIMIT.min(engine.store_timeout());
            let reads = join_all(
                engine
                    .stores()
                    .iter()
                    .map(|s| timeout(limit, s.inspect(name))),
            )
            .await;
            let states: Vec<LockState> = reads.into_iter().filter_map(|r| r.ok()?.ok()).collect();
            let refs: Vec<&LockState> = states.iter().collect();
            // Show a holder a minority of stores report too: a person wants to know of it.
            let merged = merge(&refs, 1);
            if !merged.holders.is_empty() || name == names.last().unwrap_or(name) {
                return Some(Seen {
                    at: Instant::now(),
                    name: name.clone(),
                    holders: merged.holders,
                    waiters: merged.waiters,
                });
            }
        }
        None
    }

    /// The holder of the first held name of `names`, for the message of a caller that did not get
    /// the lock (`-n`, or a wait that ran out): the one line the waiting line shows, and the same
    /// fields as JSON. When there are several names, the line names the one found held. None when
    /// nobody holds any of them any more, or no store answered.
    pub async fn holder(shards: &Shards, names: &[String]) -> Option<(String, serde_json::Value)> {
        let seen = Self::read(shards, names).await?;
        let first = seen.holders.first()?;
        let h = &first.holder;
        let m = &h.meta;
        let mut line = match names.len() {
            1 => String::new(),
            _ => format!("{} ", printable(&seen.name)),
        };
        line.push_str(&format!("by {}", meta::who(m)));
        if let Some(cmd) = meta::field(m, "command") {
            line.push_str(&format!(" ({})", printable(cmd)));
        }
        if seen.holders.len() > 1 {
            line.push_str(&format!(" and {} more", seen.holders.len() - 1));
        }
        if let Some(d) = meta::held_for(m) {
            line.push_str(&format!(" for {}", compact(d)));
        }
        let left = seen.holders.iter().map(|q| q.holder.ttl_left_ms).max();
        line.push_str(&format!(
            ", expires in {}",
            compact(Duration::from_millis(left.unwrap_or(0)))
        ));
        // Last, as on the waiting line: the longest parts.
        if let Some(r) = meta::field(m, "reason") {
            line.push_str(&format!(", reason: {}", printable(r)));
        }
        if let Some(c) = meta::field(m, "ci") {
            line.push_str(&format!(", ci: {}", printable(c)));
        }
        let v = json!({
            "name": seen.name,
            "owner": h.owner,
            "mode": h.mode,
            "fence": h.fence,
            "user": meta::field(m, "user"),
            "host": meta::field(m, "host"),
            "pid": meta::holder_pid(m),
            "alive": meta::alive(m),
            "command": meta::field(m, "command"),
            "held_for_ms": meta::held_for(m).map(|d| d.as_millis() as u64),
            "expires_in_ms": h.ttl_left_ms,
            "reason": meta::field(m, "reason"),
            "ci": meta::field(m, "ci"),
            "holders": seen.holders.len(),
        });
        Some((line, v))
    }

    /// Our position in the store's queue, if the last read found us in one.
    fn position(&self) -> Option<usize> {
        let (token, seen) = (self.token?, self.seen.as_ref()?);
        let me = crate::names::owner_id(token);
        seen.waiters.iter().position(|w| w.owner == me)
    }

    /// Whether the line already says all it can of the queue: we are in it, or nobody is.
    fn placed(&self) -> bool {
        self.token.is_none()
            || self.position().is_some()
            || self.seen.as_ref().is_none_or(|s| s.waiters.is_empty())
    }

    /// The line, as the text before the waited time and the waited time itself.
    fn describe(&self) -> (String, String) {
        let waited = format!(" · waited {}", compact(self.waited().unwrap_or_default()));
        if let Some(outage) = self.outage() {
            let name = self.seen.as_ref().map_or(&self.names[0], |s| &s.name);
            return (format!("waiting for {}: {outage}", printable(name)), waited);
        }
        let Some(seen) = &self.seen else {
            return (
                format!("waiting for {}", printable(&self.names.join(", "))),
                waited,
            );
        };
        let mut line = format!("waiting for {}", printable(&seen.name));
        let mut why = String::new();
        if let Some(first) = seen.holders.first() {
            let m = &first.holder.meta;
            line.push_str(&format!(": held by {}", meta::who(m)));
            if let Some(cmd) = meta::field(m, "command") {
                let mut cmd = printable(cmd);
                if cmd.chars().count() > 40 {
                    cmd = cmd.chars().take(39).chain(['…']).collect();
                }
                line.push_str(&format!(" ({cmd})"));
            }
            if seen.holders.len() > 1 {
                line.push_str(&format!(" and {} more", seen.holders.len() - 1));
            }
            if let Some(d) = meta::held_for(m) {
                line.push_str(&format!(" for {}", compact(d)));
            }
            let left = seen
                .holders
                .iter()
                .map(|q| q.holder.ttl_left_ms)
                .max()
                .unwrap_or(0);
            let left = Duration::from_millis(left).saturating_sub(seen.at.elapsed());
            line.push_str(&format!(", expires in {}", compact(left)));
            // Last before the waited time: the longest parts, cut first on a narrow terminal.
            if let Some(r) = meta::field(m, "reason") {
                why.push_str(&format!(", reason: {}", printable(r)));
            }
            if let Some(c) = meta::field(m, "ci") {
                why.push_str(&format!(", ci: {}", printable(c)));
            }
        }
        match (self.position(), seen.waiters.len()) {
            (Some(0), _) => line.push_str(", next in line"),
            (Some(n), _) => line.push_str(&format!(", {n} ahead of you")),
            (None, 0) => {}
            (None, n) => line.push_str(&format!(", {n} queued")),
        }
        line.push_str(&why);
        (line, waited)
    }

    /// "redis://...: unreachable for 4s, retrying", while a store is and the wait rides it
    /// out (stores that never answered end the wait at once: no retry to promise).
    fn outage(&self) -> Option<String> {
        let mut all = self.engines.iter().filter(|e| e.rides_out()).flat_map(|e| {
            e.outages().into_iter().map(move |o| {
                let store = e.stores()[o.index].describe().to_string();
                (o.since, store, o.error.limit())
            })
        });
        let (since, store, limit) = all.next()?;
        let more = all.count();
        let mut line = still_down(&store, since, limit);
        if more > 0 {
            line.push_str(&format!(" (and {more} more)"));
        }
        Some(line)
    }

    fn draw(&mut self) {
        let (main, tail) = self.describe();
        let width = terminal_size::terminal_size_of(std::io::stderr())
            .map_or(80, |(w, _)| usize::from(w.0))
            .max(40);
        // A line longer than the terminal wraps, and "\r" then clears only its last row: cut
        // the description so that the line fits, keeping the waited time at its end.
        let room = width - 1 - tail.chars().count();
        let main = if main.chars().count() > room {
            main.chars().take(room - 1).chain(['…']).collect()
        } else {
            main
        };
        let text = if self.out.color_stderr() {
            format!("{main}{}", tail.dimmed())
        } else {
            format!("{main}{tail}")
        };
        self.out.raw_err(&format!("\r\x1b[2K{text}"));
        self.drawn = true;
    }
}

/// The engines `names` live on, each once.
fn engines_of<'a>(shards: &'a Shards, names: &[String]) -> Vec<&'a Engine> {
    let mut out: Vec<&Engine> = Vec::new();
    for n in names {
        let e = shards.engine(n);
        if !out.iter().any(|o| std::ptr::eq(*o, e)) {
            out.push(e);
        }
    }
    out
}

/// Until some store of `engines` is unreachable.
async fn until_outage(engines: &[&Engine]) {
    let mut changes: Vec<_> = engines.iter().map(|e| e.reach_changes()).collect();
    loop {
        if engines.iter().any(|e| !e.outages().is_empty()) {
            return;
        }
        let any = changes.iter_mut().map(|c| Box::pin(c.changed()));
        if futures_util::future::select_all(any).await.0.is_err() {
            return std::future::pending().await;
        }
    }
}

/// "redis://...: unreachable for 4s, retrying", or for a server that turns us away at its
/// connection limit "postgres://...: at its connection limit (max_connections) for 4s,
/// retrying": a wait rides both out, without holding a connection to a full server.
fn still_down(store: &str, since: Instant, limit: Option<&str>) -> String {
    let what = match limit {
        Some(setting) => format!("at its connection limit ({setting})"),
        None => "unreachable".to_string(),
    };
    format!(
        "{}: {what} for {}, retrying",
        printable(store),
        show_outage(since.elapsed())
    )
}

/// A store that is unreachable: (its engine, its index), since when, its description and why.
type Down = ((usize, usize), Instant, String, StoreError);

/// Tell of the stores in `now` and not in `known` that they went away, and of those in `known`
/// and not in `now` that they came back: as events, and to `-v` through `print`.
fn tell_changes(
    known: &[Down],
    now: &[Down],
    names: &[String],
    events: &Events,
    print: Option<&Output>,
    retrying: &dyn Fn(usize) -> bool,
) {
    for (key, _, store, error) in now {
        if !known.iter().any(|k| k.0 == *key) {
            events.emit(
                "store-unreachable",
                names,
                json!({ "store": store, "error": error.to_string() }),
            );
            match print {
                Some(out) if retrying(key.0) => {
                    out.debug(&format!("{}; retrying", printable(&error.to_string())))
                }
                Some(out) => out.debug(&printable(&error.to_string())),
                None => {}
            }
        }
    }
    for (key, since, store, _) in known {
        if !now.iter().any(|k| k.0 == *key) {
            let down = since.elapsed();
            events.emit(
                "store-back",
                names,
                json!({ "store": store, "unreachable_ms": down.as_millis() as u64 }),
            );
            if let Some(out) = print {
                out.debug(&format!(
                    "{}: back after {}",
                    printable(store),
                    show_outage(down)
                ));
            }
        }
    }
}

/// How often `-v` repeats that a store is still unreachable.
const STILL_DOWN_EVERY: Duration = Duration::from_secs(5);

/// Per unreachable store of `engines` (by engine and index): since when, its description,
/// and why.
fn outages_of(engines: &[&Engine]) -> Vec<Down> {
    engines
        .iter()
        .enumerate()
        .flat_map(|(k, e)| {
            e.outages().into_iter().map(move |o| {
                let store = e.stores()[o.index].describe().to_string();
                ((k, o.index), o.since, store, o.error)
            })
        })
        .collect()
}

/// Tell `--events` (`store-unreachable`, `store-back`) and, with `print`, `-v` each time a
/// store that `names` live on goes away or comes back; `-v` also says every
/// `STILL_DOWN_EVERY` that one still is. Stores already unreachable when it starts were told
/// of before. Never ends: the caller drops it.
pub async fn follow_reach(
    shards: &Shards,
    names: &[String],
    events: &Events,
    out: &Output,
    print: bool,
) -> Infallible {
    let engines = engines_of(shards, names);
    let print = print && out.verbose();
    if !print && !events.is_on() {
        return std::future::pending().await;
    }
    let mut changes: Vec<_> = engines.iter().map(|e| e.reach_changes()).collect();
    let current = || outages_of(&engines);
    let mut known = current();
    // Only a wait that rides the outage out retries (stores that never answered this
    // process fail fast: see `Engine::rides_out`).
    let retrying = |k: usize| engines[k].rides_out();
    // The first line comes one period after the outage was first told, not at once.
    let mut tick = interval_at(Instant::now() + STILL_DOWN_EVERY, STILL_DOWN_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        let any = changes.iter_mut().map(|c| Box::pin(c.changed()));
        tokio::select! {
            (r, _, _) = futures_util::future::select_all(any) => if r.is_err() {
                return std::future::pending().await;
            },
            _ = tick.tick() => {
                for (_, since, store, e) in known.iter().filter(|o| print && retrying(o.0.0)) {
                    out.debug(&still_down(store, *since, e.limit()));
                }
                continue;
            }
        }
        let now = current();
        tell_changes(&known, &now, names, events, print.then_some(out), &retrying);
        known = now;
    }
}
