//! The child process of `run` and `multilock -- CMD`, supervised under a lease.
//!
//! The command runs in its own process group, so signals reach everything it started, under a
//! watchdog that is its parent and a child subreaper (see `watchdog`), so that the whole tree
//! it starts, whatever group or session a part of it moves to, stays within reach. The lease
//! is renewed every ttl/3 (jittered) by a task of its own. If no renewal has succeeded by
//! (deadline - kill grace), the group gets SIGTERM, and SIGKILL before the deadline itself:
//! the command never runs past the client's conservative deadline, which falls before any
//! store lets the lease go. A renewal the store refuses (the lease is gone: `unlock --force`,
//! an expiry) means someone else may hold the lock already: SIGTERM at once, SIGKILL one kill
//! grace later, by dlock and by its watchdog alike. If dlock dies, the watchdog stops the
//! whole tree: SIGTERM to all of it at once, SIGKILL one kill grace later, before the deadline.

mod alarm;
mod job;
pub mod orphan;
mod settle;
pub mod signals;
mod spawn;
mod stop;
mod tree;
pub mod watchdog;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, sleep_until};

use crate::engine::{Health, Lease, Session, timing};
use crate::events::{self, Events};
use crate::exit::{Error, Result};
use crate::output::Output;
use crate::shard::Shards;
use crate::store::Outcome;
use crate::sys;
pub use alarm::Warnings;
use alarm::{Alarm, State};
use signals::{FORWARDED, Signals};
use stop::Stop;

/// The `--kill-grace` to use: as given, or the default; it must leave room for renewals.
pub fn kill_grace(given: Option<Duration>, ttl: Duration) -> Result<Duration> {
    let grace = given.unwrap_or_else(|| timing::default_kill_grace(ttl));
    if grace > ttl / 2 {
        return Err(Error::usage(format!(
            "--kill-grace {} is more than half the ttl {}; raise --ttl or lower --kill-grace",
            humantime::format_duration(grace),
            humantime::format_duration(ttl)
        )));
    }
    Ok(grace)
}

/// What `run`'s cron helpers ask of the supervision (none for `multilock`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// `--hold-min`: keep the lease until this long after the command started, even if the
    /// command ends sooner; the lease is then left to expire on the store.
    pub hold_min: Option<Duration>,
    /// `--max-runtime`: stop the command this long after it started.
    pub max_runtime: Option<Duration>,
}

/// "1 process", "2 processes".
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How long before the deadline the command gets SIGKILL: a quarter of the kill grace.
fn margin(grace: Duration) -> Duration {
    (grace / 4).max(Duration::from_millis(10))
}

pub use spawn::Prepared;
pub(crate) use spawn::not_run;

/// Fork the watchdog of `command` before asking for a lock on (some of) `names`, so that the
/// fork is not between the grant and the command (see `spawn`). `leave_running`: the
/// command's own exit ends the job, whatever it left running (`--leave-running`).
pub fn prepare(
    command: &[OsString],
    names: &[String],
    grace: Duration,
    leave_running: bool,
) -> Result<Prepared> {
    spawn::prepare(command, names, grace, margin(grace), leave_running)
}

/// Run the prepared command while `lease` is held, under its watchdog; release the lease when
/// it exits and return the exit code dlock should end with. `shards` renews and releases the
/// lease; `out` reports; renewals, their failures, a loss and the release go to `events`.
pub async fn supervise_with(
    shards: &Arc<Shards>,
    out: &Output,
    lease: Lease,
    prepared: Prepared,
    grace: Duration,
    limits: Limits,
    events: &Events,
) -> Result<i32> {
    // Catch the forwarded signals before the child exists, so none is lost in between.
    let mut signals = Signals::catch(&FORWARDED)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    let terminal = sys::Foreground::ours();
    let program = prepared.program().to_os_string();
    let mut session = Session::new(shards.clone(), lease);
    let job = match prepared
        .start(session.lease(), terminal.is_some(), out)
        .await
    {
        Ok(job) => job,
        Err(e) => {
            // The job never ran: its successor hears that it failed, with dlock's code.
            session
                .release(Outcome::Failed(Some(i32::from(e.code))))
                .await;
            return Err(e);
        }
    };
    // The command owns stdout now: under --json, dlock prints no object of its own.
    out.hand_stdout_over();
    if let Some(t) = &terminal {
        t.give(job.pgid);
    }
    out.debug(&format!(
        "started {:?} as pid {} under fence {}",
        program,
        job.pgid,
        session.lease().grants[0].fence
    ));
    session.keep_alive(events);
    let mut run = Supervised::new(session, out, job, terminal, grace, limits, events);
    // On a terminal, the shell's SIGCONT (`fg`, `bg`) resumes the command after dlock stopped
    // itself with it (see `job`).
    let mut conts = match &run.terminal {
        Some(_) => Some(
            Signals::catch(&[libc::SIGCONT])
                .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?,
        ),
        None => None,
    };
    let status = run.watch(&mut signals, &mut conts).await;
    run.settle(status).await
}

