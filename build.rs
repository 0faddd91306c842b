//! Link the `dlock` binary as a position-dependent executable (`-no-pie`).
//!
//! A position-independent one has its ~26,000 pointers in tables (vtables, clap's and the
//! stores' static data) fixed up by the loader at every start: a copy-on-write page fault for
//! each of the ~120 pages they sit on, before `main`, on every command (measured in
//! BENCHMARKS.md: 290 page faults for `dlock --version`, 164 without). Linked at a fixed
//! address, the tables are read straight from the file, touched only where used. The shared
//! libraries, the stack and the heap are still placed at random; the binary's own code is not.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
