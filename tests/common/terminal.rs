//! An interactive bash in a real pseudo-terminal (tmux), for the tests that type at it.

use std::path::PathBuf;
use std::time::Duration;

use super::*;

const PROMPT: &str = "PROMPT>";

/// An interactive bash in a tmux server of the test's own, with the test's dlock environment.
pub struct Terminal {
    socket: PathBuf,
}

impl Terminal {
    pub fn start(env: &Env) -> Terminal {
        let tmux = require("tmux", "tmux");
        let socket = env.path("tmux.sock");
        let dlock = PathBuf::from(env!("CARGO_BIN_EXE_dlock"));
        let dir = dlock.parent().unwrap().display().to_string();
        let shell = format!(
            "env -i PATH={dir}:{path} HOME={home} TERM=xterm PS1='{PROMPT} ' \
             XDG_RUNTIME_DIR={runtime} DLOCK_STORE={store} bash --norc --noprofile -i",
            path = std::env::var("PATH").unwrap_or_default(),
            home = env.dir.path().display(),
            runtime = env.path("runtime").display(),
            // The test's own file store, as `Env::cmd` gives every other dlock of the test.
            store = file_store(&env.path("runtime")),
        );
        let ok = std::process::Command::new(&tmux)
            .arg("-S")
            .arg(&socket)
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "t"])
            .args(["-x", "160", "-y", "40", &shell])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux did not start");
        let t = Terminal { socket };
        assert!(
            wait_for(Duration::from_secs(10), || t.at_prompt()),
            "no prompt: {}",
            t.screen()
        );
        t
    }

    pub fn tmux(&self) -> std::process::Command {
        let mut c = std::process::Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    /// Keys as tmux names them (`C-z`, `Enter`) or literal text.
    pub fn keys(&self, keys: &[&str]) {
        let ok = self
            .tmux()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux send-keys {keys:?}");
    }

    pub fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    pub fn screen(&self) -> String {
        let o = self
            .tmux()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The shell waits for a command line: its prompt is the last thing on the screen.
    pub fn at_prompt(&self) -> bool {
        self.screen()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end().ends_with(PROMPT))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}
