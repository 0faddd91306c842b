//! One module per subcommand, and the dispatch to them. The pieces they share each have a
//! module: building a grant request (`request`), taking a lease while answering signals
//! (`acquire`), trusting the clock (`clock`), engine outcomes as pinned exit codes (`outcome`).

mod acquire;
pub mod check;
mod clock;
pub mod completions;
pub mod doctor;
pub mod extend;
mod hold;
pub mod inspect;
pub mod keepalive;
pub mod list;
pub mod lock;
pub mod multilock;
mod nested;
mod outcome;
mod request;
pub mod run;
pub mod shards;
mod timing;
pub mod unlock;
pub mod wait;
mod waiting;

pub use acquire::{acquire_any, acquire_with};
pub(crate) use clock::trust_clock;
pub use outcome::engine_error;
pub use request::{holder_request, millis, mode, mode_json};
pub use timing::{Timing, record_metrics, warnings};

use crate::cli::Command;
use crate::exit::Result;
use crate::output::Output;
use crate::shard::Shards;

/// What every command gets: the stores (as shards; one without `--shard`), the namespace, and
/// where to print. It lives here, not in `app`, so that commands need nothing from the module
/// that dispatches to them.
pub struct Ctx {
    pub shards: std::sync::Arc<Shards>,
    pub namespace: String,
    pub out: Output,
}

pub async fn run(command: Command, ctx: &Ctx) -> Result<i32> {
    match command {
        Command::Lock(a) => lock::run(a, ctx).await,
        Command::Unlock(a) => unlock::run(a, ctx).await,
        Command::Extend(a) => extend::run(a, ctx).await,
        Command::Check(a) => check::run(a, ctx).await,
        Command::Run(a) => run::run(a, ctx).await,
        Command::Multilock(a) => multilock::run(a, ctx).await,
        Command::Inspect(a) => inspect::run(a, ctx).await,
        Command::List(a) => list::run(a, ctx).await,
        Command::Wait(a) => wait::run(a, ctx).await,
        Command::Doctor(a) => doctor::run(a, ctx).await,
        Command::Shards(a) => shards::run(a, ctx).await,
        Command::Completions(a) => {
            completions::run(&a, &ctx.out);
            Ok(0)
        }
    }
}
