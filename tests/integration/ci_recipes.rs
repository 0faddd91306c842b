//! The recipes of docs/ci.md, run as the CI systems run them (issue 40): each script in
//! docs/ci/ against a real store, to its end, and cancelled the way its CI cancels (SIGTERM
//! to the step's shell): the deploy it started is stopped and the lock is free.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(30);

fn recipe(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/ci")
        .join(file)
        .display()
        .to_string()
}

/// The step's shell running `recipe` (a script, or the Makefile through make), with dlock on
/// PATH and `deploy` as its DEPLOY command.
fn step(env: &Env, recipe_file: &str, deploy: &str) -> Command {
    let run = if recipe_file == "Makefile" {
        format!("exec make -s -f {} deploy", recipe(recipe_file))
    } else {
        format!("exec sh {}", recipe(recipe_file))
    };
    // The stores as the CI would give them: in DLOCK_STORE.
    let mut c = env.shell(&run);
    if let Some(s) = env.stores.first() {
        c.env("DLOCK_STORE", s);
    }
    c.env("PATH", path_with_dlock())
        .env("DEPLOY", deploy)
        .stdin(Stdio::null())
        // A file, not a pipe: a dlock left behind by a shell that died would hold a pipe open and
        // hang the test instead of failing it.
        .stderr(std::fs::File::create(env.path("step.err")).unwrap());
    c
}

/// A deploy that says where it runs and works until stopped.
fn endless_deploy(env: &Env) -> String {
    let job = env.path("deploy.sh");
    let _ = std::fs::remove_file(env.path("deploy.pid"));
    std::fs::write(
        &job,
        format!(
            "echo $$ > {}\nexec sleep 1000\n",
            env.path("deploy.pid").display()
        ),
    )
    .unwrap();
    format!("sh {}", job.display())
}

/// Run to its end, then cancelled mid-deploy: the lock `name` is held while the deploy runs,
/// free once the SIGTERM to the step's shell has been dealt with, and the deploy is gone.
fn recipe_runs_and_cancels(env: &Env, file: &str, name: &str) {
    let o = output_within(step(env, file, "true"), LIMIT);
    assert_code(&o, 0);
    let err = || read(&env.path("step.err"));
    assert_eq!(env.inspect(name)["held"], false);

    let shell: Child = step(env, file, &endless_deploy(env)).spawn().unwrap();
    let pid_file = env.path("deploy.pid");
    assert!(
        wait_for(LIMIT, || !read(&pid_file).trim().is_empty()),
        "the deploy never started"
    );
    let deploy: u32 = read(&pid_file).trim().parse().unwrap();
    assert_eq!(env.inspect(name)["held"], true);
    signal(shell.id(), libc::SIGTERM);
    let o = finish(shell, LIMIT);
    assert!(!o.status.success(), "{}", err());
    let stopped = wait_for(LIMIT, || !running(deploy));
    if !stopped {
        signal(deploy, libc::SIGKILL);
    }
    assert!(stopped, "the deploy outlived the cancel: {}", err());
    assert_eq!(env.inspect(name)["held"], false, "{}", err());
}

fn all_recipes(env: &Env) {
    recipe_runs_and_cancels(env, "gitlab.sh", "production-deploy");
    recipe_runs_and_cancels(env, "jenkins.sh", "deploy-staging");
    recipe_runs_and_cancels(env, "buildkite.sh", "deploy-app");
    recipe_runs_and_cancels(env, "Makefile", "deploy");
}

#[test]
fn ci_recipes_run_and_cancel_on_the_file_store() {
    all_recipes(&Env::file());
}

#[test]
fn ci_recipes_run_and_cancel_on_redis() {
    let redis = RedisServer::start();
    all_recipes(&Env::with_stores(vec![redis.url()]));
}

/// `hold-steps.sh begin` ... `end`: held between, by a renewer; a `begin` cancelled while it
/// waits leaves an empty token file, and its `end` releases nothing of the holder's.
#[test]
fn a_hold_across_steps_ends_with_its_end_step_and_a_cancelled_begin_releases_nothing() {
    let env = Env::file();
    let hold = |arg: &str, token_file: &str| {
        let mut c = env.shell(&format!("exec sh {} {arg}", recipe("hold-steps.sh")));
        c.env("PATH", path_with_dlock())
            .env("DLOCK_TOKEN_FILE", env.path(token_file))
            .stderr(Stdio::piped());
        c
    };
    assert_code(&output_within(hold("begin", "a"), LIMIT), 0);
    let v = env.inspect("production");
    assert!(v["holders"][0]["keepalive"]["pid"].is_u64(), "{v}");

    // Another job's begin waits; its cancel (SIGTERM while waiting), then its end.
    let waiting = hold("begin", "b").spawn().unwrap();
    assert!(wait_for(LIMIT, || env.inspect("production")["waiters"]
        .as_array()
        .is_some_and(|w| !w.is_empty())));
    signal(waiting.id(), libc::SIGTERM);
    assert!(!finish(waiting, LIMIT).status.success());
    assert_code(&output_within(hold("end", "b"), LIMIT), 0);
    assert_eq!(env.inspect("production")["held"], true);

    assert_code(&output_within(hold("end", "a"), LIMIT), 0);
    assert_eq!(env.inspect("production")["held"], false);
}

/// docs/ci.md shows each script as it is in docs/ci/: every line of the first `sh` or `make`
/// block after a link to `ci/FILE` is a line of that file (the tests above run the file).
#[test]
fn docs_ci_md_quotes_the_tested_scripts() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ci.md")).unwrap();
    let mut file: Option<String> = None;
    let mut block: Option<Vec<&str>> = None;
    let mut checked = 0;
    for line in doc.lines() {
        match (&mut block, line) {
            (Some(lines), "```") => {
                let name = file.take().unwrap();
                let text = std::fs::read_to_string(root.join("docs/ci").join(&name)).unwrap();
                for l in lines.iter().filter(|l| !l.trim().is_empty()) {
                    assert!(
                        text.lines().any(|t| t == *l),
                        "docs/ci.md quotes {name} with {l:?}, which it does not have"
                    );
                }
                checked += 1;
                block = None;
            }
            (Some(lines), l) => lines.push(l),
            (None, "```sh" | "```make") if file.is_some() => block = Some(Vec::new()),
            (None, l) => {
                if let Some(at) = l.find("](ci/") {
                    let rest = &l[at + 5..];
                    file = rest.find(')').map(|end| rest[..end].to_string());
                }
            }
        }
    }
    assert_eq!(checked, 5, "the five recipes' scripts");
}
