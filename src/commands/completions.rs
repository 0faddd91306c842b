//! `dlock completions SHELL`: the completion script, generated from the clap definitions.

use crate::cli::CompletionsArgs;
use crate::output::Output;

pub fn run(args: &CompletionsArgs, out: &Output) {
    let script = crate::docs::completion(args.shell);
    out.line(String::from_utf8_lossy(&script).trim_end());
}