/// One supervised run: the job, the lease, and what has been done to stop it so far.
struct Supervised<'a> {
    /// The lease, renewed while the command runs, and released once it has ended.
    session: Session<Shards>,
    /// Where errors, warnings and `-v` lines go.
    out: &'a Output,
    /// `--events`: a loss, lingering processes, the release.
    events: &'a Events,
    /// The lease's fences, for every event (kept: the lease is the session's).
    fences: Vec<u64>,
    /// The command's process group (its pid), which dlock signals.
    pgid: u32,
    /// dlock's end of the watchdog, which reports the command's life and stops the rest of
    /// its tree.
    dog: watchdog::Watchdog,
    /// The terminal, when dlock had it: given to the command, taken back on Ctrl-Z.
    terminal: Option<sys::Foreground>,
    /// `--kill-grace`: SIGTERM this long before the deadline, SIGKILL this long after it.
    grace: Duration,
    /// How long before the deadline the SIGKILL goes at the latest (see `margin`).
    margin: Duration,
    /// `--hold-min` and `--max-runtime`.
    limits: Limits,
    /// When the command started: `--max-runtime` and `--hold-min` count from it.
    started: Instant,
    /// The last deadline the watchdog was given (a renewal moves it; only a change is sent).
    pushed: Instant,
    /// The user suspended the job (Ctrl-Z) at least once: a lease that ran out meanwhile
    /// ran out because of that, not because dlock failed.
    suspended: bool,
    /// What has been done to stop the command (see `stop`); it only goes forward.
    stop: Stop,
    /// Whether the lease is held, late or lost, as the job is told it (the lease file, the
    /// `renew-late` event, `--warn-signal`, `--on-lost`): its own state beside the stop's,
    /// since it moves back and forth (late, then renewed) where the stop only goes forward.
    alarm: Alarm,
}

