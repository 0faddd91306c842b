//! Shared fixtures: the dlock binary with a clean environment, free ports, temp dirs, and
//! real servers (one module per store) that start on loopback and stop when dropped.
//! A missing server binary fails the test with the Debian package to install.

#![allow(dead_code)]

pub mod dynamodb;
pub mod etcd;
pub mod line;
pub mod mysql;
pub mod nats;
pub mod pgbouncer;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod s3;
pub mod terminal;
pub mod zk;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// Fail (never skip) when a server binary is missing.
pub fn require(binary: &str, package: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(binary);
        if p.is_file() {
            return p;
        }
    }
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join(binary);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{binary}` is not installed: run `apt-get install -y {package}` (the tests need a real server)"
    );
}

/// Servers shared by every test of one binary, stopped (dropped) when the binary exits.
static SHARED: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

extern "C" fn stop_shared() {
    let servers = std::mem::take(&mut *SHARED.lock().unwrap_or_else(|p| p.into_inner()));
    drop(servers);
}

/// A server started once for every test of this binary that asks for it (the first caller
/// starts it, the others wait), and stopped when the binary exits. Tests get only its URL,
/// so nothing can use the server after it is stopped.
pub fn shared<S: Send + 'static>(
    cell: &'static OnceLock<String>,
    start: impl FnOnce() -> S,
    url: impl FnOnce(&S) -> String,
) -> &'static str {
    cell.get_or_init(|| {
        static AT_EXIT: Once = Once::new();
        // SAFETY: registers a plain function to run when the process exits.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(stop_shared);
        });
        let server = start();
        let u = url(&server);
        SHARED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(server));
        u
    })
}

/// A port nobody listens on right now.
///
/// Taken below the kernel's ephemeral range (where `bind(0)` and every outgoing connection
/// get their ports): a port handed out there could be taken by some client's connection before
/// the server started on it binds it (a ZooKeeper election port was, on a loaded machine).
/// Each process walks its own part of the range from a start drawn at random, so no port is
/// handed out twice in one process, and two processes rarely meet.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const LOW: u32 = 10_000;
    if ephemeral < LOW + 2_000 {
        // No room below it: the kernel's choice, as before.
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let span = ephemeral - LOW;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        rand::random::<u32>() % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below {ephemeral}");
}

/// A temp dir that lives as long as the value.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dlock-test-")
        .tempdir()
        .unwrap()
}

/// Poll `f` until it is true or `limit` passes.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// A home for one test's dlock runs: its own runtime dir (the default file store) and the
/// stores it should talk to.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub stores: Vec<String>,
}

impl Env {
    /// dlock on its default store: the embedded file store in a fresh runtime dir.
    pub fn file() -> Env {
        Env {
            dir: temp_dir(),
            stores: Vec::new(),
        }
    }

    pub fn with_stores(stores: Vec<String>) -> Env {
        Env {
            dir: temp_dir(),
            stores,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `dlock` with a clean environment: no DLOCK_* from the caller, XDG_RUNTIME_DIR in the
    /// test's own dir, and `--store` for each of the test's stores (none: DLOCK_STORE names a
    /// file store in the test's own dir).
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
        for (k, _) in std::env::vars() {
            if k.starts_with("DLOCK_") || k == "NO_COLOR" {
                c.env_remove(k);
            }
        }
        let runtime = self.dir.path().join("runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        c.env("XDG_RUNTIME_DIR", &runtime);
        if self.stores.is_empty() {
            // The default store is one per user and host (in /run/lock), shared by every test
            // of this user: each test's file store is its own through DLOCK_STORE instead.
            c.env("DLOCK_STORE", file_store(&runtime));
        }
        for s in &self.stores {
            c.arg("--store").arg(s);
        }
        c.stdin(Stdio::null());
        c
    }

    /// `sh -c SCRIPT` for scripts that call dlock themselves: dlock's environment as `cmd`
    /// sets it up, `$STORES` holding the `--store` flags, stdout discarded.
    pub fn shell(&self, script: &str) -> Command {
        let probe = self.cmd();
        let mut c = Command::new("sh");
        c.args(["-c", script]).stdout(Stdio::null());
        for (k, v) in probe.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let stores: Vec<String> = self.stores.iter().map(|s| format!("--store {s}")).collect();
        c.env("STORES", stores.join(" "));
        c
    }

    /// Start dlock with these arguments in the background, its output piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        let mut c = self.cmd();
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().expect("spawn dlock")
    }

    /// `dlock run ARGS... -- sh -c SCRIPT` in the background, its output piped.
    pub fn spawn_run(&self, args: &[&str], script: &str) -> Child {
        let mut full = vec!["run"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "sh", "-c", script]);
        self.spawn(&full)
    }

    /// A `run` of `name` that holds it until the file `go` exists; returned once it holds.
    pub fn hold_until(&self, name: &str, go: &Path) -> Child {
        let script = format!("while [ ! -e {} ]; do sleep 0.02; done", go.display());
        let holder = self.spawn_run(&[name], &script);
        assert!(
            wait_for(Duration::from_secs(10), || self.held(name)),
            "{name} was never held"
        );
        holder
    }

    /// `n` runs of `name`, the i-th (from 1) running `script(i)`, each started once the one
    /// before is queued (so they stand in that order); returned once all are.
    pub fn queue_runs(&self, name: &str, n: usize, script: impl Fn(usize) -> String) -> Vec<Child> {
        let mut waiting = Vec::new();
        for i in 1..=n {
            waiting.push(self.spawn_run(&[name], &script(i)));
            assert!(
                wait_for(Duration::from_secs(10), || self.waiters(name) == i),
                "waiter {i} did not queue"
            );
        }
        waiting
    }

    /// `dlock --json inspect NAME`, parsed.
    pub fn inspect(&self, name: &str) -> serde_json::Value {
        let o = self.run(&["--json", "inspect", name]);
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("inspect {name}: {e}: {}{}", stdout(&o), stderr(&o)))
    }

    /// How many waiters `dlock inspect` lists on `name`.
    pub fn waiters(&self, name: &str) -> usize {
        self.inspect(name)["waiters"]
            .as_array()
            .map_or(0, |w| w.len())
    }

    /// Whether the dlock process `pid` is queued on `name`: `inspect` lists it among the
    /// waiters (a waiter's `meta.pid` is its dlock's). Only where the store keeps a waiter's
    /// metadata (the file store does; Redis does not: count its waiters with `waiters`).
    pub fn queued(&self, name: &str, pid: u32) -> bool {
        self.inspect(name)["waiters"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["meta"]["pid"] == pid))
    }

    /// Whether `inspect` finds `name` held.
    pub fn held(&self, name: &str) -> bool {
        self.inspect(name)["held"] == true
    }

    /// Run dlock with these arguments to completion (with a generous safety limit).
    pub fn run(&self, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(args);
        output_within(c, Duration::from_secs(60))
    }
}

/// The test's own file store under `runtime` (created here, so dlock has nothing to announce).
pub fn file_store(runtime: &Path) -> String {
    let dir = runtime.join("dlock");
    std::fs::create_dir_all(&dir).unwrap();
    format!("file://{}", dir.display())
}

/// A file's text, or empty if it is not there (yet).
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The wall clock in ns since the epoch, as a child's `date +%s%N` writes it.
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Wait for a spawned dlock (at most `limit`) and collect its output.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let status = wait_child(&mut child, limit).expect("dlock did not finish in time");
    let mut o = child.wait_with_output().unwrap();
    o.status = status;
    o
}

/// Run a command, killing it if it takes longer than `limit` (so a hang fails, not blocks).
pub fn output_within(mut c: Command, limit: Duration) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dlock");
    let status = wait_child(&mut child, limit)
        .unwrap_or_else(|| panic!("{c:?} did not finish within {limit:?}"));
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Stop a server the way its own shutdown is asked for (SIGTERM), killing it if it is still
/// running after 20 s.
pub fn terminate(child: Option<Child>) {
    if let Some(mut c) = child {
        signal(c.id(), libc::SIGTERM);
        wait_child(&mut c, Duration::from_secs(20));
    }
}

/// Wait for a child at most `limit`; kill it and return None if it is still running then.
/// A suite started from a script's background (`scripts/test &`, `nohup`) inherits SIGINT,
/// SIGQUIT (and SIGHUP) ignored, and so would every dlock it starts, which by contract keeps
/// a signal ignored at its start ignored: the tests that interrupt dlock would then hang.
/// Each test binary sets them back to their defaults as it starts (before `main`, so before
/// any thread or child), as a terminal would have them: what a test then sends is what dlock
/// gets. A test that wants one ignored sets it in its child (`job_life`'s `nohup` case).
#[used]
#[unsafe(link_section = ".init_array")]
static DEFAULT_SIGNALS: extern "C" fn() = default_signals;

extern "C" fn default_signals() {
    for s in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
        // SAFETY: setting a disposition touches no memory of ours; nothing runs yet.
        unsafe { libc::signal(s, libc::SIG_DFL) };
    }
}

pub fn wait_child(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    wait_child_saying(child, limit, true)
}

/// `wait_child`; with `report` false, a child still running at `limit` is killed without a
/// word (a caller that expects it may stay).
pub fn wait_child_saying(child: &mut Child, limit: Duration, report: bool) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > limit {
            // What it was doing, for the failure's report (a hang under load is otherwise
            // only "did not finish").
            if report {
                eprintln!(
                    "{} did not end within {limit:?}:\n{}",
                    child.id(),
                    tree_report(child.id())
                );
            }
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `pid` and its descendants, one line each: pid, state, what the kernel waits on (per
/// thread for `pid` itself) and the command line.
fn tree_report(pid: u32) -> String {
    let line = |p: u32| {
        let read = |f: &str| std::fs::read_to_string(format!("/proc/{p}/{f}")).unwrap_or_default();
        let cmd = read("cmdline").replace('\0', " ");
        let waits: Vec<String> = std::fs::read_dir(format!("/proc/{p}/task"))
            .map(|d| {
                d.flatten()
                    .map(|t| {
                        let w = t.path().join("wchan");
                        std::fs::read_to_string(w).unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        format!("  {p} {:?} [{}] {}", state(p), waits.join(","), cmd.trim())
    };
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        out.push(line(p));
        todo.extend(children_of(p));
    }
    out.join("\n")
}

pub fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {o:?}"))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// Assert an exit code, showing everything dlock said when it differs.
#[track_caller]
pub fn assert_code(o: &Output, expected: i32) {
    assert_eq!(
        o.status.code(),
        Some(expected),
        "expected exit {expected}\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

/// Send a signal to a process.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain syscall.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// The processes whose parent is `pid`, read from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|x| x.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// The one liveness test: the process exists and is not a zombie. A killed child whose
/// parent is stopped (or has not reaped it yet) stays a zombie, which `kill(pid, 0)` still
/// finds although it can no longer do anything.
pub fn running(pid: u32) -> bool {
    !matches!(state(pid), Some('Z') | Some('X') | None)
}

/// A process's state letter from /proc (`R`, `S`, `T` stopped, `Z` zombie...), None once it
/// is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next())
}

/// libfaketime's preload library, for tests of a client whose clock is bent.
pub fn libfaketime() -> PathBuf {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1");
    assert!(
        p.is_file(),
        "libfaketime is not installed: run `apt-get install -y faketime`"
    );
    p
}

/// A `FAKETIME` offset under which a process's monotonic clock starts where the kernel's is.
/// libfaketime gives CLOCK_MONOTONIC the faked wall-clock time: with `+0` it is decades off
/// the kernel's, and dlock refuses such a clock at start-up. Set back by the distance between
/// the two clocks, it passes that check, and a later step or a rate bends it mid-run.
pub fn honest_offset() -> f64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    -(wall - dlock::sys::monotonic()).as_secs_f64()
}

/// The shell child used by exclusion tests: logs entry and exit with its fence, O_APPEND;
/// stopped by SIGTERM (a lost lease), it logs its exit as it goes.
pub fn critical_section(log: &Path, hold_ms: u64) -> String {
    format!(
        "trap 'echo \"exit $DLOCK_FENCE $$\" >> {log}; exit 143' TERM; echo \"enter $DLOCK_FENCE $$\" >> {log}; \
         sleep {secs} & wait $!; echo \"exit $DLOCK_FENCE $$\" >> {log}",
        log = log.display(),
        secs = hold_ms as f64 / 1000.0
    )
}

/// Start `clients` concurrent `dlock run NAME` processes whose children log their critical
/// sections, wait for all, and check that no two sections overlapped and that fences rose
/// strictly in entry order. Returns the fences in entry order.
pub fn check_exclusion(env: &Env, name: &str, clients: usize, extra: &[&str]) -> Vec<u64> {
    let log = env.path(&format!("{name}.log"));
    let script = critical_section(&log, 20);
    let mut children: Vec<Child> = (0..clients)
        .map(|_| {
            let mut c = env.cmd();
            c.args(["run", name, "--ttl", "10s"])
                .args(extra)
                .args(["--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for c in &mut children {
        let status = wait_child(c, Duration::from_secs(60)).expect("a dlock run hung");
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "dlock run failed: {status:?}: {err}");
    }
    assert_sections(&std::fs::read_to_string(&log).unwrap(), clients)
}

/// Parse a critical-section log: every `enter F` is followed by its own `exit F` before any
/// other entry, and F rises strictly. Returns the fences.
#[track_caller]
pub fn assert_sections(log: &str, expected: usize) -> Vec<u64> {
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), expected * 2, "log:\n{log}");
    let mut fences = Vec::new();
    for pair in lines.chunks(2) {
        let enter: Vec<&str> = pair[0].split_whitespace().collect();
        let exit: Vec<&str> = pair[1].split_whitespace().collect();
        assert_eq!(enter[0], "enter", "two holders at once:\n{log}");
        assert_eq!(exit[0], "exit", "two holders at once:\n{log}");
        assert_eq!(enter[1..], exit[1..], "sections interleave:\n{log}");
        let fence: u64 = enter[1].parse().expect("DLOCK_FENCE is a number");
        if let Some(&last) = fences.last() {
            assert!(fence > last, "fence {fence} after {last}:\n{log}");
        }
        fences.push(fence);
    }
    fences
}

/// What the next holder of a lock saw (see `next_holder`).
pub struct Next {
    /// What its command was told: `$DLOCK_PREVIOUS`.
    pub previous: String,
    /// When it got the lock (`unix_ms` of its `acquired` event) if it had to wait for it;
    /// None when the lock was free at its first try.
    pub waited_until: Option<u64>,
}

impl Next {
    /// Assert the lock was free for it within `limit` of `since` (unix ms, what happened
    /// then). Measured on dlock's own clock, so a next holder that started late on a busy
    /// machine (and found the lock free at once) does not count against the lock.
    #[track_caller]
    pub fn assert_freed_within(&self, since: (u64, &str), limit: Duration) {
        let (since_ms, what) = since;
        let took = self.waited_until.map(|at| at.saturating_sub(since_ms));
        assert!(
            took.is_none_or(|t| t < limit.as_millis() as u64),
            "the next holder got in {took:?} ms after {what} (limit {limit:?})"
        );
    }
}

/// The next holder: `dlock run NAME -w 10s --events FILE` whose child prints
/// `$DLOCK_PREVIOUS`.
#[track_caller]
pub fn next_holder(env: &Env, name: &str) -> Next {
    let log = env.path(&format!("{name}.next.events"));
    let _ = std::fs::remove_file(&log);
    let o = env.run(&[
        "run",
        name,
        "-w",
        "10s",
        "--events",
        &log.display().to_string(),
        "--",
        "sh",
        "-c",
        "echo $DLOCK_PREVIOUS",
    ]);
    assert_code(&o, 0);
    let acquired = event(&log, "acquired").expect("an acquired event");
    let waited = acquired["waited_ms"].as_u64().unwrap_or(0) > 0;
    Next {
        previous: stdout(&o),
        waited_until: waited.then(|| acquired["unix_ms"].as_u64().expect("unix_ms")),
    }
}

/// The `--events` lines written to `path` so far, parsed. A last line not yet ended (still
/// being written) is left out; any other line must parse.
pub fn events(path: &Path) -> Vec<serde_json::Value> {
    let text = read(path);
    let whole = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The first event of this kind written to `path`, if there is one yet.
pub fn event(path: &Path, kind: &str) -> Option<serde_json::Value> {
    events(path).into_iter().find(|e| e["event"] == kind)
}

/// The `unix_ms` of the first event of this kind in `path` (dlock's own wall clock).
pub fn event_ms(path: &Path, kind: &str) -> Option<u64> {
    event(path, kind).and_then(|e| e["unix_ms"].as_u64())
}

/// The wall clock in ms since the epoch, the clock of `unix_ms` in dlock's events.
pub fn now_ms() -> u64 {
    (now_ns() / 1_000_000) as u64
}

/// The names `dlock --json list PREFIX` reports as held, in its order.
pub fn listed(env: &Env, prefix: &str) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&env.run(&["--json", "list", prefix]))).unwrap();
    v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect()
}

/// A self-signed CA and a server certificate for 127.0.0.1 and localhost signed by it, in
/// `dir`: (CA, certificate, key).
pub fn tls_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = require("openssl", "openssl");
    let p = |f: &str| dir.join(f);
    let run = |args: &[&str]| {
        let o = Command::new(&openssl)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=dlock test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
    (p("ca.pem"), p("server.pem"), p("server.key"))
}

/// Every file under `dir`, at any depth (the repository's own trees, for tests that read the
/// source as text).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let (mut todo, mut files) = (vec![dir.to_path_buf()], Vec::new());
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            files.push(p);
        }
    }
    files
}

/// PATH with the dlock under test first: for scripts that call `dlock` by name.
pub fn path_with_dlock() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_dlock")).parent().unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
