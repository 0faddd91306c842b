//! The record engine: the `Store` contract over any store that can read a few records and
//! write them back atomically, one transaction per operation. The PostgreSQL, MySQL, file
//! and memory stores are its backends; the lock rules (`rules`) exist once, here, beside the
//! Redis scripts that must stay Lua.
//!
//! Each operation is one transaction (`Backend::transact`): load the names' records (holders,
//! waiters, fence, how the last lease ended) with the store's clock, decide by `rules`, write,
//! commit. Expiry is judged only by the clock reading taken inside that transaction. A
//! backend knows its storage, its connection and how it wakes waiters; nothing in here knows
//! which one it talks to.
//!
//! # Plugging in a backend
//! Implement `Backend` and open the store as `RecordStore::new(backend)`. The required
//! methods are `describe`, `transact`, `listen`, `shard_list` and `held_names`; the rest have
//! defaults that suit a durable server (its clock in ms, waiters as hints that live two
//! seconds: `Rules::SQL`). Where the store differs, say so in `Backend::rules`, as data (the
//! file store's fair line, its nanosecond clock, records a reboot may lose); the rules read
//! it, so no backend writes a rule of its own.
//!
//! A store with transactions over several records (PostgreSQL, MySQL) locks the records in
//! name order, loads them, calls `decide` and applies its writes before COMMIT. A store that
//! can only write one record at a time if its version is unchanged (S3 `If-Match`, DynamoDB
//! condition expressions, NATS KV's expected revision) implements `transact` so:
//! 1. read each name's record with its version (etag, revision); a missing one loads as
//!    `Rows { name, ..Rows::default() }` with "absent" as its version;
//! 2. read the server's clock (a response's `Date`, the KV's own time), never the host's,
//!    and call `decide` once with it;
//! 3. write each record the writes name (whole, from `rows`, is simplest), each with "only
//!    if its version is still the one read" (create with "only if absent");
//! 4. on a conflict, undo the records already written by this attempt (write back what was
//!    read, again conditionally), and start again from 1, with a short jittered pause, until
//!    the engine's timeout. If the undo meets a conflict too, answer an error: the attempt
//!    counts as unheard (`RecordStore` marks it before `transact`), so its token is released
//!    by token later, which removes whatever of it was written.
//!
//! Then a multi-name grant is all or nothing, as the contract asks. Wake-ups (`Write::Wake`)
//! go out only after the last write succeeded.

mod line;
pub mod rules;
mod store;

use async_trait::async_trait;

use super::{
    Acquire, Granted, Health, HealthQuery, Listener, Recall, StoreError, StoreResult, TagWrite,
};
use rules::{Rows, Rules, WaiterRow, Write};
pub use store::RecordStore;

/// Decides on the rows a transaction loaded, given the store's clock (`Rules::tick`s; ms
/// unless the backend's rules say otherwise).
pub type Decide<'a> = &'a mut (dyn FnMut(i64, &mut [Rows]) -> Decision + Send);

/// What a transaction writes, and whether its commit must reach the disk before it returns.
pub struct Decision {
    pub writes: Vec<Write>,
    /// A grant, a renewal or a fence raise must survive a crash of the server: forgetting one
    /// could let a second holder in or repeat a fence. Everything else (a release, a waiter
    /// queueing, a purge of the expired) may commit without waiting for the disk, where the
    /// database allows that per transaction: a crash that forgets it leaves a lease to expire
    /// at its deadline, as a crashed holder's would, and any later flushed commit flushes it
    /// too, the log being one sequence.
    pub flush: bool,
}