impl<'a> Supervised<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        session: Session<Shards>,
        out: &'a Output,
        job: spawn::Job,
        terminal: Option<sys::Foreground>,
        grace: Duration,
        limits: Limits,
        events: &'a Events,
    ) -> Supervised<'a> {
        let started = Instant::now();
        let lease = session.lease();
        Supervised {
            out,
            events,
            fences: lease.grants.iter().map(|g| g.fence).collect(),
            pushed: lease.deadline,
            session,
            pgid: job.pgid,
            dog: job.dog,
            alarm: job.alarm,
            terminal,
            grace,
            margin: margin(grace),
            limits,
            started,
            suspended: false,
            stop: Stop::Running,
        }
    }

    /// `--max-runtime`: when the command gets SIGTERM for running too long.
    fn stop_at(&self) -> Option<Instant> {
        self.limits.max_runtime.map(|d| self.started + d)
    }

    fn lease(&self) -> &Lease {
        self.session.lease()
    }

    fn names(&self) -> String {
        self.lease().req.names.join(", ")
    }

    fn lost_event(&self, why: &str) {
        self.events.emit(
            "lost",
            &self.lease().req.names,
            events::with(events::fences(&self.fences), json!({ "reason": why })),
        )
    }

    /// Until the command (the watchdog, whose status is the command's) has ended.
    async fn watch(
        &mut self,
        signals: &mut Signals,
        conts: &mut Option<Signals>,
    ) -> std::io::Result<ExitStatus> {
        let never = self.started;
        loop {
            let health = self.session.health();
            if self.follow(&health) {
                return self.ended().await;
            }
            let kill_at = self.stop.lost_kill_at(health.deadline - self.margin);
            let overrun_kill_at = self.stop.overrun_kill_at();
            let stop_at = self.stop_at();
            let term_at = health.deadline - self.grace;
            let late_at = alarm::late_at(health.deadline, self.lease().req.ttl);
            tokio::select! {
                sig = signals.recv() => self.forward(sig),
                // The renewer ends only after reporting a loss; then it is heard no more.
                () = self.session.changed() => {}
                event = self.dog.event() => match event {
                    watchdog::Event::Stopped => self.suspend().await,
                    watchdog::Event::Lingering(status) => self.lingering(status),
                    watchdog::Event::Exited(status) => return Ok(ExitStatus::from_raw(status)),
                },
                Some(_) = async { Some(conts.as_mut()?.recv().await) }, if conts.is_some() => {
                    if let Some(t) = &self.terminal {
                        self.out.debug("continued; resuming the command");
                        job::resume(t, self.pgid);
                    }
                }
                _ = sleep_until(term_at), if !self.stop.losing() => {
                    // A dlock stopped (SIGSTOP) past the deadline wakes after the watchdog
                    // has stopped the command: claim no signal that is not sent.
                    if self.already_over() {
                        return self.ended().await;
                    }
                    self.unrenewed(&health);
                }
                _ = sleep_until(late_at), if self.alarm.state() == State::Held && !self.stop.losing() => {
                    self.alarm.late(health.deadline, None, self.events);
                }
                _ = sleep_until(stop_at.unwrap_or(never)),
                    if stop_at.is_some() && self.stop.may_overrun() => self.overrun(),
                _ = sleep_until(overrun_kill_at.unwrap_or(never)), if overrun_kill_at.is_some() => {
                    self.out.debug("the command did not stop within --kill-grace; sending SIGKILL");
                    self.kill();
                }
                _ = sleep_until(kill_at.unwrap_or(never)), if kill_at.is_some() => {
                    if self.already_over() {
                        return self.ended().await;
                    }
                    self.out.error(
                        "the command did not stop in time; sending SIGKILL before the lease runs out",
                    );
                    self.kill();
                }
            }
        }
    }

    /// A signal for the job, to the command's group. A stopping one ends the job: the
    /// watchdog hears of it first, so that the command's end takes the rest of the tree.
    fn forward(&mut self, sig: i32) {
        self.out.debug(&format!(
            "forwarding {} to the command",
            sys::signal_name(sig)
        ));
        if signals::STOPPING.contains(&sig) {
            self.dog.ending();
        }
        let _ = sys::kill_group(self.pgid, sig);
    }

    /// The command exited on its own and left processes running: the lease is kept for them
    /// (the watchdog says when the last is gone). Said once, naming them.
    fn lingering(&mut self, status: i32) {
        let left = tree::running_below(self.dog.pid());
        let code = ExitStatus::from_raw(status)
            .code()
            .map_or_else(|| "ended".to_string(), |c| format!("exited {c}"));
        self.out.warn(&format!(
            "the command {code} but left {} running: {}; holding {} until {} (--leave-running \
             releases at the command's exit)",
            plural(left.len(), "process", "processes"),
            left.iter()
                .take(5)
                .map(|(pid, cmd)| format!("{pid} ({})", crate::output::printable(cmd)))
                .collect::<Vec<_>>()
                .join(", ")
                + if left.len() > 5 { ", ..." } else { "" },
            crate::output::printable(&self.names()),
            if left.len() == 1 {
                "it exits"
            } else {
                "they exit"
            },
        ));
        self.events.emit(
            "lingering",
            &self.lease().req.names,
            events::with(
                events::fences(&self.fences),
                json!({ "pids": left.iter().map(|(p, _)| p).collect::<Vec<_>>() }),
            ),
        );
    }

    /// The command has ended, or the watchdog is already stopping it (dlock was stopped past
    /// the deadline): claim no signal of dlock's own, only wait for the end.
    fn already_over(&mut self) -> bool {
        self.command_ended() || self.dog.fired()
    }

    /// The command has ended: the watchdog said so, or has exited itself.
    fn command_ended(&mut self) -> bool {
        self.dog.has_exited()
    }

    /// The command's status: from the watchdog's last word, or from its exit.
    async fn ended(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let watchdog::Event::Exited(status) = self.dog.event().await {
                return Ok(ExitStatus::from_raw(status));
            }
        }
    }

    /// Pass a renewed deadline on to the watchdog; act on a lease the store said is gone.
    /// True when the loss is heard after the command ended or the watchdog already stopped it
    /// (dlock was stopped past the deadline): then only its end is left to wait for.
    fn follow(&mut self, health: &Health) -> bool {
        if health.deadline != self.pushed {
            self.pushed = health.deadline;
            self.dog.push(self.pushed);
        }
        let Some(why) = &health.lost else {
            let trouble = health.trouble.as_deref();
            self.alarm.follow(health.deadline, trouble, self.events);
            return false;
        };
        if self.stop.gone_kill_at().is_some() {
            return false;
        }
        let at = (health.deadline - self.margin).min(Instant::now() + self.grace);
        let first = self.stop.lost().is_none();
        self.stop.gone(why, at);
        // The watchdog kills `margin / 2` before the deadline it is given: this one puts its
        // SIGKILL just after dlock's own, for a dlock stopped from now on.
        self.dog.push((at + self.margin).min(health.deadline));
        if first {
            self.lost_event(why);
            // A dlock stopped past the deadline may hear of the loss after the watchdog has
            // stopped the command: say so, not that it stops it now.
            if self.command_ended() {
                self.alarm.lost(health.deadline, why, None, self.out);
                self.out
                    .error(&format!("{why}; the command had already ended"));
                return true;
            }
            if self.dog.fired() {
                self.alarm.lost(health.deadline, why, None, self.out);
                self.out.error(&format!(
                    "{why}; the watchdog had already stopped the command"
                ));
                return true;
            }
            self.out.error(&format!("{why}; stopping the command"));
            // The warning first: the job hears why before it hears SIGTERM.
            self.alarm
                .lost(health.deadline, why, Some(self.pgid), self.out);
            self.terminate();
        }
        false
    }

    /// No renewal by (deadline - kill grace): the lock is being lost.
    fn unrenewed(&mut self, health: &Health) {
        let why = format!(
            "the lease on {} could not be renewed and runs out in {}{}",
            self.names(),
            humantime::format_duration(self.grace),
            health
                .trouble
                .as_deref()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default()
        );
        self.out
            .error(&format!("{why}; sending SIGTERM to the command"));
        if self.stop.lost().is_none() {
            self.lost_event(&why);
        }
        self.alarm
            .lost(health.deadline, &why, Some(self.pgid), self.out);
        self.terminate();
        self.stop.lose(&why);
    }

    /// `--max-runtime` reached.
    fn overrun(&mut self) {
        self.out.debug(&format!(
            "the command reached --max-runtime {}; sending SIGTERM",
            humantime::format_duration(self.limits.max_runtime.unwrap_or_default())
        ));
        self.terminate();
        self.stop.overrun(Instant::now() + self.grace);
    }

    /// SIGTERM to the command's group (continued, if stopped), and through the watchdog to
    /// the rest of its tree.
    fn terminate(&mut self) {
        // The watchdog hears of it first: the command's end then finds it told (see
        // `watchdog::process`).
        self.dog.terminated();
        let _ = sys::kill_group(self.pgid, libc::SIGTERM);
        let _ = sys::kill_group(self.pgid, libc::SIGCONT);
    }

    /// SIGKILL to the command's group, and through the watchdog to the rest of its tree.
    fn kill(&mut self) {
        self.dog.kill();
        let _ = sys::kill_group(self.pgid, libc::SIGKILL);
        self.stop.killed_now();
    }

    /// The command was stopped (Ctrl-Z). On a terminal, the whole job stops: renew once, so
    /// the lease is held for a whole ttl from now, then stop dlock itself, which gives the
    /// shell its prompt back.
    async fn suspend(&mut self) {
        let Some(terminal) = &self.terminal else {
            // Without a terminal nothing changes: whoever stopped it will continue it.
            return;
        };
        let deadline = self.session.renew_now(self.grace).await;
        if deadline != self.pushed {
            self.pushed = deadline;
            self.dog.push(deadline);
        }
        self.suspended = true;
        // The command resumes when the shell continues dlock (the SIGCONT branch of `watch`).
        job::suspend_self(terminal);
    }
}
