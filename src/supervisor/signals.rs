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

pub struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    /// Catch these signals from now on (instead of dying of them).
    pub fn catch(signals: &[i32]) -> std::io::Result<Signals> {
        let streams = signals
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal that arrives.
    pub async fn recv(&mut self) -> i32 {
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