/// One store's storage: its records, its connection, its wake-ups.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The URL with secrets redacted.
    fn describe(&self) -> &str;

    /// One transaction over `names` (sorted): create the missing records (with `create`),
    /// lock the records in name order, load every name's rows (a name with no record loads as
    /// empty) and then the store's clock; apply what `decide` returns; commit. See the
    /// module's comment for a store without multi-record transactions.
    async fn transact(&self, names: &[String], create: bool, decide: Decide<'_>)
    -> StoreResult<()>;

    /// `transact` for a request's first attempt (records created if missing). A crowd that
    /// arrives at once makes its first attempts together; where a store queues record locks
    /// in arrival order, a release or a woken waiter's grant would queue behind the whole
    /// crowd. A backend may keep first attempts in a queue of their own, apart from the
    /// records, so that those wait behind at most one of them. By default, `transact`.
    async fn transact_arrival(&self, names: &[String], decide: Decide<'_>) -> StoreResult<()> {
        self.transact(names, true, decide).await
    }

    /// Start listening for the wake-ups addressed to this waiter's token.
    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>>;

    /// Start listening for a change that may admit `req` (before its next queued attempt).
    /// By default, the wake-ups addressed to its token (`listen`).
    async fn listen_for(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.listen(&req.token).await
    }

    /// This process's bell for a waiter (see `rules::WaiterRow::bell`).
    fn bell(&self, _token: &str) -> i64 {
        0
    }

    /// The namespace's shard-list record (`Store::shard_list`), apart from the locks.
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String>;

    /// Names under the prefix that have a holder row (live or not).
    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>>;

    /// What `dlock doctor` reports of the server (version, clock, durability).
    async fn health(&self, _query: HealthQuery) -> StoreResult<Health> {
        Ok(Health::default())
    }

    /// Release `token` on `names` for an attempt whose answer was never heard: one message on
    /// the connection already open (a new one cannot start while answers are lost: its
    /// handshake's answers are lost too), sent before any answer is awaited, so it reaches the
    /// server even when no answer ever comes back. The message ends whatever transaction the
    /// unheard attempt left open, then, in one transaction that locks the records as every
    /// grant does, deletes the token's own holder and waiter rows (never another token's) and
    /// wakes the next waiter of each name it held. It leaves each record's `previous` as it
    /// was (see `RecordStore::release`). `Some(held)` once its answer is heard; `None` when the
    /// answer cannot be trusted, the server answered with an error, or there is no open
    /// connection: the caller then releases the usual way too. By default `None`: a store
    /// whose answers cannot be lost this way releases the usual way only.
    async fn release_unheard(&self, _names: &[String], _token: &str) -> Option<bool> {
        None
    }

    /// Whether this process's waiter for `token` is known to hear the store's wake-ups: a
    /// waiter far back in line looks less often only then (`rules::Far`). By default no.
    fn hears(&self, _token: &str) -> bool {
        false
    }

    /// How this store's records behave where stores differ (see `Rules`).
    fn rules(&self) -> Rules {
        Rules::SQL
    }

    /// Whether a waiter whose row has not expired still waits, for stores that can tell
    /// (`rules::Ctx::alive`). Called inside the transaction, on the waiters that decide.
    fn waiter_alive(&self, _row: &WaiterRow) -> bool {
        true
    }

    /// The names' rows and the clock, read without a transaction, where the store can read
    /// them consistently that way (each record replaced whole): used for `inspect`, and for
    /// an attempt that a look shows to be busy, changing nothing. `None`: use a transaction.
    /// `queue`/`token`: the attempt's, for a backend that knows the look would be wasted.
    fn peek(&self, _names: &[String], _token: Option<(&str, bool)>) -> Option<(i64, Vec<Rows>)> {
        None
    }

    /// Make ready for `req` to stand in line; false if it cannot (it then attempts without
    /// queuing, and looks again after each change or poll).
    fn ready_to_wait(&self, _req: &Acquire) -> bool {
        true
    }

    /// `token`'s request was granted or withdrawn: whatever this process kept for its wait
    /// may go.
    fn done(&self, _token: &str) {}

    /// The lease a release handed `req` (`Rules::hand_over`) and told this process of, to
    /// be taken without a transaction: its grant and what the store recalled. By default
    /// none.
    fn handed(&self, _req: &Acquire) -> Option<(Granted, Recall)> {
        None
    }

    /// What a failed renewal says: a backend may know the lease went with its storage.
    fn renew_failed(&self, e: StoreError) -> StoreError {
        e
    }

    /// `Store::reached`: a session was opened when the backend connected.
    fn reached(&self) -> bool {
        true
    }

    /// `Store::local`: the store is this host's own file system.
    fn local(&self) -> bool {
        false
    }
}
