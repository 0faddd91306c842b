//! How `dlock unlock --token` finds and stops a token's renewer: the renewer listens on an
//! abstract unix socket named by a digest of the token. Only who has the token can name it,
//! nothing is left on disk when the renewer dies, and an `unlock` of a lock with no renewer
//! costs one refused connect. The peer's uid is checked both ways: a socket of another user
//! is never trusted, and another user's unlock cannot stop ours.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// What `unlock` sends, and what the renewer answers once it has stopped renewing.
const STOP: &str = "stop";
pub(super) const STOPPED: &str = "stopped";
/// How long `unlock` waits for a renewer to stop (one renewal in flight, at most a store
/// timeout) before it releases anyway.
const WAIT: Duration = Duration::from_secs(5);

fn address(token: &str) -> std::io::Result<SocketAddr> {
    let digest = Sha256::digest(format!("dlock keepalive {token}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    SocketAddr::from_abstract_name(format!("dlock-keepalive-{hex}"))
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The renewer's listening socket for `token`.
pub(super) fn bind(token: &str) -> std::io::Result<tokio::net::UnixListener> {
    let l = UnixListener::bind_addr(&address(token)?)?;
    l.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(l)
}

/// The next stop request on `listener` from this user (or root); answered by `stopped`
/// once the caller has stopped renewing (`answer`).
pub(super) async fn requested(listener: &tokio::net::UnixListener) -> tokio::net::UnixStream {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            continue;
        };
        let uid = s.peer_cred().map(|c| c.uid()).ok();
        if uid != Some(euid()) && uid != Some(0) {
            continue;
        }
        let mut line = String::new();
        let read = tokio::time::timeout(WAIT, BufReader::new(&mut s).read_line(&mut line)).await;
        if matches!(read, Ok(Ok(_))) && line.trim() == STOP {
            return s;
        }
    }
}

/// Stop the renewer of `token`, if one runs on this host: true once it has stopped renewing
/// (its process then exits).
pub async fn stop(token: &str) -> bool {
    let Ok(addr) = address(token) else {
        return false;
    };
    let Ok(s) = UnixStream::connect_addr(&addr) else {
        return false;
    };
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let Ok(mut s) = tokio::net::UnixStream::from_std(s) else {
        return false;
    };
    if !s.peer_cred().is_ok_and(|c| c.uid() == euid()) {
        return false;
    }
    let talk = async {
        s.write_all(format!("{STOP}\n").as_bytes()).await?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer.trim() == STOPPED)
    };
    matches!(tokio::time::timeout(WAIT, talk).await, Ok(Ok(true)))
}
