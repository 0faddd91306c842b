//! The `dlock` binary: everything it does lives in the library; `app::main` runs it.

fn main() {
    std::process::exit(dlock::app::main());
}
