//! What `dlock doctor` says of a store's memory (`engine::amnesia`): whether it can lose its
//! data on a restart, whether it still has the marker doctor left on its scratch name, how
//! long the leases it holds run on (its horizon), and what a restart without its data would
//! do now. Over a quorum, a warning when a majority can forget at once: that looks exactly
//! like a first use, which no client can tell apart.

use std::time::Duration;

use serde::Serialize;

use super::{Report, bounded};
use crate::store::{Finding, Severity, Store};

/// What doctor's first lease on its scratch name found there.
#[derive(Clone, Copy)]
pub(super) struct FirstLease {
    /// The store's marker on the name (`Recall::marked`; always true on a store that keeps
    /// its data).
    pub(super) marked: bool,
    /// No lease on the name had ended before: doctor never ran on this store (or the store
    /// lost its data since it did).
    pub(super) never: bool,
}

#[derive(Serialize)]
pub(super) struct Memory {
    /// The store can lose its data on a restart (its persistence finding is not "ok").
    can_forget: bool,
    /// The marker doctor left on its scratch name last time was there (None: not asked).
    marker: Option<bool>,
    /// There was nothing of doctor's on the store: this run wrote the first marker.
    first_run: bool,
    /// How long the longest live lease on the store runs on, by its clock.
    horizon_ms: u64,
    /// What a restart without its data would do now.
    restart_empty: String,
}

/// Read the store's memory after doctor's own lease on `scratch` (`first`: what that attempt
/// found), and leave the marker for the next run.
pub(super) async fn examine(
    store: &dyn Store,
    scratch: &str,
    first: Option<FirstLease>,
    findings: &[Finding],
    limit: Duration,
) -> Option<Memory> {
    let can_forget = findings
        .iter()
        .any(|f| f.check == "persistence" && f.severity > Severity::Ok);
    let held = bounded(limit, store.list("")).await.ok()?;
    let horizon_ms = held
        .iter()
        .flat_map(|st| &st.holders)
        .map(|h| h.ttl_left_ms)
        .max()
        .unwrap_or(0);
    let _ = bounded(limit, store.mark(&[scratch.to_string()])).await;
    Some(Memory {
        can_forget,
        // A store that keeps its data answers "marked" for every name: on doctor's first run
        // there it was not there before all the same.
        marker: first.map(|f| f.marked && !f.never),
        first_run: first.is_some_and(|f| f.never),
        horizon_ms,
        restart_empty: String::new(),
    })
}

/// What doctor's marker on the store says of its memory.
fn marker(m: &Memory) -> Finding {
    let (severity, text) = match (m.marker, m.first_run) {
        (Some(true), _) => (
            Severity::Ok,
            "present: the store kept its data since doctor last ran here",
        ),
        (Some(false), true) if !m.can_forget => (
            Severity::Note,
            "written now (doctor's first run on this store): the next run finds it present \
             unless the store loses its data",
        ),
        (Some(false), true) => (
            Severity::Note,
            "written now: doctor's first run on this store, or it lost its data since the last",
        ),
        (Some(false), false) => (
            Severity::Note,
            "absent: doctor's first run on this store, or it lost its data since the last",
        ),
        (None, _) => (Severity::Note, "could not be read"),
    };
    Finding::new("marker", severity, text)
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Per member of one quorum (`members`: indices into `reports`): the marker, horizon and
/// restart findings; and the quorum's own warning when a majority can forget at once.
pub(super) fn judge(reports: &mut [Report], members: &[usize], majority: usize) -> Vec<Finding> {
    let horizon = |k: usize, reports: &[Report]| reports[k].memory.as_ref().map(|m| m.horizon_ms);
    let forgetful = members
        .iter()
        .filter(|&&k| reports[k].memory.as_ref().is_some_and(|m| m.can_forget))
        .count();
    for &k in members {
        let others = members
            .iter()
            .filter(|&&j| j != k)
            .filter_map(|&j| horizon(j, reports))
            .max()
            .unwrap_or(0);
        let r = &mut reports[k];
        let Some(m) = r.memory.as_mut() else { continue };
        let (severity, text) = match (m.can_forget, members.len() > 1) {
            (false, _) => (Severity::Ok, "keeps its data: nothing changes".to_string()),
            (true, true) if others > 0 => (
                Severity::Note,
                format!(
                    "without its data it would abstain for up to {} (the longest lease the \
                     other members hold), then vote again; its fences would go on from its clock",
                    secs(others)
                ),
            ),
            (true, true) => (
                Severity::Note,
                "without its data it would vote again at once (no other member holds a live \
                 lease); its fences would go on from its clock"
                    .to_string(),
            ),
            (true, false) if m.horizon_ms > 0 => (
                Severity::Warn,
                format!(
                    "without its data it would forget leases that run on for up to {}: a second \
                     holder could enter that early; its fences would go on from its clock",
                    secs(m.horizon_ms)
                ),
            ),
            (true, false) => (
                Severity::Note,
                "without its data it would forget no live lease; its fences would go on from its \
                 clock"
                    .to_string(),
            ),
        };
        m.restart_empty = text.clone();
        let marker = marker(m);
        let live = if m.horizon_ms > 0 {
            format!("its live leases run on for up to {}", secs(m.horizon_ms))
        } else {
            "no live lease".to_string()
        };
        r.findings.push(marker);
        r.findings.push(Finding::new("horizon", Severity::Ok, live));
        r.findings.push(Finding::new("restart", severity, text));
    }
    let mut out = Vec::new();
    if members.len() > 1 && forgetful >= majority {
        out.push(Finding::new(
            "amnesia",
            Severity::Warn,
            format!(
                "{forgetful} of {} stores can lose their data on a restart: if a majority \
                 restarts empty at once, dlock cannot tell it from a first use and may admit a \
                 second holder; give a majority persistence (Redis: appendonly yes, appendfsync \
                 always)",
                members.len()
            ),
        ));
    }
    out
}
