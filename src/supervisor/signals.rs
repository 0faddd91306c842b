//! Catching the signals dlock forwards to its child or answers by cleaning up.

use futures_util::future::select_all;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// What a user or a service manager sends to stop or poke a job.
pub const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// While waiting for a lock, these end the wait (and leave nothing queued behind).
pub const STOPPING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The forwarded signals that were ignored when dlock started (`nohup`, a caller's `trap ''
/// HUP`), as a mask of signal numbers: they stay ignored, by dlock and by the command, as for
/// any program its caller starts. Read once, before dlock catches any (`Signals::catch` asks
/// first), since a caught signal's old disposition is gone.
pub fn ignored_at_start() -> u64 {
    static MASK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| {
        let mut mask = 0;
        for s in FORWARDED {
            // SAFETY: sigaction only reads the disposition into a zeroed struct.
            let ignored = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(s, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
            };
            if ignored {
                mask |= 1 << s;
            }
        }
        mask
    })
}

pub struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    /// Catch these signals from now on (instead of dying of them), but those ignored when
    /// dlock started, which stay ignored.
    pub fn catch(signals: &[i32]) -> std::io::Result<Signals> {
        let ignored = ignored_at_start();
        let streams = signals
            .iter()
            .filter(|&&s| ignored & (1 << s) == 0)
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal that arrives (never, when every one asked for was ignored at start).
    pub async fn recv(&mut self) -> i32 {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let futs = self
            .streams
            .iter_mut()
            .map(|(n, s)| Box::pin(async move { s.recv().await.map(|_| *n) }));
        match select_all(futs).await {
            (Some(n), _, _) => n,
            // A stream only ends when the runtime shuts down; nothing more will come.
            _ => std::future::pending().await,
        }
    }
}
