//! `dlock completions SHELL`: the completion script, generated from the clap definitions.

use crate::cli::CompletionsArgs;
use crate::output::Output;

pub fn run(args: &CompletionsArgs, out: &Output) {
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut crate::cli::command(), "dlock", &mut buf);
    out.line(String::from_utf8_lossy(&buf).trim_end());
}
