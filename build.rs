//! Two things of the link, each to spare every start of dlock some of the dynamic loader's work.
//!
//! 1. Link the `dlock` binary as a position-dependent executable (`-no-pie`).
//!
//! A position-independent one has its ~26,000 pointers in tables (vtables, clap's and the
//! stores' static data) fixed up by the loader at every start: a copy-on-write page fault for
//! each of the ~120 pages they sit on, before `main`, on every command (measured in
//! BENCHMARKS.md: 290 page faults for `dlock --version`, 164 without). Linked at a fixed
//! address, the tables are read straight from the file, touched only where used. The shared
//! libraries, the stack and the heap are still placed at random; the binary's own code is not.
//!
//! 2. Link GCC's unwinder statically (`libgcc_eh.a`) on Linux with glibc, as `-static-libgcc`
//!    does for C programs. std asks for `libgcc_s.so` by name only for `_Unwind_*` (backtraces;
//!    dlock aborts on panic and never unwinds); with those symbols already in the binary, the
//!    linker's `--as-needed` drops the shared library, and with it a file the loader opens,
//!    maps and relocates, and a constructor that probes the CPU (`cpuid`, which traps on a
//!    virtual machine), at every start. Together with `log2` (src/main.rs), which keeps libm
//!    out the same way: 0.88 -> 0.79 ms for a hello world measured by scripts/ab.py.
//!    Where the archive is not found (another compiler, a cross build), the link is std's own.
//!
//! And one thing of the Redis store: its Lua scripts' SHA-1 (EVALSHA names a script by it),
//! computed here once rather than by every process that sends a script: 25 to 30 µs a script
//! on this machine's runs, and the release's on the path of every handoff.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    lua_hashes();
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
        && std::env::var("TARGET").ok() == std::env::var("HOST").ok()
        && let Some(dir) = libgcc_eh_dir()
    {
        println!("cargo:rustc-link-search=native={}", dir.display());
        // Whole: none of our own objects refers to the unwinder, so a plain archive would be
        // passed over before std's references to it come up.
        println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
    }
}

/// The directory of the C compiler's `libgcc_eh.a`, if it has one.
fn libgcc_eh_dir() -> Option<std::path::PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    // A compiler without the archive prints the bare name back.
    let path = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    if !out.status.success() || !path.is_absolute() || !path.is_file() {
        return None;
    }
    path.parent().map(|d| d.to_path_buf())
}

/// `$OUT_DIR/lua_sha.rs`: for each script `src/store/redis/NAME.lua` but `common.lua`, a
/// constant `NAME` holding the SHA-1 (hex) of the text a script is sent as: common.lua
/// followed by its own (the `script!` macro of src/store/redis/mod.rs).
fn lua_hashes() {
    let dir = std::path::Path::new("src/store/redis");
    println!("cargo:rerun-if-changed={}", dir.display());
    let read = |name: &str| {
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let common = read("common.lua");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("src/store/redis")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".lua") && n != "common.lua")
        .collect();
    names.sort();
    let mut out = String::new();
    for name in names {
        let text = format!("{common}{}", read(&name));
        let sha = sha1_smol::Sha1::from(text).digest().to_string();
        let konst = name.trim_end_matches(".lua").to_uppercase();
        out.push_str(&format!("pub const {konst}: &str = \"{sha}\";\n"));
    }
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("lua_sha.rs");
    std::fs::write(&dest, out).expect("lua_sha.rs");
}
