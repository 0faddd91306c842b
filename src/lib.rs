//! dlock: distributed locks for shell commands.
//!
//! `cli` holds the command line, `commands` one module per subcommand, `engine` the
//! majority-quorum lease over the `store` adapters, and `supervisor` the child process of
//! `run`. `app` ties them together for `main`.

pub mod app;
pub mod cli;
pub mod commands;
pub mod docs;
pub mod engine;
pub mod exit;
pub mod meta;
pub mod names;
pub mod output;
pub mod store;
pub mod supervisor;
pub mod sys;
