//! dlock: distributed locks for shell commands.
//!
//! `cli` holds the command line (`parse` reads it), `commands` one module per subcommand,
//! `engine` the majority-quorum lease over the `store` adapters, and `supervisor` the child
//! process of `run`. `app` ties them together for `main`.

// Public: what `main`, the tests, benches and fuzz targets use (the store contract, the
// engine, names, durations, generated docs). The rest serves the binary only.
pub mod app;
pub mod cli;
pub(crate) mod commands;
pub mod docs;
pub mod engine;
pub(crate) mod events;
pub(crate) mod exit;
pub(crate) mod meta;
pub(crate) mod metrics;
pub mod names;
pub(crate) mod output;
pub(crate) mod parse;
pub mod shard;
pub mod store;
pub(crate) mod supervisor;
pub mod sys;
pub(crate) mod usage;
