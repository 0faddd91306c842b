//! The `dlock` binary: everything it does lives in the library; `app::main` runs it.
//!
//! On Linux with glibc the C `main` is ours (`no_main`), not std's: std's start-up reads
//! /proc/self/maps to find the main thread's stack guard and installs a stack-overflow handler
//! on an alternate stack, work every run paid before parsing its first argument. What of it
//! dlock relies on is done here: SIGPIPE ignored, so a closed pipe is an error to handle, not a
//! death with a lease held (the command gets SIGPIPE at its default again: see
//! `supervisor::exec`). std still has the arguments (glibc hands them to its initialiser;
//! elsewhere std reads them in its own start-up, so other targets keep it), and
//! `process::exit` flushes stdout.
// Not under `cargo test`: the test harness's own main must stay the one that runs.
#![cfg_attr(all(target_os = "linux", target_env = "gnu", not(test)), no_main)]

#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: setting a signal's disposition to SIG_IGN touches no memory of ours; argv is
    // the process's own, as the C runtime hands it to main.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // So that the watchdog can show another name in `ps` (see `sys::retitle`).
        dlock::sys::note_args(argc, argv);
    }
    std::process::exit(dlock::app::main());
}

/// The one function of the system's libm that dlock's dependencies call (big-number radix
/// conversion in the MySQL client), defined here so that the linker's `--as-needed` leaves
/// libm.so out: one shared library fewer for the loader to open, map and relocate at every
/// start (see build.rs). Pure Rust, from the rust-lang project's port of musl's libm.
#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
#[unsafe(no_mangle)]
extern "C" fn log2(x: f64) -> f64 {
    libm::log2(x)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(test))))]
fn main() {
    std::process::exit(dlock::app::main());
}
