//! Waiters whose keys an operation has not read. NATS's line is loose (`Line::Loose`): a
//! grant never looks at the waiters, and a release looks at them only from the head of the
//! line to the first live one, the one it rings. So an operation reads only the waiter keys
//! it guessed (those its process's last write named, beside the record) and presumes the
//! others live; the rules ask `Backend::waiter_alive` of each waiter whose life decides
//! something, and a decision that asked of a presumed one is made again once its key is
//! read. A release whose head waiter was in line at its holder's grant (a handoff) and a
//! waiter's grant then take one round trip to read instead of two: the waiters who queued
//! since are never read.
//!
//! The rules call `waiter_alive` synchronously, inside `decide`, on the thread that called
//! it: what is presumed and what was asked live in a thread-local for that call only.

use std::cell::RefCell;
use std::collections::HashSet;

#[derive(Default)]
struct Scope {
    presumed: HashSet<String>,
    asked: Vec<String>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Clears the scope however `deciding` ends (a panicking rule included).
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        SCOPE.with(|s| s.borrow_mut().take());
    }
}

/// Run `f` (a call of the rules) with the waiters of `presumed` taken as live; its result,
/// and those of them whose life the rules asked about.
pub fn deciding<T>(presumed: HashSet<String>, f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let _guard = Guard;
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope {
            presumed,
            asked: Vec::new(),
        })
    });
    let out = f();
    let asked = SCOPE.with(|s| s.borrow_mut().take().map(|s| s.asked));
    (out, asked.unwrap_or_default())
}

/// The rules ask whether `token`'s waiter still waits: note it if it was presumed. A waiter
/// whose key was read is judged by its row's expiry alone (a gone key ran out at `now`).
pub fn ask(token: &str) {
    SCOPE.with(|s| {
        if let Some(scope) = s.borrow_mut().as_mut()
            && scope.presumed.contains(token)
            && !scope.asked.iter().any(|t| t == token)
        {
            scope.asked.push(token.to_string());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_presumed_waiters_that_were_asked_about_are_returned() {
        let presumed: HashSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let ((), asked) = deciding(presumed, || {
            ask("b");
            ask("c");
            ask("b");
        });
        assert_eq!(asked, ["b"]);
        // Outside a decision nothing is noted, and the next decision starts empty.
        ask("a");
        let ((), asked) = deciding(HashSet::new(), || ask("a"));
        assert!(asked.is_empty());
    }
}
